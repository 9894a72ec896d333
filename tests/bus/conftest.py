"""Fixtures for the bus tests: a real nats-server per test, settings that point at it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from nats.aio.client import Client

from bellows.bus import JobArrived, JobCompleted, JobKind, JobRef, NatsSettings, Outcome, connect
from bellows.bus.server import NatsServer, running_nats_server
from bellows.bus.streams import ensure_streams

T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def arrived(name: str = "resnet", uid: str | None = None, **kw: object) -> JobArrived:
    ref = JobRef(JobKind.PYTORCHJOB, "team-a", name, uid or f"uid-{name}")
    return JobArrived(ref, T0, **kw)  # type: ignore[arg-type]


def completed(name: str = "resnet", uid: str | None = None) -> JobCompleted:
    ref = JobRef(JobKind.PYTORCHJOB, "team-a", name, uid or f"uid-{name}")
    return JobCompleted(ref, T0, Outcome.SUCCEEDED)


@pytest_asyncio.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    async with running_nats_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
def settings(nats_server: NatsServer) -> NatsSettings:
    # Short ack_wait so redelivery tests wait about a second, not the default 30 s.
    return NatsSettings(servers=(nats_server.url,), ack_wait_s=1.0, fetch_batch=64)


@pytest_asyncio.fixture
async def client(settings: NatsSettings) -> AsyncIterator[Client]:
    nc = await connect(settings, reconnect_wait_s=0.1)
    await ensure_streams(nc.jetstream(), settings)
    yield nc
    await nc.close()


def with_changes(settings: NatsSettings, **changes: object) -> NatsSettings:
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]
