"""The simulator's event heap: events ordered by (time, priority, sequence).

Equal-time events run in a fixed order (SimPy's rule): completions free their GPUs before a
change of capacity is applied, arrivals are known before the round that looks at them, a job's
progress report (a run with online learning, :mod:`bellows.sim.learning`) comes after all of
those, and within one kind the event pushed first runs first. A run is therefore a pure
function of the trace and the settings.
"""

from __future__ import annotations

import heapq
from enum import IntEnum
from typing import NamedTuple

__all__ = ["Event", "EventHeap", "Kind"]


class Kind(IntEnum):
    """Event kinds; the value is the priority among events at the same time (low first)."""

    COMPLETION = 0
    CAPACITY = 1
    ARRIVAL = 2
    REPORT = 3  # a running job's progress report (only in a run with a learning setup)


class Event(NamedTuple):
    """One scheduled event. ``ref`` is the job's index (or the capacity change's index).

    A named tuple rather than a dataclass: the heap compares events millions of times in a
    large replay, and tuple comparison runs in C. ``seq`` is unique, so ``ref`` and
    ``version`` never take part in the order.
    """

    time: float
    kind: Kind
    seq: int
    ref: int
    version: int  # completions, reports: the event is stale once the job's version moved on


class EventHeap:
    """A binary heap of :class:`Event` with a running sequence number for ties."""

    def __init__(self) -> None:
        self._heap: list[Event] = []
        self._seq = 0

    def push(self, time: float, kind: Kind, ref: int, version: int = 0) -> None:
        heapq.heappush(self._heap, Event(time, kind, self._seq, ref, version))
        self._seq += 1

    @property
    def pushed(self) -> int:
        """Events pushed so far."""
        return self._seq

    def peek_time(self) -> float | None:
        """Time of the next event, or ``None`` when the heap is empty."""
        return self._heap[0].time if self._heap else None

    def pop(self) -> Event:
        return heapq.heappop(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
