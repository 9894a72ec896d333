"""The Tiresias reference (bellows.sim.tiresias): two queues, demotion at the attained-service
threshold, preemptive greedy admission, starvation promotion, most-free-node placement, and
its runs in the simulator (restarts charged, the first start with ``charge_start``)."""

from __future__ import annotations

import csv as csv_module
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bellows.autoscaler import AutoscalerConfig
from bellows.autoscaler.decisions import Preempt, Reject, Start
from bellows.cli.main import main
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import default_cluster, throughput
from bellows.sim import run
from bellows.sim.tiresias import QUEUE_THRESHOLD_GPU_S, TIRESIAS_INTERVAL_S, TiresiasPolicy
from bellows.sim.workloads.traces import TraceJob, read_trace
from tests.strategies import make_job

CLUSTER = default_cluster()  # 4 GPUs a node
CONFIG = AutoscalerConfig(delta_s=TIRESIAS_INTERVAL_S, restart_s=30.0)


def _rigid(name: str, gpus: int) -> JobSpec:
    return make_job(name, gpus=gpus, elastic=False, batch_size=32 * gpus, b_max=32 * gpus,
                    k_max=gpus)  # fmt: skip


def csv_rows(path: Path) -> list[dict[str, Any]]:
    with path.open(newline="") as handle:
        return list(csv_module.DictReader(handle))


def _policy(capacity: int, **options: float) -> TiresiasPolicy:
    return TiresiasPolicy(CONFIG, capacity=capacity, cluster=CLUSTER, **options)


def test_the_artifacts_threshold_is_sixteen_gpu_hours() -> None:
    assert QUEUE_THRESHOLD_GPU_S == 16 * 3600


def test_a_job_is_demoted_when_its_service_reaches_the_threshold() -> None:
    """4 GPUs x 60 s a round: 240 GPU-s after one round, 480 after two (the threshold)."""
    policy = _policy(8, threshold_gpu_s=480.0)
    policy.arrive(_rigid("a", 4), 0.0)
    assert policy.step(0.0) == [Start("a", 4, 128, "started by the Tiresias reference")]
    policy.step(60.0)
    assert policy.queue_of("a") == 0  # 240 < 480
    policy.step(120.0)
    assert policy.queue_of("a") == 1  # 480 >= 480: demoted at the threshold, not before


def test_a_new_job_in_queue_zero_preempts_a_demoted_one() -> None:
    policy = _policy(4, threshold_gpu_s=240.0)
    policy.arrive(_rigid("old", 4), 0.0)
    policy.step(0.0)
    policy.arrive(_rigid("new", 2), 30.0)
    out = policy.step(60.0)  # old: 240 GPU-s, demoted; new (queue 0) goes first
    assert policy.queue_of("old") == 1
    assert [type(d) for d in out] == [Preempt, Start]
    assert out[0].job == "old"
    assert out[1].job == "new"
    assert policy.placement("new") == ((0, 2),)
    assert policy.placement("old") == ()


def test_admission_walks_the_queues_in_order_and_lets_a_smaller_job_pass() -> None:
    """Queue 0 in arrival order: 3 fits, 4 does not (1 left), 1 does: it passes the 4."""
    policy = _policy(4)
    for name, gpus in (("three", 3), ("four", 4), ("one", 1)):
        policy.arrive(_rigid(name, gpus), 0.0)
    out = policy.step(0.0)
    assert [d.job for d in out] == ["three", "one"]
    assert policy.placement("four") == ()
    policy.finish("three", 90.0)
    out = policy.step(120.0)  # four is ahead of one in queue 0 and now fits: one yields
    assert [(type(d), d.job) for d in out] == [(Preempt, "one"), (Start, "four")]
    policy.finish("four", 150.0)
    assert [(type(d), d.job) for d in policy.step(180.0)] == [(Start, "one")]


