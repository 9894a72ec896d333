"""The Pollux reference (bellows.sim.pollux): per-node placement under Pollux's interference
rule, the p = -1 objective solved exactly, its restart factor, and runs in the simulator."""

from __future__ import annotations

import dataclasses
import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bellows.autoscaler import AutoscalerConfig
from bellows.autoscaler.decisions import Preempt, Rescale, Start
from bellows.cli.main import main
from bellows.jobs import SpecError
from bellows.optimizer import allocate
from bellows.scaling import MODEL_EFFICIENCY, default_cluster, throughput
from bellows.sim import run
from bellows.sim.comparing import jobs_csv_over_commit
from bellows.sim.metrics import write_jobs_csv
from bellows.sim.nodes import Nodes
from bellows.sim.pollux import POLLUX_INTERVAL_S, PolluxPolicy, Retune
from bellows.sim.pollux.packing import Packer, Placement, node_sizes
from bellows.sim.pollux.policy import SPEEDUP_OFFSET
from bellows.sim.workloads.importing import import_pollux
from bellows.sim.workloads.traces import TraceJob
from tests.strategies import make_job

CLUSTER = default_cluster()  # 4 GPUs a node
CONFIG = AutoscalerConfig(delta_s=POLLUX_INTERVAL_S)


def _check_rules(placements: dict[str, Placement], sizes: list[int], k_max: dict[str, int]) -> None:
    """Never over a node, never over a job's k_max, at most one distributed job per node."""
    used = [0] * len(sizes)
    spread = [0] * len(sizes)
    for name, placement in placements.items():
        assert sum(g for _, g in placement) <= k_max[name]
        assert len({n for n, _ in placement}) == len(placement)
        for node, gpus in placement:
            used[node] += gpus
            spread[node] += len(placement) > 1
    assert all(u <= s for u, s in zip(used, sizes, strict=True))
    assert all(d <= 1 for d in spread)


def test_packer_keeps_distributed_jobs_apart_and_whole_nodes_whole() -> None:
    packer = Packer(node_sizes(12, 4))
    assert packer.place(3) == ((0, 3),)
    assert packer.place(1) == ((0, 1),)  # the hole, not a fresh node
    assert packer.place(6) == ((1, 4), (2, 2))  # a distributed job: whole node first
    assert packer.place(2) == ((2, 2),)  # a one-node job may share with it
    packer = Packer([4, 4, 4])
    packer.keep(((0, 3), (1, 1)))  # distributed on nodes 0 and 1
    assert packer.place(2) == ((1, 2),)
    # 1 free on node 0, 1 on node 1, 4 on node 2: a second distributed job may not use 0 or 1
    assert packer.place(5) is None
    assert packer.place(4) == ((2, 4),)
    assert not packer.fits(((0, 1), (1, 1)))
    assert packer.fits(((0, 1),))


def test_node_sizes_match_the_simulator() -> None:
    assert node_sizes(10, 4) == [4, 4, 2]
    assert node_sizes(8, 4) == [4, 4]


def _values_for(policy: PolluxPolicy, now: float) -> tuple[list[str], np.ndarray]:
    jobs = list(policy._jobs.values())
    rows = policy._cache.rows([j.spec for j in jobs], {}, {})
    return [j.spec.name for j in jobs], policy._values(jobs, rows, now)


def test_fairness_gives_a_poorly_scaling_job_more_than_the_sum_of_speedups() -> None:
    good = make_job("good", weights=1_000_000, b_min=32, b_max=4096, k_max=8)
    poor = make_job("poor", weights=50_000_000, b_min=32, b_max=4096, k_max=8)
    policy = PolluxPolicy(CONFIG, capacity=8, cluster=CLUSTER, explore=False)
    for job in (good, poor):
        policy.arrive(job, 0.0)
    now = 600.0  # both old enough that the restart factor is near 1 for a first start
    _names, values = _values_for(policy, now)
    decisions = policy.step(now, lambda name: 0)
    got = {d.job: d.gpus for d in decisions if isinstance(d, Start)}
    # by hand: every split of the 8 GPUs, speedups recovered from the value tables
    speed = -1.0 / values - SPEEDUP_OFFSET
    speed[:, 0] = 0.0
    splits = [(a, 8 - a) for a in range(0, 9)]
    harmonic = min(splits, key=lambda s: sum(1 / (speed[i, k] + SPEEDUP_OFFSET)
                                             for i, k in enumerate(s)))  # fmt: skip
    total = max(splits, key=lambda s: sum(speed[i, k] for i, k in enumerate(s)))
    assert (got["good"], got["poor"]) == harmonic == (4, 4)  # each its fair share
    assert total == (7, 1)  # the sum of speedups: all but one GPU to the good scaler
    assert speed[1, 8] / speed[1, 1] < 0.7 * speed[0, 8] / speed[0, 1]  # poor scales poorly
    assert harmonic[1] > total[1]  # fairness: more for the poor scaler than the sum gives
    assert allocate(values, 8, method="numpy").tolist() == list(harmonic)


