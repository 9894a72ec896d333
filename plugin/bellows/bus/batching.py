"""The Δ-window batcher: events in, one batch per closed window out. Pure, no I/O.

Windows close on a fixed grid ``start + n·Δ`` read from an injected clock (the caller passes
``now``); with ``Δ = 0`` every event is its own batch, as in the paper's event-driven mode.
Within a window the same fact (job uid, event type) is kept once, but every delivery of it
is kept to be settled after the batch is applied; a fact already applied in an earlier
window is reported at once so its delivery can be acked without applying it again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from bellows.bus.events import Event, EventKey, event_key
from bellows.jobs import SpecError

__all__ = ["Batch", "Batcher", "Offered"]

H = TypeVar("H")


class Offered(Enum):
    """What the batcher did with an offered event."""

    QUEUED = "queued"  # a new fact, waiting for its window to close
    REPEAT = "repeat"  # the same fact is already waiting; its handle rides along
    APPLIED = "applied"  # an earlier window applied it: settle the handle now


@dataclass(frozen=True)
class Batch(Generic[H]):
    """The facts of one closed window (each once, in arrival order) and every handle."""

    events: tuple[Event, ...]
    handles: tuple[H, ...]
    closed_at: float

    @property
    def keys(self) -> tuple[EventKey, ...]:
        return tuple(event_key(e) for e in self.events)


class Batcher(Generic[H]):
    """Collects events until the window closes.

    ``remember`` bounds how many applied facts are kept to recognise late repeats (the
    oldest are forgotten first; the controller's own state catches those).
    """

    def __init__(self, *, delta_s: float, start: float, remember: int = 100_000) -> None:
        if not (math.isfinite(delta_s) and delta_s >= 0):
            raise SpecError("delta_s", delta_s, "a finite number of seconds >= 0")
        if remember < 1:
            raise SpecError("remember", remember, "an integer >= 1")
        self._delta = delta_s
        self._start = start
        self._next_close = start + delta_s
        self._remember = remember
        self._pending: OrderedDict[EventKey, tuple[Event, list[H]]] = OrderedDict()
        self._applied: OrderedDict[EventKey, None] = OrderedDict()

    @property
    def delta_s(self) -> float:
        return self._delta

    @property
    def pending(self) -> int:
        """Distinct facts waiting for their window to close."""
        return len(self._pending)

    def next_close(self) -> float | None:
        """When :meth:`poll` will next have a batch (``None``: nothing waits)."""
        if not self._pending:
            return None
        return self._start if self._delta == 0 else self._next_close

    def waiting(self) -> tuple[Event, ...]:
        """The facts in the open window, in arrival order."""
        return tuple(event for event, _ in self._pending.values())

    def held(self) -> list[H]:
        """Every handle waiting in the open window (to keep their deliveries alive)."""
        return [h for _, hs in self._pending.values() for h in hs]

    def offer(self, event: Event, handle: H) -> Offered:
        """Take ``event`` (delivered with ``handle``) into the open window."""
        key = event_key(event)
        if key in self._applied:
            self._applied.move_to_end(key)
            return Offered.APPLIED
        waiting = self._pending.get(key)
        if waiting is not None:
            waiting[1].append(handle)
            return Offered.REPEAT
        self._pending[key] = (event, [handle])
        return Offered.QUEUED

    def poll(self, now: float, *, force: bool = False) -> Batch[H] | None:
        """The batch of the window that closed by ``now``, if any has events.

        ``force`` closes the open window early (the paper's hybrid trigger); the grid of
        later windows does not move.
        """
        if self._delta > 0 and now >= self._next_close:
            steps = math.floor((now - self._start) / self._delta) + 1
            self._next_close = self._start + steps * self._delta
        elif not (force or self._delta == 0):
            return None
        if not self._pending:
            return None
        if self._delta == 0 and not force:
            key = next(iter(self._pending))
            event, held = self._pending.pop(key)
            return Batch((event,), tuple(held), now)
        events = tuple(event for event, _ in self._pending.values())
        handles = tuple(h for _, hs in self._pending.values() for h in hs)
        self._pending.clear()
        return Batch(events, handles, now)

    def commit(self, batch: Batch[H]) -> None:
        """Record that ``batch`` was applied, so later repeats of its facts are recognised."""
        for key in batch.keys:
            self._applied[key] = None
            self._applied.move_to_end(key)
        while len(self._applied) > self._remember:
            self._applied.popitem(last=False)