def test_demoted_jobs_keep_their_demotion_order_and_are_preempted_last_first() -> None:
    """Queue 1 is FIFO by demotion: a newcomer takes the GPUs of the later-demoted job."""
    policy = _policy(4, threshold_gpu_s=120.0)
    policy.arrive(_rigid("first", 2), 0.0)
    policy.step(0.0)
    policy.arrive(_rigid("second", 2), 60.0)
    policy.step(60.0)  # first: 120 GPU-s, demoted; second starts
    policy.step(120.0)  # second: 120 GPU-s, demoted after first
    assert policy.queue_of("first") == policy.queue_of("second") == 1
    policy.arrive(_rigid("third", 2), 150.0)
    out = policy.step(180.0)
    assert [(type(d), d.job) for d in out] == [(Preempt, "second"), (Start, "third")]


def test_starvation_promotes_a_waiting_demoted_job_back_to_queue_zero() -> None:
    """With starvation 1, a demoted job that waited as long as it ran returns to queue 0,
    its service reset; with 0 (the artifact's setting) it never does."""
    for starvation, promoted in ((1.0, True), (0.0, False)):
        policy = _policy(4, threshold_gpu_s=240.0, starvation=starvation)
        policy.arrive(_rigid("long", 4), 0.0)
        policy.step(0.0)
        policy.arrive(_rigid("hog", 4), 30.0)
        policy.step(60.0)  # long: 60 s run, 240 GPU-s: demoted; hog preempts it
        assert policy.queue_of("long") == 1
        policy.step(120.0)  # long waited 60 s >= 1 x 60 s run
        assert (policy.queue_of("long") == 0) is promoted


def test_a_start_takes_the_nodes_with_the_most_free_gpus() -> None:
    policy = _policy(12)
    policy.arrive(_rigid("a", 3), 0.0)
    policy.step(0.0)
    assert policy.placement("a") == ((0, 3),)  # all equal: the lowest numbered
    policy.arrive(_rigid("b", 6), 10.0)
    policy.step(60.0)
    assert policy.placement("b") == ((1, 4), (2, 2))  # 4 on node 1, then 2 from node 2 (4 free)
    policy.arrive(_rigid("c", 3), 70.0)
    policy.step(120.0)
    assert policy.placement("c") == ((0, 1), (2, 2))  # node 2 (2 free) then node 0 (1 free)


def test_a_job_larger_than_the_cluster_is_rejected() -> None:
    policy = _policy(4)
    policy.arrive(_rigid("big", 8), 0.0)
    out = policy.step(0.0)
    assert [type(d) for d in out] == [Reject]
    assert policy.next_round_at() is None


def test_rounds_run_on_the_grid_while_jobs_are_unfinished() -> None:
    policy = _policy(4)
    assert policy.next_round_at() is None
    policy.arrive(_rigid("a", 1), 95.0)
    assert policy.next_round_at() == 120.0
    with pytest.raises(SpecError):
        policy.set_capacity(8, 100.0)


def _trace_job(name: str, gpus: int, seconds: float, arrival: float) -> TraceJob:
    spec = _rigid(name, gpus)
    rate = throughput(spec, gpus, spec.batch_size, CLUSTER, nodes=1)
    return TraceJob(arrival, dataclasses.replace(spec, work=float(rate * seconds)), "x")