def test_the_restart_factor_holds_back_a_job_moved_many_times() -> None:
    policy = PolluxPolicy(CONFIG, capacity=8, cluster=CLUSTER, explore=False)
    policy.arrive(make_job("a", k_max=8), 0.0)
    (start,) = policy.step(60.0, lambda name: 0)
    assert isinstance(start, Start)
    assert start.gpus == 8
    policy.arrive(make_job("b", k_max=8), 70.0)
    first = policy.step(120.0, lambda name: 0)
    assert {type(d) for d in first} == {Rescale, Start}  # a shrinks to make room for b
    assert policy.restarts("a") == 1
    job = policy._jobs["a"]
    job.restarts = 10  # 10 moves of 60 s at age 180 s: factor max(180 - 600, 0) / 240 = 0
    names, values = _values_for(policy, 180.0)
    row = values[names.index("a")]
    k = job.gpus
    assert np.all(row[1:][np.arange(1, row.size) != k] <= -1.0 / SPEEDUP_OFFSET + 1e-9)
    assert row[k] > -1.0 / SPEEDUP_OFFSET  # keeping its placement is no restart


def test_random_rounds_never_over_commit_and_respect_interference() -> None:
    rng = random.Random(7)
    sizes = node_sizes(22, 4)
    policy = PolluxPolicy(CONFIG, capacity=22, cluster=CLUSTER)
    k_max: dict[str, int] = {}
    live: set[str] = set()
    now = 0.0
    for _step in range(60):
        now += POLLUX_INTERVAL_S
        for _ in range(rng.randint(0, 3)):
            name = f"j{len(k_max)}"
            k_max[name] = rng.choice([1, 2, 3, 4, 6, 8, 12])
            weights = rng.choice([1_000_000, 50_000_000, 400_000_000])
            policy.arrive(make_job(name, k_max=k_max[name], weights=weights), now)
            live.add(name)
        for name in rng.sample(sorted(live), k=min(len(live), rng.randint(0, 2))):
            policy.finish(name, now)
            live.discard(name)
        decisions = policy.step(now, lambda name: rng.randint(0, 9))
        assert all(isinstance(d, Start | Rescale | Preempt | Retune) for d in decisions)
        placements = {n: policy.placement(n) for n in live if policy.placement(n)}
        _check_rules(placements, sizes, k_max)
        assert sum(g for p in placements.values() for _, g in p) <= 22
        if len(live) <= 5 and live:  # few jobs: every one runs (1/offset per waiting job)
            assert all(policy.placement(n) for n in live)


def _trace(tmp_path: Path, rows: list[str]) -> tuple[TraceJob, ...]:
    path = tmp_path / "workload.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n" + "\n".join(rows) + "\n")
    return import_pollux(path)


def test_a_charged_run_finishes_every_job_on_nodes_never_over_committed(tmp_path: Path) -> None:
    apps = ["cifar10", "bert", "yolov3", "imagenet", "deepspeech2", "ncf"]
    rows = [f"j{i},{i * 40},{apps[i % len(apps)]},{1 + i % 4},128" for i in range(18)]
    trace = _trace(tmp_path, rows)
    result = run(trace, gpus=16, config=CONFIG, cluster=CLUSTER, nodes=True, pollux=True,
                 efficiency=MODEL_EFFICIENCY)  # fmt: skip
    summary = result.summary()
    assert summary["mode"] == "pollux"
    assert summary["jobs_completed_total"] == len(trace)
    assert "spread_job_time_share" in summary
    write_jobs_csv(result.jobs, tmp_path / "jobs.csv")
    assert jobs_csv_over_commit(tmp_path / "jobs.csv", 16) == 0
    assert result.stats.rounds > 0
    assert all(r.finish_s is not None for r in result.jobs)


