"""The service's clock: seconds since start, optionally compressed (``bellows demo``).

The core reads time only from its caller; this is where the live service gets it. With
``speedup`` X, one real second is X clock seconds, so a 10-minute Δ passes in 10/X minutes,
and the emulated operator (run with the same compression) trains X times faster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

__all__ = ["ServiceClock"]


class ServiceClock:
    """Monotonic seconds since construction, times ``speedup``."""

    def __init__(
        self,
        *,
        speedup: float = 1.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not speedup > 0:
            raise ValueError(f"speedup={speedup!r} is invalid: expected a number > 0")
        self.speedup = speedup
        self._monotonic = monotonic
        self._t0 = monotonic()
        self._wall0 = wall()

    def now(self) -> float:
        """Clock seconds since start."""
        return (self._monotonic() - self._t0) * self.speedup

    def at(self, when: datetime) -> float:
        """The clock reading at wall time ``when`` (events carry wall times)."""
        return (when - self._wall0).total_seconds() * self.speedup

    def wall(self, reading: float) -> datetime:
        """The wall time at clock ``reading`` (the inverse of :meth:`at`)."""
        return self._wall0 + timedelta(seconds=reading / self.speedup)

    async def sleep_until(self, reading: float) -> None:
        """Wait (really) until the clock reads ``reading``."""
        delay = (reading - self.now()) / self.speedup
        if delay > 0:
            await asyncio.sleep(delay)