def test_in_the_simulator_a_preempted_job_pays_its_restart_and_the_first_start_is_optional() -> (
    None
):
    """One node, the artifact's 16 GPU-hour threshold: a (4 GPUs, 20 000 s of work) reaches
    it at 14 400 s and is preempted at the next round by b (4 GPUs, 120 s), then restarts
    when b finishes and pays 30 s; with ``charge_start`` both first starts pay 30 s too."""
    trace = [_trace_job("a", 4, 20_000.0, 0.0), _trace_job("b", 4, 120.0, 14_430.0)]
    config = AutoscalerConfig(delta_s=60.0, restart_s=30.0)
    result = run(trace, gpus=4, config=config, cluster=CLUSTER, nodes=True, tiresias=True)
    jobs = {j.name: j for j in result.jobs}
    assert result.summary()["mode"] == "tiresias"
    assert jobs["a"].preemptions == 1
    # a runs 0-14 460; b 14 460-14 580; a restarts at 14 580: 30 s, then its last 5 540 s
    assert jobs["b"].finish_s == pytest.approx(14_580.0)
    assert jobs["a"].finish_s == pytest.approx(14_580.0 + 30.0 + 5_540.0)
    charged = run(trace, gpus=4, config=config, cluster=CLUSTER, nodes=True, tiresias=True,
                  charge_start=True)  # fmt: skip
    jobs = {j.name: j for j in charged.jobs}
    # a runs 30-14 460; b 14 460 + 30 + 120 = 14 610; a restarts at the round at 14 640
    assert jobs["b"].finish_s == pytest.approx(14_610.0)
    assert jobs["a"].finish_s == pytest.approx(14_640.0 + 30.0 + 5_570.0)


def test_the_tiresias_reference_needs_nodes_and_excludes_pollux() -> None:
    trace = [_trace_job("a", 1, 60.0, 0.0)]
    with pytest.raises(SpecError):
        run(trace, gpus=4, config=CONFIG, cluster=CLUSTER, tiresias=True)
    with pytest.raises(SpecError):
        run(trace, gpus=4, config=CONFIG, cluster=CLUSTER, nodes=True, tiresias=True,
            pollux=True)  # fmt: skip


def test_simulate_policy_tiresias_and_the_artifacts_work(tmp_path: Path) -> None:
    """``workload import pollux --work validation`` takes the artifact's work (deepspeech2:
    570 720 reference samples, not 80 x 20 000); ``simulate --policy tiresias`` runs the
    reference rigid, on nodes, every minute, and ``--charge-start`` makes first starts pay."""
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "a,0,deepspeech2,4,80\nb,30,cifar10,2,256\n")  # fmt: skip
    runner = CliRunner()
    traces = {}
    for work in ("epochs", "validation"):
        traces[work] = tmp_path / f"{work}.jsonl"
        done = runner.invoke(main, ["workload", "import", "pollux", str(csv), "--work", work,
                                    "--out", str(traces[work])])  # fmt: skip
        assert done.exit_code == 0, done.output
    accumulating = tmp_path / "accumulate.jsonl"
    done = runner.invoke(main, ["workload", "import", "pollux", str(csv), "--batches",
                                "accumulate", "--out", str(accumulating)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert [j.spec.m_max for j in read_trace(accumulating)] == [640, 4096]
    works = {k: [j.spec.work for j in read_trace(v)] for k, v in traces.items()}
    assert works["epochs"][0] == 1_600_000.0
    assert works["validation"][0] == 570_720.0
    finish = {}
    for extra in ([], ["--charge-start"]):
        out = tmp_path / f"out{len(extra)}"
        args = ["simulate", str(traces["validation"]), "--gpus", "8", "--policy", "tiresias",
                "--efficiency", "--restart-cost-s", "30", "--no-plots", "--out", str(out),
                *extra]  # fmt: skip
        done = runner.invoke(main, args, catch_exceptions=False)
        assert done.exit_code == 0, done.output
        assert "tiresias mode" in done.output
        summary = json.loads((out / "summary.json").read_text())
        assert summary["mode"] == summary["policy"] == "tiresias"
        assert summary["delta_min"] == 1.0
        rows = {r["name"]: r for r in csv_rows(out / "jobs.csv")}
        assert rows["a"]["allocations"].startswith("0.0:4@80")  # rigid: trace GPUs and batch
        finish[len(extra)] = float(rows["a"]["finish_min"])
    assert finish[1] == pytest.approx(finish[0] + 0.5, abs=0.01)  # 30 s more
    bad = runner.invoke(main, ["simulate", str(traces["epochs"]), "--gpus", "8", "--policy",
                               "tiresias", "--paper", "--out", str(tmp_path / "x")])  # fmt: skip
    assert bad.exit_code == 2
    assert "--policy tiresias does not take --paper" in bad.output