def test_run_refuses_pollux_without_node_placement(tmp_path: Path) -> None:
    trace = _trace(tmp_path, ["a,0,cifar10,1,128"])
    with pytest.raises(SpecError, match="pollux"):
        run(trace, gpus=4, config=CONFIG, cluster=CLUSTER, pollux=True)


def test_simulate_policy_pollux_writes_its_summary(tmp_path: Path) -> None:
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "a,0,cifar10,1,128\nb,30,bert,2,12\n")  # fmt: skip
    trace = tmp_path / "t.jsonl"
    runner = CliRunner()
    done = runner.invoke(main, ["workload", "import", "pollux", str(csv), "--out", str(trace)])
    assert done.exit_code == 0, done.output
    out = tmp_path / "out"
    args = ["simulate", str(trace), "--gpus", "8", "--policy", "pollux", "--efficiency",
            "--no-plots", "--out", str(out)]  # fmt: skip
    done = runner.invoke(main, args, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "pollux mode" in done.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mode"] == "pollux"
    assert summary["policy"] == "pollux"
    assert summary["delta_min"] == 1.0
    assert summary["jobs_completed_total"] == 2
    bad = runner.invoke(main, [*args, "--paper"])
    assert bad.exit_code == 2
    assert "--paper" in bad.output
    bad = runner.invoke(main, [*args, "--placement", "fewest"])
    assert bad.exit_code == 2
    assert "--placement fewest" in bad.output


def test_no_two_pollux_interval_rounds_share_a_time() -> None:
    policy = PolluxPolicy(CONFIG, capacity=4, cluster=CLUSTER)
    assert policy.next_round_at() is None
    policy.arrive(make_job("a", k_max=4), 30.0)
    assert policy.next_round_at() == 60.0
    policy.step(60.0, lambda name: 0)
    assert policy.next_round_at() == 120.0
    policy.finish("a", 90.0)
    assert policy.next_round_at() is None
    with pytest.raises(SpecError, match="capacity"):
        policy.set_capacity(8, 100.0)


def test_every_split_checked_by_brute_force_on_a_tiny_cluster() -> None:
    policy = PolluxPolicy(CONFIG, capacity=6, cluster=CLUSTER)
    for name, weights, k in (("x", 1_000_000, 4), ("y", 300_000_000, 6), ("z", 20_000_000, 3)):
        policy.arrive(make_job(name, weights=weights, k_max=k), 0.0)
    _names, values = _values_for(policy, 300.0)
    best = max(
        (c for c in itertools.product(*(range(v.size) for v in values)) if sum(c) <= 6),
        key=lambda c: sum(values[i, k] for i, k in enumerate(c)),
    )
    got = allocate(values, 6, method="numpy").tolist()
    assert sum(values[i, k] for i, k in enumerate(got)) == pytest.approx(
        sum(values[i, k] for i, k in enumerate(best))
    )


def test_nodes_take_exactly_the_placement_a_policy_chose() -> None:
    nodes = Nodes(8, 4)
    assert nodes.take(((1, 3), (0, 1))) == ((0, 1), (1, 3))
    assert nodes.free == [3, 1]
    with pytest.raises(SpecError, match=r"placement\[1\]"):
        nodes.take(((1, 2),))
    assert nodes.free == [3, 1]  # nothing taken
    nodes.release(((0, 1), (1, 3)))
    assert nodes.free == [4, 4]


def test_the_exploration_cap_at_most_doubles_a_job_each_round() -> None:
    free_moves = AutoscalerConfig(delta_s=POLLUX_INTERVAL_S, restart_s=0.0)  # factor 1
    policy = PolluxPolicy(free_moves, capacity=16, cluster=CLUSTER)
    policy.arrive(make_job("a", k_max=16, weights=1_000_000), 0.0)
    held = []
    for now in (60.0, 120.0, 180.0, 240.0, 300.0, 360.0):
        policy.step(now, lambda name: 0)
        held.append(sum(g for _, g in policy.placement("a")))
    assert held == [1, 2, 4, 8, 16, 16]  # alone and scaling well, it doubles up to the cluster
    free = PolluxPolicy(free_moves, capacity=16, cluster=CLUSTER, explore=False)
    free.arrive(make_job("a", k_max=16, weights=1_000_000), 0.0)
    free.step(60.0, lambda name: 0)
    assert sum(g for _, g in free.placement("a")) == 16


def test_a_job_retuned_in_place_is_charged_no_faster_than_its_best_batch_allows(
    tmp_path: Path,
) -> None:
    """A lone imagenet job on one GPU: Pollux retunes its batch in place as its progress
    moves (20, 70, ... 115, all below M0 = 200). Each segment is charged the progress its
    samples make (``EfficiencyProfile.progress_after``), so the run can be no faster than
    always running at the best goodput of the moment: ``integral ds / max_b X(b) E(b, s)``.
    Before the inverse was fixed below M0 it finished in 5.3 min, against that bound's
    14.1 (14.2 min now)."""
    (job,) = _trace(tmp_path, ["a,0,imagenet,1,200"])
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, work=207_898.0))
    result = run([job], gpus=1, config=CONFIG, cluster=CLUSTER, nodes=True, pollux=True,
                 efficiency=MODEL_EFFICIENCY)  # fmt: skip
    (record,) = result.jobs
    assert len({s.batch for s in record.segments}) >= 3  # retuned in place, several times
    profile = MODEL_EFFICIENCY["imagenet"]
    batches = np.arange(job.spec.b_min, job.spec.m_max + 1)
    rates = np.array([throughput(job.spec, 1, int(b), CLUSTER) for b in batches])
    edges = np.linspace(0.0, job.spec.work, 4001)
    middle = (edges[1:] + edges[:-1]) / 2
    best = (rates[:, None] * profile.efficiency(batches[:, None], middle[None, :])).max(axis=0)
    bound = float((np.diff(edges) / best).sum())
    assert record.finish_s is not None
    assert record.finish_s >= bound * 0.999
    done = 0.0
    for seg in record.segments:  # each segment's samples make the progress it was credited
        samples = throughput(job.spec, seg.gpus, seg.batch, CLUSTER) * (seg.end_s - seg.start_s)
        after = float(profile.progress_after(seg.batch, done, samples))
        assert float(profile.samples_between(seg.batch, done, after)) == pytest.approx(samples)
        done = after
    assert done == pytest.approx(job.spec.work, rel=1e-6)


