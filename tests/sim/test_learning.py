"""Online learning in the simulator (``bellows.sim.learning``): the truth is the job's true
profile, the core is told the annotated one and may learn the truth from progress reports."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.cli.main import main
from bellows.jobs import Allocation, JobSpec
from bellows.scaling import default_cluster, step_time
from bellows.scaling.online import (
    REVISE_TOLERANCE,
    Learned,
    ProgressReport,
    SpeedFactors,
    drifted,
    moved,
)
from bellows.sim import CapacityChange, SimResult, run
from bellows.sim.engine import _Run
from bellows.sim.events import Kind
from bellows.sim.learning import (
    WRONG_PRIORS,
    Learning,
    OnlineLearner,
    true_spec,
    wrong_priors,
)
from bellows.sim.metrics import jobs_csv_text
from bellows.sim.workloads.generating import BatchChoice, Pattern, WorkloadSpec, generate
from bellows.sim.workloads.traces import TraceJob, fit_trace, write_trace
from tests.conftest import REPO, load_script
from tests.strategies import make_job

CLUSTER = default_cluster()
CONFIG = AutoscalerConfig(queue=True)


def _bursty(gpus: int = 16, minutes: float = 60.0, seed: int = 1) -> tuple[TraceJob, ...]:
    w = WorkloadSpec(
        Pattern.BURSTY, minutes, (1, 2, 3, 4), gpus, baseline_batch=BatchChoice.RANDOM,
        period_min=minutes / 2,
    )  # fmt: skip
    return fit_trace(generate(w, np.random.default_rng(seed), cluster=CLUSTER), gpus)[0]


def _run(
    trace: Sequence[TraceJob],
    learning: Learning | None,
    *,
    gpus: int = 16,
    changes: Sequence[CapacityChange] = (),
) -> SimResult:
    return run(
        trace, gpus=gpus, config=CONFIG, cluster=CLUSTER, learning=learning,
        capacity_changes=changes,
    )  # fmt: skip


def _oracle(trace: Sequence[TraceJob], truth: dict[str, SpeedFactors]) -> list[TraceJob]:
    return [
        dataclasses.replace(j, spec=true_spec(j.spec, truth.get(j.spec.name, SpeedFactors())))
        for j in trace
    ]


def _without_learning_keys(result: SimResult) -> dict[str, object]:
    summary = result.summary()
    summary.pop("learning", None)
    return summary


@pytest.mark.parametrize("learn", [False, True])
def test_a_setup_where_every_prior_is_right_changes_nothing(learn: bool) -> None:
    trace = _bursty()
    plain = _run(trace, None)
    taught = _run(trace, Learning({}, learn=learn))
    assert taught.jobs == plain.jobs
    assert jobs_csv_text(taught.jobs) == jobs_csv_text(plain.jobs)
    assert _without_learning_keys(taught) == plain.summary()
    assert "learning" not in plain.summary()
    assert taught.summary()["learning"]["jobs_off_prior"] == 0
    assert taught.stats.reports > 0
    assert taught.stats.revisions == 0


def test_learning_off_keeps_the_wrong_prior_but_runs_the_truth() -> None:
    trace = _bursty()
    truth = wrong_priors(trace)
    kept = _run(trace, Learning(truth, learn=False))
    assert kept.revisions == ()
    assert kept.stats.revisions == 0
    assert kept.summary()["learning"]["jobs_off_prior"] == len(trace)
    # the truth runs: the same trace with the true profiles and no setup completes otherwise
    assert kept.jobs != _run(trace, None).jobs
    # ... and every job's single-GPU length is its true one
    oracle = {j.name: j.single_gpu_s for j in _run(_oracle(trace, truth), None).jobs}
    assert all(math.isclose(j.single_gpu_s, oracle[j.name]) for j in kept.jobs)


def test_wrong_priors_follow_the_arrival_order() -> None:
    trace = [TraceJob(t, make_job(f"j{i}")) for i, t in enumerate([30.0, 0.0, 30.0, 10.0])]
    truth = wrong_priors(trace)
    assert [truth[n] for n in ("j1", "j3", "j0", "j2")] == [*WRONG_PRIORS, WRONG_PRIORS[0]]


@pytest.mark.parametrize("factors", WRONG_PRIORS)
def test_a_job_off_its_prior_converges_within_a_handful_of_reports(
    factors: SpeedFactors,
) -> None:
    spec = make_job("j", work=5e6)
    result = _run([TraceJob(0.0, spec)], Learning({"j": factors}), gpus=8)
    record = result.jobs[0]
    assert record.finish_s is not None
    assert result.revisions
    truth = true_spec(spec, factors)
    configs = {(s.gpus, s.batch) for s in record.segments}
    first: dict[tuple[int, int], int] = {}
    for revision in result.revisions:
        for k, b in configs:
            off = abs(step_time(revision.spec, k, b, CLUSTER) / step_time(truth, k, b, CLUSTER) - 1)
            if off <= 0.05:
                first.setdefault((k, b), revision.reports)
    assert set(first) == configs  # every configuration it ran at is predicted within 5 %
    assert max(first.values()) <= 5
    last = result.revisions[-1].spec
    for k, b in configs:  # and stays so
        assert step_time(last, k, b, CLUSTER) == pytest.approx(
            step_time(truth, k, b, CLUSTER), rel=0.05
        )


@pytest.mark.parametrize("jobs", [2, 4])
def test_learning_brings_avg_jct_towards_the_oracle_where_the_prior_misleads(jobs: int) -> None:
    """Every other job's Allreduce is 30x slower than annotated: the prior says it scales
    well, so it is given GPUs it cannot use. Learning sees it and moves them."""
    trace = [TraceJob(60.0 * i, make_job(f"j{i}", work=3e6)) for i in range(jobs)]
    truth = {f"j{i}": SpeedFactors(communication=30.0) for i in range(0, jobs, 2)}
    oracle = _run(_oracle(trace, truth), None, gpus=8).summary()["avg_jct_min"]
    kept = _run(trace, Learning(truth, learn=False), gpus=8).summary()["avg_jct_min"]
    learned = _run(trace, Learning(truth), gpus=8).summary()["avg_jct_min"]
    assert oracle < kept  # the case is one where knowing the truth matters
    assert learned < kept
    assert abs(learned - oracle) < abs(kept - oracle)


def _stepping_reports(result: SimResult, report_s: float, restart_s: float) -> int:
    """Reports a run must have made: every ``report_s`` after each placement's restart pause
    (none at the first start), strictly before the placement ends."""
    count = 0
    for job in result.jobs:
        for i, seg in enumerate(job.segments):
            resume = seg.start_s + (0.0 if i == 0 else restart_s)
            count += max(0, math.ceil((seg.end_s - resume) / report_s) - 1)
    return count


def test_reports_come_only_while_a_job_steps() -> None:
    """A capacity drop halts the jobs for a while: no report while halted, none after the
    end, none during a restart pause, one every report_s otherwise."""
    trace = [TraceJob(0.0, make_job("a", work=4e6)), TraceJob(7.0, make_job("b", work=3e6))]
    changes = [CapacityChange(1234.5, 0), CapacityChange(2345.25, 8)]
    report_s = 61.0
    result = _run(trace, Learning({"a": WRONG_PRIORS[2]}, report_s), gpus=8, changes=changes)
    assert all(len(j.segments) >= 2 for j in result.jobs)  # halted and started again
    assert result.stats.reports == _stepping_reports(result, report_s, CONFIG.restart_s)
    for revision in result.revisions:
        job = next(j for j in result.jobs if j.name == revision.job)
        assert any(s.start_s < revision.at_s < s.end_s for s in job.segments)


def test_a_report_of_a_finished_or_halted_job_does_nothing() -> None:
    trace = [TraceJob(0.0, make_job("a")), TraceJob(0.0, make_job("b"))]
    state = _Run(
        trace, gpus=8, config=CONFIG, cluster=CLUSTER, capacity_changes=(), timer=lambda: 0.0,
        learning=Learning({"a": WRONG_PRIORS[0]}),
    )  # fmt: skip
    state.loop()
    assert all(job.finish_s is not None for job in state.jobs)
    before = (state.reports, state.revisions, len(state.heap))
    for i, job in enumerate(state.jobs):
        assert job.finish_s is not None
        for version in (job.version, job.version - 1):
            state.heap.push(job.finish_s + 1.0, Kind.REPORT, i, version)
            state.event()
    assert (state.reports, state.revisions, len(state.heap)) == before
    # halted: holding no GPUs, whatever the version says
    job = state.jobs[0]
    job.finish_s = None
    state.heap.push(1e9, Kind.REPORT, 0, job.version)
    state.event()
    assert (state.reports, state.revisions, len(state.heap)) == before


def test_runs_are_deterministic() -> None:
    trace = _bursty(seed=2)
    setup = Learning(wrong_priors(trace))
    one, two = _run(trace, setup), _run(trace, setup)
    assert one.jobs == two.jobs
    assert one.summary() == two.summary()
    assert one.revisions == two.revisions
    assert one.revisions


def test_the_revision_rule_is_the_live_loops() -> None:
    assert not moved(None, Learned())
    assert moved(None, Learned(compute=1.06))
    assert not moved(Learned(1.5, 2.0), Learned(1.5 * 1.04, 2.0 / 1.04))
    assert moved(Learned(), Learned(restart_s=30.0))
    assert not drifted(100.0, 100.0 + REVISE_TOLERANCE * 999, 1000.0)
    assert drifted(100.0, 100.0 + REVISE_TOLERANCE * 1001, 1000.0)


def _running(name: str) -> tuple[Autoscaler, JobSpec, Allocation]:
    """A core on 8 GPUs running job ``name`` (started at 0), its spec and allocation."""
    auto = Autoscaler(CONFIG, capacity=8, cluster=CLUSTER)
    spec = make_job(name)
    auto.arrive(spec, 0.0)
    auto.step(0.0)
    return auto, spec, auto.allocations[name]


def test_a_report_the_core_cannot_use_is_dropped() -> None:
    auto, spec, alloc = _running("a")
    learner = OnlineLearner(CLUSTER)
    slow = 3.0 * step_time(spec, alloc.gpus, alloc.batch, CLUSTER)
    first = ProgressReport(alloc.gpus, alloc.batch, slow, 50.0)
    assert not learner.report(auto, spec, first, 10.0)  # held until the next agrees
    later = 50.0 + 60.0 * alloc.batch / slow  # the samples 60 s of such steps make
    assert learner.report(auto, spec, ProgressReport(alloc.gpus, alloc.batch, slow, later), 70.0)
    # samples going backwards are refused, as by the live log
    assert not learner.report(auto, spec, ProgressReport(alloc.gpus, alloc.batch, slow, 1.0), 80.0)
    assert learner.inconsistent == set()  # backwards is not inconsistent
    auto.finish("a", 90.0)
    learner.forget("a")
    assert len(learner) == 0


@pytest.mark.parametrize("told", [True, False])
def test_a_restart_at_the_same_configuration_begins_a_new_run(told: bool) -> None:
    """A job moved away and back to the same ``(k, b)`` between two reports restarted twice:
    told of its start (as the controller is, by the job's ``started`` event), its next
    reports begin a new run; untold, they seem one run that made too little progress for the
    step time it reports, and the honest job is marked inconsistent."""
    auto, spec, alloc = _running("a")
    learner = OnlineLearner(CLUSTER)
    step = step_time(spec, alloc.gpus, alloc.batch, CLUSTER)
    rate = alloc.batch / step  # samples a second
    for at in (60.0, 120.0):  # one run: reports that agree
        learner.report(auto, spec, ProgressReport(alloc.gpus, alloc.batch, step, rate * at), at)
    if told:  # halted at 120 s, back at the same (k, b) at 360 s: two restarts
        learner.started("a", rate * 120.0)
    for at in (420.0, 480.0):  # 60 s and 120 s after it resumed: more than half paused
        samples = rate * (120.0 + at - 360.0)
        learner.report(auto, spec, ProgressReport(alloc.gpus, alloc.batch, step, samples), at)
    assert learner.inconsistent == (set() if told else {"a"})
    learner.started("b", 0.0)  # a job that never reported: nothing to begin
    assert len(learner) == 1


def test_learning_rejects_a_bad_interval() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="report_s"):
            Learning({}, report_s=bad)


def test_simulate_wrong_priors_flags(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(_bursty(gpus=8, minutes=30.0), trace)
    runner = CliRunner()
    summaries = {}
    for flags in ([], ["--wrong-priors"], ["--wrong-priors", "--no-learning"]):
        out = tmp_path / ("-".join(flags) or "plain")
        args = ["simulate", str(trace), "--gpus", "8", "--no-plots", "--out", str(out), *flags]
        result = runner.invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        summaries[tuple(flags)] = json.loads((out / "summary.json").read_text())
    assert "learning" not in summaries[()]
    assert summaries[("--wrong-priors",)]["learning"]["learn"] is True
    assert summaries[("--wrong-priors",)]["learning"]["revisions"] > 0
    assert summaries[("--wrong-priors", "--no-learning")]["learning"]["revisions"] == 0
    bad = runner.invoke(main, ["simulate", str(trace), "--gpus", "8", "--no-learning"])
    assert bad.exit_code == 2
    assert "--no-learning needs --wrong-priors" in bad.output


def test_the_benchmark_prints_its_tables(capsys: pytest.CaptureFixture[str]) -> None:
    module = load_script(REPO / "benchmarks" / "learning.py")
    args = [
        "--gpus",
        "16",
        "--minutes",
        "30",
        "--period-min",
        "15",
        "--seeds",
        "1",
        "--workers",
        "1",
    ]
    assert module.main(args) == 0
    out = capsys.readouterr().out
    assert "| variant | seed | avg JCT (min) |" in out
    for variant in ("oracle", "kept", "learned"):
        assert f"| {variant} | median |" in out
    assert "avg JCT gained by learning" in out
