"""When a round is due: the Δ clock and the paper's hybrid early trigger, as pure functions.

Rounds fall on the Δ grid (multiples of ``delta_s`` on the caller's clock), and only when
something happened since the last round (an arrival, a completion, a change of capacity).
With ``delta_s == 0`` a round is due at the time of the first unprocessed event. The hybrid
trigger makes a round due at once when a given share of the jobs that were running after the
last round has finished since: at the time of the completion that reached the share, never
earlier (a round cannot decide in the past), and no sooner than ``early_gap_s`` after the
last round (a burst of completions starts one early round, not one per completion).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["RoundClock"]


@dataclass
class RoundClock:
    """Tracks pending events and answers when the next round is due."""

    delta_s: float
    early_share: float | None = None
    early_gap_s: float = 0.0
    last_round_at: float | None = None
    first_pending_at: float | None = None
    running_after_round: int = 0
    finished_since_round: int = 0
    fired_at: float | None = None  # when the hybrid trigger reached its share

    def note_event(self, now: float, *, finished: bool = False) -> None:
        """Something happened at ``now`` that the next round must look at."""
        if self.first_pending_at is None or now < self.first_pending_at:
            self.first_pending_at = now
        if finished:
            self.finished_since_round += 1
            if self.fired_at is None and self._early_trigger_fired():
                self.fired_at = now

    def next_round_at(self) -> float | None:
        """The time the next round is due, or ``None`` when nothing is pending."""
        pending = self.first_pending_at
        if pending is None:
            return None
        if self.delta_s == 0:
            return pending
        tick = math.ceil(pending / self.delta_s) * self.delta_s
        if self.last_round_at is not None and tick <= self.last_round_at:
            tick = (math.floor(self.last_round_at / self.delta_s) + 1) * self.delta_s
        if self.fired_at is None:
            return tick
        early = self.fired_at
        if self.last_round_at is not None:
            early = max(early, self.last_round_at + self.early_gap_s)
        return min(tick, early)

    def is_due(self, now: float) -> bool:
        due = self.next_round_at()
        return due is not None and due <= now

    def round_done(self, now: float, *, running: int) -> None:
        self.last_round_at = now
        self.first_pending_at = None
        self.running_after_round = running
        self.finished_since_round = 0
        self.fired_at = None

    def _early_trigger_fired(self) -> bool:
        if self.early_share is None or self.running_after_round == 0:
            return False
        return self.finished_since_round >= self.early_share * self.running_after_round
