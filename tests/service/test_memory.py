"""What a leader learned survives it: kept in the controller's bucket, recalled by the next.

A leader's progress loop learns a job's speed, restart cost and efficiency from its reports
over a real core, and keeps it in a real JetStream key-value bucket after each revision. A
follower loads the bucket, recalls the job as its rebuild does (:meth:`Memory.recall`), and
must then hold the very spec and efficiency the leader's core had, decide its next rounds as
the leader does, and go on learning from the next reports as the leader would.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.bus import NatsSettings, connect
from bellows.bus.learned import KvLearnedStore
from bellows.bus.progress import ProgressEvent, ProgressType, encode_progress, progress_subject
from bellows.bus.server import running_nats_server
from bellows.bus.streams import ensure_learned_kv
from bellows.inputs import SpecError
from bellows.jobs import Allocation, JobSpec, MeasuredPlacement, StepProfile, TypeSection
from bellows.scaling import EfficiencyProfile, default_cluster
from bellows.scaling.timing import step_time
from bellows.service.learned_state import decode, encode
from bellows.service.learning import ProgressLearner
from bellows.service.memory import Memory, revision
from bellows.service.progress_loop import ProgressLoop
from tests.conftest import REPO, load_script
from tests.service.core_controller import CoreController
from tests.strategies import make_job

CLUSTER = default_cluster()
PREFIX = "bellows"
T0 = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
KEY, OTHER = "pytorchjob/team-a/resnet", "pytorchjob/team-a/bert"
UID = "uid-resnet"
SUBJECT = progress_subject(PREFIX, "team-a", "resnet")
NOISE = 40.0  # samples: far below the batches the throughput tables pick
SLOWER = 1.3  # the job steps slower than profiled


def wall(reading: float) -> datetime:
    return T0 + timedelta(seconds=reading)


def clock(when: datetime) -> float:
    return (when - T0).total_seconds()


def _jobs() -> list[JobSpec]:
    return [
        make_job(KEY, b_min=32, b_max=512, batch_size=32, work=5e7),
        make_job(OTHER, b_min=32, b_max=512, batch_size=64, work=2e7),
    ]


def _loop(leader: CoreController, memory: Memory) -> ProgressLoop:
    return ProgressLoop(
        controller=leader, learner=memory.learner, prefix=PREFIX, now=lambda: leader.now,
        wall_to_clock=clock, memory=memory,
    )  # fmt: skip


def _report(run: Allocation, i: int, seconds: float) -> ProgressEvent:
    at = 30.0 * i
    samples = 1000 + round(at * run.batch / seconds)
    return ProgressEvent(
        ProgressType.PROGRESS, "team-a", "resnet", wall(at), samples, run.gpus, run.batch,
        seconds, 20, grad_sqr=1e-2, grad_var=NOISE * 1e-2 * (1 + 0.01 * i),
    )  # fmt: skip


async def _feed(leader: CoreController, loop: ProgressLoop, reports: range) -> None:
    """Reports of the job at its allocation, 30 s apart, slower than profiled, with noise."""
    run = leader.autoscaler.allocations[KEY]
    seconds = SLOWER * step_time(_jobs()[0], run.gpus, run.batch, CLUSTER)
    if reports.start == 0:  # the start, with the restart it paid
        started = ProgressEvent(
            ProgressType.STARTED, "team-a", "resnet", T0, 1000, run.gpus, run.batch,
            restart_s=75.0,
        )  # fmt: skip
        assert await loop.take(SUBJECT, encode_progress(started)) is None
    for i in reports:
        leader.now = 30.0 * i
        assert await loop.take(SUBJECT, encode_progress(_report(run, i, seconds))) is None


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[KvLearnedStore]:
    async with running_nats_server(tmp_path / "nats") as server:
        settings = NatsSettings(servers=(server.url,))
        nc = await connect(settings)
        try:
            yield KvLearnedStore(await ensure_learned_kv(nc.jetstream(), settings))
        finally:
            await nc.close()


async def test_the_store_loads_every_record_up_to_the_last_revision(
    store: KvLearnedStore,
) -> None:
    """Every live record and none deleted, whether the bucket's last revision is a value or
    a delete (the load reads to it, not only to nats-py's end-of-replay marker, which may
    come early: nats-io/nats.py#842); an empty bucket loads nothing."""
    assert await store.load() == {}
    for i in range(30):
        await store.save(f"pytorchjob/team-a/job-{i}", f"record {i}".encode())
    await store.delete("pytorchjob/team-a/job-3")
    await store.save("pytorchjob/team-a/job-4", b"again")
    loaded = await store.load()
    assert len(loaded) == 29
    assert "pytorchjob/team-a/job-3" not in loaded
    assert loaded["pytorchjob/team-a/job-4"] == b"again"
    await store.delete("pytorchjob/team-a/job-29")  # the last revision: a delete
    assert len(await store.load()) == 28


def _follower(leader: CoreController, memory: Memory) -> Autoscaler:
    """A new leader's core, its jobs recalled as the rebuild recalls them: each at the spec
    its owner gave (what the cluster says) and the allocation it runs at."""
    core = Autoscaler(AutoscalerConfig(), capacity=8, cluster=CLUSTER)
    for prior in _jobs():
        recalled = memory.recall(prior, leader.uids[prior.name], goodput=core.goodput)
        run = leader.autoscaler.allocations[prior.name]
        if recalled is None:
            assert core.adopt(prior, run, leader.now)
            continue
        core.charge(prior.name, recalled.efficiency)
        assert core.adopt(recalled.spec, run, leader.now, done=recalled.done, since=recalled.since)
    return core


async def test_a_follower_decides_from_what_the_leader_learned(store: KvLearnedStore) -> None:
    leader = CoreController(_jobs(), capacity=8)
    kept = Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)
    loop = _loop(leader, kept)
    await _feed(leader, loop, range(6))
    auto = leader.autoscaler
    assert auto.charged(KEY) is not None  # learned: decided by goodput
    assert auto.job(KEY).restart_s == 75.0
    assert auto.job(KEY) != _jobs()[0]  # its speed revised

    memory = Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)
    assert await memory.load() == 1
    core = _follower(leader, memory)
    assert core.job(KEY) == auto.job(KEY)
    assert core.charged(KEY) == auto.charged(KEY)
    assert core.estimated_done(KEY, leader.now) == pytest.approx(
        auto.estimated_done(KEY, leader.now)
    )
    # the follower's loop goes on learning where the leader's left off: the same next
    # reports teach both the same
    twin = CoreController(_jobs(), capacity=8)
    twin.autoscaler = core
    follower = _loop(twin, memory)
    run = auto.allocations[KEY]
    seconds = SLOWER * step_time(_jobs()[0], run.gpus, run.batch, CLUSTER)
    for i in range(6, 9):
        leader.now = twin.now = 30.0 * i
        event = encode_progress(_report(run, i, seconds))
        assert await loop.take(SUBJECT, event) is None
        assert await follower.take(SUBJECT, event) is None
    assert core.job(KEY) == auto.job(KEY)
    assert core.charged(KEY) == auto.charged(KEY)
    assert memory.learner.snapshot(KEY) == kept.learner.snapshot(KEY)

    # the next rounds: a job arrives, then one finishes; both decide alike, and a follower
    # that forgot (learned afresh) does not
    blind = _follower(leader, Memory(ProgressLearner(CLUSTER), None, wall=wall, clock=clock))
    blind.revise(
        _jobs()[0], leader.now, done=auto.estimated_done(KEY, leader.now), since=leader.now
    )
    assert blind.charged(KEY) is None
    later = leader.now + 600.0
    for each in (auto, core, blind):
        each.arrive(make_job("pytorchjob/team-a/late", work=3e6), later)
    decided = auto.step(later)
    assert core.step(later) == decided
    assert blind.step(later) != decided
    for each in (auto, core):
        each.finish(OTHER, later + 60.0)
    assert core.step(later + 60.0) == auto.step(later + 60.0)
    assert core.allocations == auto.allocations