def test_without_retunes_in_place_a_batch_change_is_a_priced_restart(tmp_path: Path) -> None:
    """``retune=False`` (Bellows mode's job constraints): the same lone imagenet job changes
    its batch only by a restart onto its node, which the simulator charges, and only where
    its goodput there beats the batch it runs by Pollux's restart factor: fewer batch
    changes than in place, each a rescale, and a later finish."""
    (job,) = _trace(tmp_path, ["a,0,imagenet,1,200"])
    job = dataclasses.replace(job, spec=dataclasses.replace(job.spec, work=207_898.0))
    records = []
    for retune in (True, False):
        result = run([job], gpus=1, config=CONFIG, cluster=CLUSTER, nodes=True, pollux=True,
                     efficiency=MODEL_EFFICIENCY, pollux_retune=retune)  # fmt: skip
        records.append(result.jobs[0])
    in_place, restarted = records
    assert in_place.rescales == 0
    changes = sum(a.batch != b.batch for a, b in itertools.pairwise(restarted.segments))
    assert 1 <= changes < len(in_place.segments) - 1
    assert restarted.rescales == changes
    assert all(s.gpus == 1 for s in restarted.segments)
    assert in_place.finish_s is not None
    assert restarted.finish_s is not None
    assert restarted.finish_s > in_place.finish_s
    policy = PolluxPolicy(CONFIG, capacity=1, cluster=CLUSTER, retune=False)
    policy.charge("a", MODEL_EFFICIENCY["imagenet"])
    policy.arrive(job.spec, 0.0)
    decided = [
        d for t in range(0, 1200, 60) for d in policy.step(float(t), lambda _, t=t: min(9, t // 90))
    ]
    assert not any(isinstance(d, Retune) for d in decided)
    assert any(isinstance(d, Rescale) and d.gpus == d.gpus_from == 1 for d in decided)
