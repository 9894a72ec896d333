"""Progress events: decoding as a hint, and the training helper's reporter on a real server."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from bellows.bus import NatsSettings
from bellows.bus.progress import (
    MAX_PROGRESS_BYTES,
    ProgressEvent,
    ProgressType,
    decode_progress,
    encode_progress,
    progress_subject,
)
from bellows.bus.server import running_nats_server
from bellows.bus.streams import ensure_progress_stream, progress_stream_name
from bellows.inputs import SpecError
from tests.conftest import REPO

SUBJECT = "bellows.progress.v1.team-a.resnet_v2"
T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)


def _doc(**changes: object) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "bellows.io/v1",
        "type": "job.progress",
        "namespace": "team-a",
        "name": "resnet.v2",
        "time": T0.isoformat(),
        "samplesSeen": 12800,
        "worldSize": 4,
        "globalBatch": 256,
        "stepSeconds": 0.31,
        "steps": 50,
    }
    doc.update(changes)
    return {key: value for key, value in doc.items() if value is not None}


def _data(**changes: object) -> bytes:
    return json.dumps(_doc(**changes)).encode()


def test_round_trip_and_subject() -> None:
    event = decode_progress("bellows", SUBJECT, _data())
    assert event.type is ProgressType.PROGRESS
    assert (event.namespace, event.name, event.step_seconds) == ("team-a", "resnet.v2", 0.31)
    assert progress_subject("bellows", "team-a", "resnet.v2") == SUBJECT
    assert decode_progress("bellows", SUBJECT, encode_progress(event)) == event
    started = ProgressEvent(
        ProgressType.STARTED, "team-a", "resnet.v2", T0, 0, 4, 256, None, None, 42.5
    )
    assert decode_progress("bellows", SUBJECT, encode_progress(started)) == started


V2 = {"apiVersion": "bellows.io/v2"}
STARTED_WITH_GRADS = {
    **V2, "type": "job.started", "stepSeconds": None, "steps": None, "restartSeconds": 1.0,
    "gradSqr": 1.0, "gradVar": 1.0,
}  # fmt: skip


def test_version_2_carries_gradient_statistics_and_version_1_reads_as_before() -> None:
    event = decode_progress("bellows", SUBJECT, _data(**V2, gradSqr=2.5e-3, gradVar=0.75))
    assert (event.grad_sqr, event.grad_var) == (2.5e-3, 0.75)
    assert json.loads(encode_progress(event))["apiVersion"] == "bellows.io/v2"
    assert decode_progress("bellows", SUBJECT, encode_progress(event)) == event
    plain = decode_progress("bellows", SUBJECT, _data(**V2))  # v2 without them: optional
    old = decode_progress("bellows", SUBJECT, _data())
    assert plain == old
    assert old.grad_sqr is None
    assert old.grad_var is None
    assert encode_progress(old) == json.dumps(_doc(), separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_data(gradSqr=1.0, gradVar=1.0), "progress"),  # version 1 has no such fields
        (_data(**V2, gradSqr=1.0), "gradVar"),  # both or neither
        (_data(**V2, gradVar=1.0), "gradSqr"),
        (_data(**V2, gradSqr=0.0, gradVar=1.0), "gradSqr"),  # |G|^2 > 0: a finite scale
        (_data(**V2, gradSqr=-1.0, gradVar=1.0), "gradSqr"),
        (_data(**V2, gradSqr=1.0, gradVar=-1e-9), "gradVar"),
        (_data(**V2, gradSqr=1e31, gradVar=1.0), "gradSqr"),
        (_data(**V2, gradSqr=1.0, gradVar=1e300), "gradVar"),
        (_data(**V2, gradSqr="big", gradVar=1.0), "gradSqr"),
        (_data(**V2, gradSqr=[1.0], gradVar=1.0), "gradSqr"),  # a number, not a list
        (_data(**STARTED_WITH_GRADS), "gradSqr"),  # a start has no gradients
        (_data(apiVersion="bellows.io/v3"), "apiVersion"),
    ],
)
def test_bad_gradient_statistics_refused_with_a_reason(data: bytes, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        decode_progress("bellows", SUBJECT, data)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("subject", "data", "field"),
    [
        # the subject names its job: another job's or another namespace's subject is refused
        ("bellows.progress.v1.team-b.resnet_v2", _data(), "subject"),
        ("bellows.progress.v1.team-a.other", _data(), "subject"),
        ("bellows.progress.v1.team-a.resnet.v2", _data(), "subject"),
        ("bellows.progress.v2.team-a.resnet_v2", _data(), "subject"),
        ("bellows.events.v1.team-a.resnet_v2", _data(), "subject"),
        ("bellows.progress.v1.team-a.resnet_v2.x", _data(), "subject"),
        # values outside sane bounds
        (SUBJECT, _data(stepSeconds=0), "stepSeconds"),
        (SUBJECT, _data(stepSeconds=-0.5), "stepSeconds"),
        (SUBJECT, _data(stepSeconds=1e9), "stepSeconds"),
        (SUBJECT, b'{"stepSeconds": NaN}', "progress"),
        (SUBJECT, _data(stepSeconds="fast"), "stepSeconds"),
        (SUBJECT, _data(samplesSeen=-1), "samplesSeen"),
        (SUBJECT, _data(samplesSeen=1.5), "samplesSeen"),
        (SUBJECT, _data(worldSize=0), "worldSize"),
        (SUBJECT, _data(globalBatch=True), "globalBatch"),
        (SUBJECT, _data(steps=None), "stepSeconds"),
        (SUBJECT, _data(type="job.started", stepSeconds=None), "restartSeconds"),
        (SUBJECT, _data(type="job.started", restartSeconds=-3.0), "restartSeconds"),
        (SUBJECT, _data(type="job.finished"), "type"),
        (SUBJECT, _data(apiVersion="v0"), "apiVersion"),
        (SUBJECT, _data(extra=1), "progress"),
        (SUBJECT, _data(time="yesterday"), "time"),
        (SUBJECT, b"[1, 2]", "progress"),
        (SUBJECT, b"x" * (MAX_PROGRESS_BYTES + 1), "progress"),
    ],
)
def test_bad_progress_refused_with_a_reason(subject: str, data: bytes, field: str) -> None:
    with pytest.raises(SpecError) as caught:
        decode_progress("bellows", subject, data)
    assert caught.value.field == field


def _reporter_module() -> Any:
    pytest.importorskip("torch")
    sys.path.insert(0, str(REPO / "examples" / "training"))
    import elastic  # type: ignore[import-not-found]  # noqa: PLC0415

    return elastic


async def _wait(condition: Any, deadline_s: float = 10.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met before the deadline"
        await asyncio.sleep(0.02)


async def test_reporter_publishes_to_jetstream(client: Client, settings: NatsSettings) -> None:
    elastic = _reporter_module()
    js = client.jetstream()
    await ensure_progress_stream(js, settings)
    now = [100.0]
    reporter = elastic.ProgressReporter.from_env(
        {
            "BELLOWS_PROGRESS_URL": settings.servers[0],
            "BELLOWS_JOB_NAMESPACE": "team-a",
            "BELLOWS_JOB_NAME": "resnet.v2",
            "BELLOWS_PROGRESS_EVERY_STEPS": "5",
        },
        started_at=58.0,
        clock=lambda: now[0],
    )
    seen = 0
    noise = elastic.GradientNoise(smoothing=0.0)
    for step in range(11):
        now[0] += 0.25 if step % 2 else 0.35
        seen += 256
        if step == 7:  # four ranks of 64: |g_i|^2 = 3 on average, |g_b|^2 = 1
            noise.update(3.0, 1 / 64, 1.0, 256)
        reporter.step(seen, 4, 256, noise=noise)
    await _wait(lambda: reporter.published == 3)  # started + two windows of five steps
    reporter.close()
    sub = await js.pull_subscribe(
        progress_wildcard_all(settings), stream=progress_stream_name(settings)
    )
    messages = await sub.fetch(3, timeout=5)
    events = [decode_progress(settings.subject_prefix, m.subject, m.data) for m in messages]
    assert [e.type for e in events] == [ProgressType.STARTED, *[ProgressType.PROGRESS] * 2]
    assert events[0].restart_s == pytest.approx(42.35)  # process start to first step
    assert events[1].step_seconds == pytest.approx(0.25)  # median of 0.25 x3, 0.35 x2
    assert events[2].samples_seen == 11 * 256
    assert events[1].grad_sqr is None  # no estimate yet: a version 1 payload
    assert json.loads(messages[1].data)["apiVersion"] == "bellows.io/v1"
    var = 2.0 / (1 / 64 - 1 / 256)  # tr(Sigma) from the two means, then |G|^2
    assert (events[2].grad_var, events[2].grad_sqr) == pytest.approx((var, 1.0 - var / 256))
    assert json.loads(messages[2].data)["apiVersion"] == "bellows.io/v2"
    assert reporter.dropped == 0


def progress_wildcard_all(settings: NatsSettings) -> str:
    return f"{settings.subject_prefix}.progress.v1.>"


def test_reporter_without_a_server_never_blocks_training() -> None:
    elastic = _reporter_module()
    reporter = elastic.ProgressReporter(
        url="nats://127.0.0.1:1", namespace="team-a", name="resnet", every_steps=1
    )
    began = time.monotonic()
    for step in range(2000):
        reporter.step(step + 1, 2, 64, seconds=0.01)
    assert time.monotonic() - began < 1.0  # 2000 steps, each only a list append and a put
    deadline = time.monotonic() + 10
    while reporter.dropped == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert reporter.dropped > 0  # a full queue or no server: reports lost, never waited for
    assert reporter.published == 0
    began = time.monotonic()
    reporter.close(timeout_s=0.5)
    assert time.monotonic() - began < 3.0


@pytest.mark.parametrize(
    ("env", "name"),
    [
        ({"BELLOWS_JOB_NAME": "resnet"}, "BELLOWS_JOB_NAMESPACE"),
        ({"BELLOWS_JOB_NAMESPACE": "team-a"}, "BELLOWS_JOB_NAME"),
        ({"BELLOWS_JOB_NAMESPACE": "team.a", "BELLOWS_JOB_NAME": "r"}, "BELLOWS_JOB_NAMESPACE"),
        ({"BELLOWS_JOB_NAMESPACE": "a", "BELLOWS_JOB_NAME": "r>"}, "BELLOWS_JOB_NAME"),
        (
            {
                "BELLOWS_JOB_NAMESPACE": "a",
                "BELLOWS_JOB_NAME": "r",
                "BELLOWS_PROGRESS_EVERY_S": "nan",
            },
            "BELLOWS_PROGRESS_EVERY_S",
        ),
    ],
)
def test_reporter_env_checked(env: dict[str, str], name: str) -> None:
    elastic = _reporter_module()
    assert elastic.ProgressReporter.from_env({}) is None  # off unless a URL is given
    with pytest.raises(elastic.ContractError) as caught:
        elastic.ProgressReporter.from_env({"BELLOWS_PROGRESS_URL": "nats://x:4222", **env})
    assert caught.value.name == name


def _doc_auth_conf() -> str:
    text = (REPO / "docs" / "security.md").read_text()
    after = text.split("<!-- progress-auth.conf: tested by tests/bus/test_progress.py -->", 1)[1]
    block: str = after.split("```\n", 2)[1]
    return block


async def test_per_namespace_publish_permissions_of_the_security_doc(tmp_path: Path) -> None:
    elastic = _reporter_module()
    auth = tmp_path / "progress-auth.conf"
    auth.write_text(_doc_auth_conf())
    passwords = {
        "PROGRESS_TEAM_A_PASSWORD": "a-secret",
        "PROGRESS_TEAM_B_PASSWORD": "b-secret",
        "PROGRESS_ADMIN_PASSWORD": "admin-secret",
    }
    async with running_nats_server(tmp_path / "nats", include=auth, env=passwords) as server:
        admin = await nats.connect(
            server.url,
            user="bellows-progress-admin",
            password="admin-secret",
            inbox_prefix="_INBOX_progress_admin",
        )
        try:
            await ensure_progress_stream(admin.jetstream(), NatsSettings())
        finally:
            await admin.close()
        host = server.url.removeprefix("nats://")

        def reporter(namespace: str) -> Any:
            return elastic.ProgressReporter(
                url=f"nats://progress-team-a:a-secret@{host}",
                inbox="_INBOX_progress_team-a",
                namespace=namespace,
                name="resnet",
                every_steps=1,
            )

        own, other = reporter("team-a"), reporter("team-b")
        for step in range(1, 4):
            own.step(step * 64, 2, 64, seconds=0.1)
            other.step(step * 64, 2, 64, seconds=0.1)
        await _wait(lambda: own.published == 4 and other.dropped >= 1, deadline_s=20)
        own.close()
        other.close()
        assert other.published == 0  # team-a's user may not speak for team-b's jobs