async def test_a_record_counts_only_for_its_own_object(store: KvLearnedStore) -> None:
    leader = CoreController(_jobs(), capacity=8)
    await _feed(
        leader,
        _loop(leader, Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)),
        range(6),
    )
    memory = Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)
    await memory.load()
    # the job deleted and created again under its name: another uid, learned afresh
    assert memory.recall(_jobs()[0], "uid-of-the-new-object", goodput=True) is None
    assert memory.learner.snapshot(KEY) is None
    core = Autoscaler(AutoscalerConfig(), capacity=8, cluster=CLUSTER)
    core.arrive(_jobs()[0], 0.0)  # the new object, under the old name
    await memory.prune(core)
    assert await store.load() == {}


async def test_a_record_of_a_job_gone_is_pruned_and_one_that_does_not_decode_dropped(
    store: KvLearnedStore,
) -> None:
    leader = CoreController(_jobs(), capacity=8)
    await _feed(
        leader,
        _loop(leader, Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)),
        range(6),
    )
    await store.save(OTHER, b'{"version": 1, "job": "x"}')
    await store.save("pytorchjob/team-a/elsewhere", (await store.load())[KEY])  # filed wrong
    memory = Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)
    with capture_logs() as logs:
        assert await memory.load() == 1
    refused = sorted(e["job"] for e in logs if e["event"] == "memory.record_invalid")
    assert refused == [OTHER, "pytorchjob/team-a/elsewhere"]
    assert set(await store.load()) == {KEY}
    # the rebuild found the job gone: its record goes too
    await memory.prune(Autoscaler(AutoscalerConfig(), capacity=8, cluster=CLUSTER))
    assert await store.load() == {}


