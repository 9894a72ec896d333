"""Hooks through which the bus reports what it did (metrics live in an outer layer).

The bus cannot import ``bellows.service``; the service passes an object with these methods
(its Prometheus metrics) and the bus calls them. :class:`NullObserver` does nothing.
"""

from __future__ import annotations

from typing import Protocol

from bellows.bus.events import EventType

__all__ = ["BusObserver", "NullObserver"]


class BusObserver(Protocol):
    """What the publisher, consumer and pump report."""

    def published(self, event_type: EventType, *, duplicate: bool) -> None:
        """An event was stored (``duplicate``: the stream dropped it as a repeat)."""

    def consumed(self, event_type: EventType, *, lag_s: float) -> None:
        """An event was decoded; ``lag_s`` is wall time since the event happened."""

    def dead_lettered(self, code: str) -> None:
        """A message was refused and sent to the dead-letter subject."""

    def batch_applied(self, events: int, *, seconds: float) -> None:
        """A Δ window was applied and acked (``seconds``: time the apply took)."""

    def apply_failed(self, events: int) -> None:
        """Applying a window failed; its events will be delivered again."""


class NullObserver:
    """A :class:`BusObserver` that ignores everything."""

    def published(self, event_type: EventType, *, duplicate: bool) -> None:
        pass

    def consumed(self, event_type: EventType, *, lag_s: float) -> None:
        pass

    def dead_lettered(self, code: str) -> None:
        pass

    def batch_applied(self, events: int, *, seconds: float) -> None:
        pass

    def apply_failed(self, events: int) -> None:
        pass
