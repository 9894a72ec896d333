"""Waiting on a condition with a deadline, for tests of things that happen asynchronously."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


async def until(what: str, check: Callable[[], Awaitable[Any] | Any], limit_s: float = 10.0) -> Any:
    """``check()``'s value once truthy (awaited when it is a coroutine), asked again after
    each short pause; fails naming ``what`` after ``limit_s`` seconds."""
    deadline = time.monotonic() + limit_s
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {limit_s} s: {what}"
        await asyncio.sleep(0.02)
