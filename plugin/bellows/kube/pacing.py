"""Bounded retries: a wait that grows from 50 ms to 2 s between tries, within a deadline.

Every loop of the actuator that asks the API server again (a write that met a change, a
delete that has not completed) is bounded in tries and in time, and waits a growing while
between tries: one job whose objects never settle (a finalizer nobody removes, a tenant who
edits the job in a loop) costs a few requests, never the API server's full speed, and the
call ends (``pending``) so that the controller goes on with the other jobs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

__all__ = ["BACKOFF_S", "backoff", "delays", "until"]

BACKOFF_S = (0.05, 2.0)  # the first and the longest wait between two tries


def delays(first_s: float = BACKOFF_S[0], most_s: float = BACKOFF_S[1]) -> Iterator[float]:
    """The waits between tries: ``first_s``, doubling, never over ``most_s`` (no end)."""
    wait = first_s
    while True:
        yield wait
        wait = min(wait * 2, most_s)


async def backoff(
    attempt: int, first_s: float = BACKOFF_S[0], most_s: float = BACKOFF_S[1]
) -> None:
    """Sleep before try ``attempt + 1`` (``attempt`` 0: ``first_s``, doubling to ``most_s``)."""
    await asyncio.sleep(min(first_s * 2 ** min(attempt, 32), most_s))


async def until(
    check: Callable[[], Awaitable[bool]],
    *,
    within_s: float,
    first_s: float = BACKOFF_S[0],
    most_s: float = BACKOFF_S[1],
) -> bool:
    """Ask ``check`` until it says True, waiting :func:`delays` between asks, for at most
    ``within_s`` seconds (the loop's clock): whether it did. It is asked once at least, and
    once more at the deadline (no wait runs past it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    for wait in delays(first_s, most_s):
        if await check():
            return True
        left = deadline - loop.time()
        if left <= 0:
            return False
        await asyncio.sleep(min(wait, left))
    return False  # pragma: no cover - delays() never ends