async def test_a_job_that_leaves_takes_its_record_with_it(store: KvLearnedStore) -> None:
    leader = CoreController(_jobs(), capacity=8)
    memory = Memory(ProgressLearner(CLUSTER), store, wall=wall, clock=clock)
    loop = _loop(leader, memory)
    await _feed(leader, loop, range(6))
    assert set(await store.load()) == {KEY}
    leader.autoscaler.finish(KEY, leader.now)
    await loop.check()
    assert await store.load() == {}


# ---------------------------------------------------------------------- the record itself
def _learned() -> ProgressLearner:
    """A learner that took the leader's reports (no core needed: it is pure)."""
    learner = ProgressLearner(CLUSTER)
    run = Allocation(4, 256)
    seconds = SLOWER * step_time(_jobs()[0], run.gpus, run.batch, CLUSTER)
    for i in range(8):
        learner.take(KEY, _report(run, i, seconds), run, 30.0 * i, work=5e7)
    return learner


def test_a_record_puts_back_exactly_what_was_learned() -> None:
    learner = _learned()
    learner.prime(KEY, EfficiencyProfile(32, 30.0, 0.5, 0.1, "a prior"))
    learning = learner.snapshot(KEY)
    assert learning is not None
    job, uid, back = decode(encode(learning, job=KEY, uid=UID, wall=wall), clock=clock)
    assert (job, uid) == (KEY, UID)
    again = ProgressLearner(CLUSTER)
    again.restore(KEY, back)
    prior = _jobs()[0]
    for each in (learner, again):
        assert each.snapshot(KEY) == learning
    ours, theirs = (revision(x, KEY, prior, goodput=True) for x in (learner, again))
    assert theirs == ours


EFFICIENCY = {"referenceBatch": 32, "noiseScale": 1.0, "growth": 0.5, "batchExponent": 0.1,
              "source": ""}  # fmt: skip


def _document() -> dict[str, Any]:
    learning = _learned().snapshot(KEY)
    assert learning is not None
    parsed: dict[str, Any] = json.loads(encode(learning, job=KEY, uid=UID, wall=wall))
    return parsed


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": 2}, "version"),
        ({"uid": ""}, "uid"),
        ({"samples": -1.0}, "samples"),
        ({"reports": 1.5}, "reports"),
        ({"steps": [[0, 256, [0.1]]]}, "steps[0][0]"),
        ({"steps": [[4, 256, []]]}, "steps[0][2]"),
        ({"steps": [[4, 256, [0.1] * 17]]}, "steps[0][2]"),
        ({"steps": [[4, 256, [0.1]], [4, 256, [0.2]]]}, "steps[1]"),
        ({"noise": [[256, 10.0, 0.0, 1.0]]}, "noise[0].grad_sqr"),
        ({"restarts": [-5.0]}, "restarts[0]"),
        ({"efficiency": {**EFFICIENCY, "growth": 9.0}}, "efficiency.growth"),
        ({"run": {"start": [1, 32, 0.1, 0.0, None, None]}}, "run"),
        ({"efficiencyDue": 1}, "efficiencyDue"),
        ({"samplesAt": "yesterday"}, "samplesAt"),
        ({"samplesAt": "2025-05-01T12:00:00"}, "samplesAt"),
        ({"extra": True}, "record"),
    ],
)
def test_a_record_that_does_not_hold_is_refused_by_name(change: dict[str, Any], field: str) -> None:
    doc = {**_document(), **change}
    with pytest.raises(SpecError) as refused:
        decode(json.dumps(doc).encode(), clock=clock)
    assert refused.value.field == field


def test_a_record_that_is_not_json_is_refused() -> None:
    for data in (b"{not json", b"[]", b'{"samples": NaN}', b"x" * (300 * 1024)):
        with pytest.raises(SpecError):
            decode(data, clock=clock)


@settings(max_examples=40, deadline=None)
@given(
    reports=st.integers(min_value=0, max_value=12),
    restart=st.one_of(st.none(), st.floats(min_value=0.0, max_value=3600.0)),
    noise=st.floats(min_value=1.0, max_value=1e5),
)
def test_any_learning_round_trips(reports: int, restart: float | None, noise: float) -> None:
    learner = ProgressLearner(CLUSTER)
    run = Allocation(2, 128)
    seconds = step_time(_jobs()[0], run.gpus, run.batch, CLUSTER)
    if restart is not None:
        started = ProgressEvent(
            ProgressType.STARTED, "team-a", "resnet", T0, 0, run.gpus, run.batch,
            restart_s=restart,
        )  # fmt: skip
        learner.take(KEY, started, run, 0.0, work=5e7)
    for i in range(reports):
        event = dataclasses.replace(
            _report(run, i, seconds), grad_var=noise * 1e-2 * (1 + 0.01 * i)
        )
        learner.take(KEY, event, run, 30.0 * i, work=5e7)
    learning = learner.snapshot(KEY)
    if learning is None:
        return
    _, _, back = decode(encode(learning, job=KEY, uid=UID, wall=wall), clock=clock)
    assert back == learning


