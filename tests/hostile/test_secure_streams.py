"""Bounded streams on a real nats-server: a flood fills at most what the configuration allows.

The limits are applied when the streams are created and when a later start finds them
different; what Bellows does not set stays as an admin left it, and an up-to-date stream is
not written at all (so a user allowed only to read stream info can start).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import nats.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js.api import DiscardPolicy
from nats.js.errors import APIError

from bellows.bus import EventPublisher, NatsSettings, Secret, connect
from bellows.bus.codec import MAX_EVENT_BYTES
from bellows.bus.connection import connect_options
from bellows.bus.server import running_nats_server
from bellows.bus.streams import (
    DEAD_LETTER_MAX_MSG_BYTES,
    KV_MAX_BYTES,
    ensure_kv,
    ensure_streams,
    events_stream_config,
    stream_differences,
)
from tests.bus.conftest import arrived


@pytest_asyncio.fixture
async def settings(tmp_path: Path) -> AsyncIterator[NatsSettings]:
    async with running_nats_server(tmp_path / "nats") as server:
        yield NatsSettings(servers=(server.url,))


@pytest_asyncio.fixture
async def client(settings: NatsSettings) -> AsyncIterator[Client]:
    nc = await connect(settings)
    await ensure_streams(nc.jetstream(), settings)
    yield nc
    await nc.close()


async def test_streams_are_created_with_their_limits(settings: NatsSettings, client) -> None:
    js = client.jetstream()
    events = (await js.stream_info(settings.stream)).config
    assert events.max_bytes == settings.max_bytes == 256 << 20
    assert events.max_msgs == settings.max_messages
    assert events.max_msg_size == MAX_EVENT_BYTES
    assert events.discard == DiscardPolicy.OLD
    assert events.max_age == pytest.approx(settings.max_age_s)
    dead = (await js.stream_info(settings.dead_letter_stream)).config
    assert dead.max_bytes == settings.dead_letter_max_bytes
    assert dead.max_msgs == settings.dead_letter_max_messages
    assert dead.max_msg_size == DEAD_LETTER_MAX_MSG_BYTES
    kv = await ensure_kv(js, settings)
    assert (await js.stream_info(f"KV_{settings.kv_bucket}")).config.max_bytes == KV_MAX_BYTES
    assert kv is not None


async def test_a_flood_keeps_only_the_newest_events(settings: NatsSettings, client) -> None:
    small = dataclasses.replace(settings, max_messages=10)
    js = client.jetstream()
    await ensure_streams(js, small)
    publisher = EventPublisher(js, prefix=small.subject_prefix, stream=small.stream)
    for i in range(30):
        await publisher.publish(arrived(f"job-{i}"))
    state = (await js.stream_info(small.stream)).state
    assert state.messages == 10
    assert state.last_seq == 30  # the newest stay; publishing never stopped


async def test_an_oversized_message_is_refused_by_the_server(settings: NatsSettings, client):
    js = client.jetstream()
    with pytest.raises(APIError, match=r"(?i)maximum"):
        await js.publish(
            "bellows.events.v1.team-a.pytorchjob.huge.arrived",
            b" " * (MAX_EVENT_BYTES + 1),
            stream=settings.stream,
        )


async def test_changed_limits_update_the_stream_and_keep_what_an_admin_set(
    settings: NatsSettings, client
) -> None:
    js = client.jetstream()
    info = await js.stream_info(settings.stream)
    await js.update_stream(dataclasses.replace(info.config, max_consumers=7))  # the admin's
    tighter = dataclasses.replace(settings, max_bytes=32 << 20, max_age_s=3600.0)
    await ensure_streams(js, tighter)
    config = (await js.stream_info(settings.stream)).config
    assert config.max_bytes == 32 << 20
    assert config.max_age == pytest.approx(3600.0)
    assert config.max_consumers == 7
    assert stream_differences(config, events_stream_config(tighter)) == []
    assert stream_differences(config, events_stream_config(settings)) == ["max_bytes", "max_age"]


async def test_an_up_to_date_stream_needs_only_the_right_to_read_its_info(tmp_path: Path) -> None:
    settings = NatsSettings()
    # An admin makes the streams; the reader, allowed only stream info, starts against them.
    auth = tmp_path / "auth.conf"
    auth.write_text(
        "authorization { users = [\n"
        "  { user: admin, password: Padmin-00000000000000 },\n"
        "  { user: reader, password: Preader-0000000000000, permissions: {\n"
        '      publish: { allow: ["$JS.API.STREAM.INFO.>"] },\n'
        '      subscribe: { allow: ["_INBOX.>"] } } }\n'
        "] }\n"
    )
    async with running_nats_server(tmp_path / "both", include=auth) as server:
        admin = dataclasses.replace(
            settings, servers=(server.url,), user="admin", password=Secret("Padmin-00000000000000")
        )
        reader = dataclasses.replace(admin, user="reader", password=Secret("Preader-0000000000000"))
        nc = await connect(admin)
        await ensure_streams(nc.jetstream(), admin)
        await nc.close()
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        nc = await nats.connect(error_cb=on_error, **connect_options(reader))
        try:
            await ensure_streams(nc.jetstream(timeout=2.0), reader)
            # a change it may not make is refused, loudly
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await ensure_streams(
                    nc.jetstream(timeout=1.0), dataclasses.replace(reader, max_messages=5)
                )
        finally:
            await nc.close()
        assert any("permissions violation" in e.lower() for e in errors)
