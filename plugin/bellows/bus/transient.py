"""Riding out a NATS server that does not answer for a while (a restart, JetStream recovering
its streams after one, a leader election in a NATS cluster).

The client reconnects by itself, but a call made meanwhile fails: a JetStream API request
times out or finds no responder. At the controller's start-up and at every lead it wins, such
a call (ensuring the streams, opening the event consumer, the learned-state bucket, the
progress subscription, the bridge's resume bucket) is asked again every :data:`PAUSE_S` for
up to :data:`RIDE_OUT_S`, and logged each time, instead of raising: a controller that died
of it lost its lead for nothing, and one that gave its learned state up for it learned
afresh for a whole term.
Errors that say something else (no permission, a bad configuration) raise at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
import nats.js.errors
import structlog

__all__ = ["PAUSE_S", "RIDE_OUT_S", "TRANSIENT", "ride_out"]

_log = structlog.get_logger("bellows.bus")

T = TypeVar("T")

TRANSIENT = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.ServiceUnavailableError,
)
"""What a server that does not answer raises (and nothing that a retry cannot mend)."""

RIDE_OUT_S = 60.0
"""How long a call is asked again before its error is raised."""

PAUSE_S = 0.5
"""Seconds between two asks."""


async def ride_out(
    call: Callable[[], Awaitable[T]], *, what: str, retry_s: float = RIDE_OUT_S
) -> T:
    """``await call()``, asked again while it raises a :data:`TRANSIENT` error and
    ``retry_s`` has not passed (each retry logged as ``<what>.retry``)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + retry_s
    while True:
        try:
            return await call()
        except TRANSIENT as exc:
            if loop.time() >= deadline:
                raise
            _log.warning(f"{what}.retry", error=str(exc) or type(exc).__name__,
                         error_type=type(exc).__name__)  # fmt: skip
            await asyncio.sleep(PAUSE_S)