def test_the_recall_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/learned_memory.py end to end on 50 records (docs/jsa.md quotes 10 000)."""
    module = load_script(REPO / "benchmarks" / "learned_memory.py")
    assert module.main(["--jobs", "50", "--repeats", "1", "--reports", "8"]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split(" | ")
    assert row[0] == "| 50"
    assert 0 <= float(row[2]) < 60  # seconds to load them (main checks all 50 loaded)


def test_a_job_with_sections_per_gpu_type_keeps_them_and_learns_the_rest() -> None:
    """A job a core of several types decides keeps its sections (what the typed core
    decides it by) through a revision; its progress and restarts are learned as any job's."""
    prior = _jobs()[0]
    t4 = TypeSection("t4", prior.profile, prior.weights, prior.m_max)
    typed = dataclasses.replace(prior, types=(t4,))
    learner = _learned()
    plain, kept = (revision(learner, KEY, p, goodput=False) for p in (prior, typed))
    assert kept.spec.types == typed.types
    assert (kept.done, kept.since, kept.spec.restart_s) == (
        plain.done, plain.since, plain.spec.restart_s,
    )  # fmt: skip


def test_a_typed_job_is_refitted_in_the_section_of_the_type_it_runs_on() -> None:
    """Issue 39: a job's imputed section is replaced by the online fit once it ran there;
    its other sections are what the core has (learned where it ran before)."""
    step = StepProfile((8, 64), (0.1, 0.5))
    t4 = TypeSection("t4", step, 1_000_000, 64)
    a100 = TypeSection("a100", StepProfile((8, 64), (0.02, 0.1)), 1_000_000, 64, imputed=True)
    prior = JobSpec("ns/a", 8, 256, 64, 4, 64, 1_000_000, 1e7, step, types=(t4, a100))
    cluster = default_cluster()
    runs = Allocation(2, 64)
    on_a100 = dataclasses.replace(prior, profile=a100.profile, types=())
    truth = 2.0 * step_time(on_a100, runs.gpus, runs.batch, cluster)  # half the imputed speed
    learner = ProgressLearner(cluster)
    rate = runs.batch / truth
    when = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    for i in range(5):
        event = ProgressEvent(ProgressType.PROGRESS, "ns", "a", when, 100 + round(rate * 60 * i),
                              runs.gpus, runs.batch, truth, 50)  # fmt: skip
        assert learner.take("ns/a", event, runs, 60.0 * i, gpu_type="a100") is None
    learned_t4 = dataclasses.replace(t4, weights=2_000_000)  # what the core learned there
    current = dataclasses.replace(prior, types=(learned_t4, a100))
    revised = revision(learner, "ns/a", prior, goodput=False, gpu_type="a100", current=current)
    sections = {t.gpu_type: t for t in revised.spec.types}
    assert not sections["a100"].imputed  # measured now
    fitted = dataclasses.replace(on_a100, profile=sections["a100"].profile,
                                 weights=sections["a100"].weights)  # fmt: skip
    assert step_time(fitted, runs.gpus, runs.batch, cluster) == pytest.approx(truth, rel=0.05)
    assert sections["t4"] == learned_t4  # the core's, as it learned it
    assert revised.spec.profile == prior.profile  # the job's own profile stands
    # without a type (a recall): its own profile refitted, its sections stand
    untyped = revision(learner, "ns/a", prior, goodput=False)
    assert untyped.spec.types == prior.types


def test_a_recall_keeps_out_the_measured_placements_the_jobs_reports_refute() -> None:
    """Issue 36: a new leader's recall drops placements the job's own reports refuted (off
    by more than a quarter), as the core that revoked them did; true ones stand."""
    learner = _learned()  # reports at (4, 256), SLOWER than the JSA has them
    learning = learner.snapshot(KEY)
    assert learning is not None
    back = decode(encode(learning, job=KEY, uid=UID, wall=wall), clock=clock)[2]
    fresh = ProgressLearner(CLUSTER)
    fresh.restore(KEY, back)
    job = _jobs()[0]
    truth = SLOWER * step_time(job, 4, 256, CLUSTER)

    def placed(seconds: float) -> JobSpec:
        return dataclasses.replace(job, placements=(MeasuredPlacement(1, 4, (64,), (seconds,)),))

    assert not revision(fresh, KEY, placed(truth / 2), goodput=False).spec.placements
    assert revision(fresh, KEY, placed(truth), goodput=False).spec.placements
