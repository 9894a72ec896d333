"""A NATS server that does not answer for a while is ridden out, not fatal: the shared retry
(bellows.bus.transient.ride_out) and the start-up calls that use it, against a real
nats-server stopped and started again."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import nats.errors
import pytest

from bellows.bus.server import NatsServer
from bellows.bus.settings import NatsSettings
from bellows.bus.transient import ride_out
from bellows.scaling import default_cluster
from bellows.service.memory import open_memory
from bellows.service.progress_loop import open_progress_subscription


async def test_a_transient_error_is_asked_again_until_the_call_answers() -> None:
    calls: list[int] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise nats.errors.TimeoutError
        return "answered"

    assert await ride_out(flaky, what="test", retry_s=30.0) == "answered"
    assert len(calls) == 3


async def test_another_error_or_no_time_left_raises_at_once() -> None:
    calls: list[int] = []

    async def refused() -> None:
        calls.append(1)
        raise ValueError("not a server away")

    with pytest.raises(ValueError, match="not a server away"):
        await ride_out(refused, what="test", retry_s=30.0)

    async def away() -> None:
        calls.append(1)
        raise nats.errors.NoRespondersError

    with pytest.raises(nats.errors.NoRespondersError):
        await ride_out(away, what="test", retry_s=0.0)
    assert len(calls) == 2


class _Clock:
    def wall(self, reading: float) -> datetime:
        return datetime.fromtimestamp(reading, UTC)

    def at(self, when: datetime) -> float:
        return when.timestamp()


async def _restarted(server: NatsServer, after_s: float) -> None:
    await asyncio.sleep(after_s)
    await server.start()


async def test_a_new_leader_opens_its_memory_and_progress_through_a_server_restart(
    client, settings: NatsSettings, nats_server: NatsServer
) -> None:
    """Both are opened while the server is down for longer than a JetStream request waits
    (5 s): they wait for it (the memory gave up before, and its leader learned afresh for a
    whole term; the progress subscription's error ended the lead)."""
    js = client.jetstream()
    await nats_server.stop(graceful=False)
    restarting = asyncio.create_task(_restarted(nats_server, 6.0))
    memory = await open_memory(js, settings, default_cluster(), 600.0, _Clock())
    subscription = await open_progress_subscription(js, settings)
    await restarting
    bucket = await js.key_value(settings.learned_bucket)  # opened, not given up on
    assert bucket is not None
    assert await memory.load() == 0  # and readable: nothing kept yet
    await subscription.unsubscribe()
