"""The bundled NATS's users and permissions, enforced by a real nats-server.

The server runs the chart's own ``auth.conf`` with the passwords its Deployment passes as
env; each component connects with the configuration the chart renders for it (the shared
config file plus its Deployment's ``BELLOWS_NATS_*`` env). Only the bridge publishes
events, only the controller reads them and dead-letters, neither may purge or delete a
stream nor read the other's replies, and nobody else logs in.
"""

from __future__ import annotations

import asyncio
import base64
import urllib.parse
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
import pytest_asyncio
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig

from bellows.bus import EventPublisher, NatsSettings, Secret
from bellows.bus.bridging import KvResumeStore
from bellows.bus.codec import encode
from bellows.bus.connection import connect, connect_options
from bellows.bus.consuming import EventConsumer
from bellows.bus.learned import KvLearnedStore
from bellows.bus.progress import progress_partition
from bellows.bus.server import NatsServer, running_nats_server
from bellows.bus.streams import ensure_kv, ensure_learned_kv, ensure_streams
from bellows.service.config import load_config
from bellows.service.progress_loop import open_progress_subscription
from tests.bus.conftest import arrived
from tests.bus.test_progress import _reporter_module
from tests.conftest import REPO
from tests.ship.chart import NAMESPACE, by_kind, named, render

VALUES: dict[str, Any] = {"nats": {"bundled": {"enabled": True}}}
DENIED = (nats.errors.Error, TimeoutError)
DEADLINE_S = 10.0


@dataclass
class Rendered:
    """What the chart renders for the bundled NATS: its auth.conf, env and components' env."""

    auth_conf: str
    config_yaml: str
    passwords: dict[str, str]  # Secret key -> value
    server_env: dict[str, str]
    component_env: dict[str, dict[str, str]] = field(default_factory=dict)


