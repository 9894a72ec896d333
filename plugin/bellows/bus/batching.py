"""The deliveries the pump holds: events in, each new fact once out. Pure, no I/O.

The bus does not decide when a round is due: the core's clock does
(:class:`bellows.autoscaler.rounds.RoundClock`, in every mode, live and simulated). What is
left here is delivery: the pump hands every fact that came in to ``apply`` at once, as one
batch. Within a batch the same fact (job uid, event type) is kept once, but every delivery
of it is kept to be settled after the batch is applied; a fact already applied in an earlier
batch is reported at once so its delivery can be acked without applying it again.
"""

from __future__ import annotations

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

    QUEUED = "queued"  # a new fact, waiting for the next batch
    REPEAT = "repeat"  # the same fact is already waiting; its handle rides along
    APPLIED = "applied"  # an earlier batch applied it: settle the handle now


@dataclass(frozen=True)
class Batch(Generic[H]):
    """The facts of one batch (each once, in arrival order) and every handle."""

    events: tuple[Event, ...]
    handles: tuple[H, ...]
    closed_at: float

    @property
    def keys(self) -> tuple[EventKey, ...]:
        return tuple(event_key(e) for e in self.events)


class Batcher(Generic[H]):
    """Collects the facts of one fetch, each once, and remembers the facts applied.

    ``remember`` bounds how many applied facts are kept to recognise late repeats (the
    oldest are forgotten first; the controller's own state catches those).
    """

    def __init__(self, *, remember: int = 100_000) -> None:
        if remember < 1:
            raise SpecError("remember", remember, "an integer >= 1")
        self._remember = remember
        self._pending: OrderedDict[EventKey, tuple[Event, list[H]]] = OrderedDict()
        self._applied: OrderedDict[EventKey, None] = OrderedDict()

    @property
    def pending(self) -> int:
        """Distinct facts waiting for the next batch."""
        return len(self._pending)

    def waiting(self) -> tuple[Event, ...]:
        """The facts waiting for the next batch, in arrival order."""
        return tuple(event for event, _ in self._pending.values())

    def held(self) -> list[H]:
        """Every handle waiting for the next batch (to keep their deliveries alive)."""
        return [h for _, hs in self._pending.values() for h in hs]

    def offer(self, event: Event, handle: H) -> Offered:
        """Take ``event`` (delivered with ``handle``) into the next batch."""
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

    def poll(self, now: float) -> Batch[H] | None:
        """Every fact waiting, as one batch taken at ``now`` (``None``: nothing waits)."""
        if not self._pending:
            return None
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