def _env(container: dict[str, Any], passwords: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for var in container.get("env", []):
        if "value" in var:
            out[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            ref = var["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "bellows-nats-auth"
            out[var["name"]] = passwords[ref["key"]]
    return out


@pytest.fixture(scope="module")
def rendered() -> Rendered:
    out = render_bundled(VALUES)
    assert set(out.passwords) == {"controller-password", "bridge-password"}
    return out


def render_bundled(values: dict[str, Any], objs: list[dict[str, Any]] | None = None) -> Rendered:
    """The chart's bundled NATS and components rendered with ``values`` (or the objects it
    rendered, ``objs``), with the passwords the chart made."""
    objs = render(values) if objs is None else objs
    secret = named(objs, "Secret", "bellows-nats-auth")
    passwords = {key: base64.b64decode(v).decode() for key, v in secret["data"].items()}
    (nats_container,) = named(objs, "Deployment", "bellows-nats")["spec"]["template"]["spec"][
        "containers"
    ]
    out = Rendered(
        auth_conf=named(objs, "ConfigMap", "bellows-nats")["data"]["auth.conf"],
        config_yaml=named(objs, "ConfigMap", "bellows-config")["data"]["config.yaml"],
        passwords=passwords,
        server_env=_env(nats_container, passwords),
    )
    for component in ("controller", "bridge"):
        pod = named(objs, "Deployment", f"bellows-{component}")["spec"]["template"]["spec"]
        out.component_env[component] = _env(pod["containers"][0], passwords)
    return out


@pytest_asyncio.fixture
async def server(tmp_path: Path, rendered: Rendered) -> AsyncIterator[NatsServer]:
    auth = tmp_path / "auth.conf"
    auth.write_text(rendered.auth_conf)
    async with running_nats_server(tmp_path / "nats", include=auth, env=rendered.server_env) as s:
        yield s


def component_settings(
    rendered: Rendered, tmp_path: Path, server: NatsServer, component: str
) -> NatsSettings:
    """The component's NATS settings, loaded as the pod loads them, aimed at the test server."""
    path = tmp_path / f"{component}.yaml"
    path.write_text(rendered.config_yaml)
    env = rendered.component_env[component]
    config = load_config(path, env=env, overrides=[f"nats.servers={server.url}"])
    assert config.nats.user == f"bellows-{component}"
    return config.nats


@dataclass
class Session:
    """A connection that remembers the errors the server sent it (permission violations)."""

    nc: Client
    js: JetStreamContext
    errors: list[str]

    async def refused(self, action: Awaitable[Any], subject: str) -> None:
        """``action`` fails, and the server says it was for lack of permission on ``subject``."""
        with pytest.raises(DENIED):
            await asyncio.wait_for(action, DEADLINE_S)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        # nats-py lower-cases the server's message
        wanted = f'permissions violation for publish to "{subject.lower()}"'
        while not any(wanted in e.lower() for e in self.errors):
            assert loop.time() < deadline, (subject, self.errors)
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture
async def sessions(
    rendered: Rendered, tmp_path: Path, server: NatsServer
) -> AsyncIterator[dict[str, tuple[Session, NatsSettings]]]:
    out: dict[str, tuple[Session, NatsSettings]] = {}
    for component in ("bridge", "controller"):
        settings = component_settings(rendered, tmp_path, server, component)
        errors: list[str] = []

        async def on_error(exc: Exception, errors: list[str] = errors) -> None:
            errors.append(str(exc))

        nc = await nats.connect(error_cb=on_error, **connect_options(settings))
        out[component] = (Session(nc, nc.jetstream(timeout=1.0), errors), settings)
    try:
        yield out
    finally:
        for session, _ in out.values():
            await session.nc.close()


async def _bridge_publishes(bridge: Session, settings: NatsSettings) -> None:
    await ensure_streams(bridge.js, settings)
    store = KvResumeStore(await ensure_kv(bridge.js, settings))
    await store.save("pytorchjobs", "12345")
    assert await store.load("pytorchjobs") == "12345"
    publisher = EventPublisher(bridge.js, prefix=settings.subject_prefix, stream=settings.stream)
    await publisher.publish(arrived("good"))
    # a poison message: only the bridge can put one there, the controller must refuse it
    await bridge.js.publish(
        "bellows.events.v1.team-a.pytorchjob.bad.arrived", b"{not json", stream=settings.stream
    )


async def test_each_component_does_its_work_and_nothing_more_is_needed(sessions):
    (bridge, bridge_settings), (controller, settings) = sessions["bridge"], sessions["controller"]
    await _bridge_publishes(bridge, bridge_settings)

    await ensure_streams(controller.js, settings)  # up to date: read, not written
    consumer = await EventConsumer.open(controller.js, settings)
    deliveries = await consumer.fetch(timeout_s=5.0)
    assert [d.event.job.name for d in deliveries] == ["good"]  # the poison was dead-lettered
    await deliveries[0].in_progress()
    await deliveries[0].ack()
    assert await consumer.pending() == 0
    dead = await controller.js.stream_info(settings.dead_letter_stream)
    assert dead.state.messages == 1
    await consumer.close()
    # what it learned: kept, read back whole by the next leader, deleted when the job leaves
    memory = KvLearnedStore(await ensure_learned_kv(controller.js, settings))
    await memory.save("pytorchjob/team-a/resnet", b'{"learned": 1}')
    await memory.save("mpijob/team-b/bert.v2", b'{"learned": 2}')
    await memory.delete("mpijob/team-b/bert.v2")
    assert await memory.load() == {"pytorchjob/team-a/resnet": b'{"learned": 1}'}
    assert bridge.errors == []
    assert controller.errors == []


async def test_the_controller_cannot_publish_events_purge_delete_or_touch_the_bucket(sessions):
    (bridge, bridge_settings), (controller, settings) = sessions["bridge"], sessions["controller"]
    await _bridge_publishes(bridge, bridge_settings)
    event = encode(arrived("forged"))
    forged = "bellows.events.v1.team-b.pytorchjob.forged.arrived"
    await asyncio.gather(
        controller.refused(controller.js.publish(forged, event, timeout=1.0), forged),
        controller.refused(
            controller.js.purge_stream(settings.stream), "$JS.API.STREAM.PURGE.BELLOWS_EVENTS"
        ),
        controller.refused(
            controller.js.delete_stream(settings.dead_letter_stream),
            "$JS.API.STREAM.DELETE.BELLOWS_DEADLETTER",
        ),
        controller.refused(
            controller.js.publish("$KV.bellows-bridge.pytorchjobs", b"1", timeout=1.0),
            "$KV.bellows-bridge.pytorchjobs",
        ),
        controller.refused(
            controller.js.add_stream(name="SHADOW", subjects=["shadow.>"]),
            "$JS.API.STREAM.CREATE.SHADOW",
        ),
        controller.refused(
            controller.js.purge_stream("KV_bellows-learned"),
            "$JS.API.STREAM.PURGE.KV_bellows-learned",
        ),
    )
    info = await bridge.js.stream_info(bridge_settings.stream)
    assert info.state.messages == 2  # the bridge's two, nothing forged, nothing purged


async def test_the_bridge_cannot_consume_dead_letter_purge_or_read_the_controllers_replies(
    sessions,
):
    (bridge, settings), (controller, controller_settings) = (
        sessions["bridge"],
        sessions["controller"],
    )
    await _bridge_publishes(bridge, settings)
    await EventConsumer.open(controller.js, controller_settings)  # the durable now exists
    snooped: list[bytes] = []

    async def keep(msg: Any) -> None:
        snooped.append(msg.data)

    # Core subscriptions are refused by the server after the client sent them.
    await bridge.nc.subscribe("bellows.events.>", cb=keep)
    await bridge.nc.subscribe(f"{controller_settings.inbox_prefix}.>", cb=keep)
    await asyncio.gather(
        _violation(bridge, "Subscription", "bellows.events.>"),
        _violation(bridge, "Subscription", f"{controller_settings.inbox_prefix}.>"),
        bridge.refused(
            bridge.js.add_consumer(settings.stream, ConsumerConfig(name="spy", durable_name="spy")),
            "$JS.API.CONSUMER.CREATE.BELLOWS_EVENTS.spy",
        ),
        bridge.refused(
            bridge.nc.request(
                "$JS.API.CONSUMER.MSG.NEXT.BELLOWS_EVENTS.bellows-controller", b"1", timeout=1.0
            ),
            "$JS.API.CONSUMER.MSG.NEXT.BELLOWS_EVENTS.bellows-controller",
        ),
        bridge.refused(
            bridge.js.publish("bellows.deadletter.invalid_event", b"x", timeout=1.0),
            "bellows.deadletter.invalid_event",
        ),
        bridge.refused(
            bridge.js.purge_stream(settings.stream), "$JS.API.STREAM.PURGE.BELLOWS_EVENTS"
        ),
        bridge.refused(
            bridge.js.delete_stream(settings.stream), "$JS.API.STREAM.DELETE.BELLOWS_EVENTS"
        ),
        bridge.refused(
            bridge.js.publish("$KV.bellows-learned.pytorchjob.x", b"{}", timeout=1.0),
            "$KV.bellows-learned.pytorchjob.x",
        ),
    )
    # the controller's traffic goes on; none of it reaches the bridge
    consumer = await EventConsumer.open(controller.js, controller_settings)
    assert len(await consumer.fetch(timeout_s=5.0)) == 1
    assert snooped == []
    assert (await bridge.js.stream_info(settings.stream)).state.messages == 2


async def _violation(session: Session, kind: str, subject: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    wanted = f'permissions violation for {kind.lower()} to "{subject.lower()}"'
    while not any(wanted in e.lower() for e in session.errors):
        assert loop.time() < deadline, (subject, session.errors)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize(
    "auth",
    [
        {},
        {"user": "bellows-controller", "password": "Pwrong-password-0000"},
        {"user": "admin", "password": "Padmin-password-0000"},
        {"token": "Psome-token-00000000"},
    ],
    ids=["anonymous", "wrong-password", "unknown-user", "token"],
)
async def test_nobody_else_logs_in(server, auth):
    settings = NatsSettings(
        servers=(server.url,),
        connect_timeout_s=1.0,
        **{k: Secret(v) if k in ("password", "token") else v for k, v in auth.items()},
    )
    with pytest.raises((nats.errors.Error, OSError)):
        await connect(settings, initial_attempts=1, reconnect_wait_s=0.1)


def test_the_security_doc_shows_the_permissions_the_chart_renders(rendered: Rendered) -> None:
    text = (REPO / "docs" / "security.md").read_text()
    marker = (
        "<!-- auth.conf: rendered by charts/bellows (default values); a test keeps this equal -->"
    )
    after = text.split(marker, 1)[1]
    block = after.split("```\n", 2)[1]
    assert block == rendered.auth_conf, "copy the chart's auth.conf into docs/security.md"


async def test_training_pods_publish_progress_only_on_their_namespace_and_the_controller_reads_it(
    tmp_path: Path,
) -> None:
    # by default the namespaces Bellows manages report, each through the endpoint Secret the
    # chart makes there (what the controller points the jobs' pods at)
    values = {"watchNamespaces": ["team-a", "team-b"], "nats": {"bundled": {"enabled": True}}}
    objs = render(values)
    endpoints = {
        o["metadata"]["namespace"]: o
        for o in by_kind(objs, "Secret")
        if o["metadata"]["name"] == "bellows-progress"
    }
    assert set(endpoints) == {"team-a", "team-b"}
    out = render_bundled(values, objs)
    assert {"progress-team-a-password", "progress-team-b-password"} <= set(out.passwords)
    auth = tmp_path / "auth.conf"
    auth.write_text(out.auth_conf)
    async with running_nats_server(tmp_path / "nats", include=auth, env=out.server_env) as server:
        settings = component_settings(out, tmp_path, server, "controller")
        controller = await nats.connect(**connect_options(settings))
        errors: list[str] = []

        async def on_error(exc: Exception) -> None:
            errors.append(str(exc))

        # the pod's env, as the endpoint Secret gives it (its password the auth Secret's)
        data = {k: base64.b64decode(v).decode() for k, v in endpoints["team-a"]["data"].items()}
        url = urllib.parse.urlsplit(data["url"])
        assert (url.username, url.hostname, url.port) == (
            "bellows-progress-team-a",
            f"bellows-nats.{NAMESPACE}.svc",
            4222,
        )
        assert data["inbox"] == "_INBOX_progress_team-a"
        team_a = await nats.connect(
            servers=[server.url],
            user=url.username,
            password=url.password,
            inbox_prefix=data["inbox"].encode(),
            error_cb=on_error,
        )
        try:
            sub = await open_progress_subscription(controller.jetstream(timeout=2.0), settings)
            pod = Session(team_a, team_a.jetstream(timeout=1.0), errors)
            own, other = "bellows.progress.v1.team-a.resnet", "bellows.progress.v1.team-b.resnet"
            await pod.js.publish(own, b"report")
            await pod.refused(pod.js.publish(other, b"forged", timeout=1.0), other)
            # what the controller learned is no tenant's to write or read (docs/security.md)
            kept = KvLearnedStore(await ensure_learned_kv(controller.jetstream(), settings))
            await kept.save("pytorchjob/team-a/resnet", b"learned")
            key = "$KV.bellows-learned.pytorchjob/team-a/resnet"
            await pod.refused(pod.js.publish(key, b"buy GPUs", timeout=1.0), key)
            info = "$JS.API.STREAM.INFO.KV_bellows-learned"
            await pod.refused(pod.js.key_value("bellows-learned"), info)
            await pod.refused(
                pod.nc.request(
                    "$JS.API.DIRECT.GET.KV_bellows-learned." + key[4:], b"", timeout=1.0
                ),
                "$JS.API.DIRECT.GET.KV_bellows-learned." + key[4:],
            )
            assert await kept.load() == {"pytorchjob/team-a/resnet": b"learned"}
            (msg,) = await sub.fetch(1, timeout=5.0)
            # stored under the job's partition of its namespace (bellows.bus.streams)
            stored = f"bellows.progress.v1.team-a.{progress_partition('resnet')}"
            assert (msg.subject, msg.data) == (stored, b"report")
            await msg.ack()
            # the example helper, given only the env the controller injects (the Secret's
            # keys and the job's name), reports through that endpoint
            await _the_example_helper_reports(data, url, server, sub, stored)
            await sub.unsubscribe()
        finally:
            await team_a.close()
            await controller.close()


async def _the_example_helper_reports(
    data: dict[str, str], url: Any, server: NatsServer, sub: Any, stored: str
) -> None:
    """``ProgressReporter.from_env`` with the env a pod gets from the endpoint Secret
    ``data`` (its host replaced by the test server's) publishes on ``stored``."""
    reporter = _reporter_module().ProgressReporter.from_env(
        {
            "BELLOWS_PROGRESS_URL": data["url"].replace(
                f"{url.hostname}:{url.port}", server.url.removeprefix("nats://")
            ),
            "BELLOWS_PROGRESS_INBOX": data["inbox"],
            "BELLOWS_PROGRESS_PREFIX": "bellows",
            "BELLOWS_JOB_NAMESPACE": "team-a",
            "BELLOWS_JOB_NAME": "resnet",
            "BELLOWS_PROGRESS_EVERY_STEPS": "2",
        }
    )
    for step in range(1, 4):
        reporter.step(step * 64, 1, 64, 0.1)
    reported: list[Any] = []
    deadline = asyncio.get_running_loop().time() + 10.0
    while len(reported) < 2:  # a fetch returns what has come, maybe one
        assert asyncio.get_running_loop().time() < deadline, reported
        reported += await sub.fetch(2 - len(reported), timeout=10.0)
    assert [m.subject for m in reported] == [stored] * 2
    reporter.close()
    assert reporter.dropped == 0
