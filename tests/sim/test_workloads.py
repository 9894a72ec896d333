"""Generated workloads (paper IV-A), the embedded model profiles and the imported traces."""

from __future__ import annotations

import csv
import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest

from bellows.jobs import SpecError
from bellows.scaling import default_cluster, single_gpu_throughput, throughput, tsf_tables
from bellows.sim.workloads.categories import CATEGORIES, K_MAX, category
from bellows.sim.workloads.generating import (
    WorkloadSpec,
    arrival_rates,
    arrival_times,
    generate,
    mean_length_s,
)
from bellows.sim.workloads.importing import (
    POLLUX_DATASETS,
    POLLUX_EPOCHS,
    gpus_for_load,
    import_itp,
    import_pollux,
)
from bellows.sim.workloads.models import MODELS, derive_model_profile

CLUSTER = default_cluster()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_embedded_profiles_are_what_the_jsa_fits_from_the_data(
    shared_data: Path, name: str
) -> None:
    derived = derive_model_profile(name, shared_data / "pollux/profiles" / name / "placements.csv")
    assert derived.step == MODELS[name].step
    # the cluster model may be refitted; the effective weights must stay within 1 %
    assert derived.weights == pytest.approx(MODELS[name].weights, rel=0.01)


def _tsf_at_k_max(number: int, *, fixed_small: bool) -> float:
    cat = CATEGORIES[number]
    batch = K_MAX * cat.b_min if fixed_small else cat.b_max
    job = cat.job(f"c{number}", batch_size=batch, work=1.0)
    return float(tsf_tables([job], CLUSTER, fixed_batch=fixed_small).values[0, K_MAX])


def test_categories_follow_measured_scaling() -> None:
    large = {c: _tsf_at_k_max(c, fixed_small=False) for c in (1, 2, 3)}  # best batch
    small = {c: _tsf_at_k_max(c, fixed_small=True) for c in (1, 2, 3)}  # smallest per-GPU batch
    # compute-bound beats communication-bound at both ends of the batch range
    assert large[1] > large[2]
    assert small[1] > small[2]
    # communication-bound: the lowest best-batch TSF of all six measured models
    for name, m in MODELS.items():
        other = CATEGORIES[1].job("x", batch_size=CATEGORIES[1].b_max, work=1.0)
        other = dataclasses.replace(
            other,
            b_min=m.m_min,
            b_max=K_MAX * m.m_max,
            batch_size=K_MAX * m.m_max,
            m_max=m.m_max,
            weights=m.weights,
            profile=m.step,
        )
        assert tsf_tables([other], CLUSTER, fixed_batch=False).values[0, K_MAX] >= large[2], name
    # balanced: its balance swings most with the batch (best at large, poor at small)
    swing = {c: large[c] / small[c] for c in (1, 2, 3)}
    assert swing[3] == max(swing.values())
    assert not CATEGORIES[4].elastic


def test_same_seed_same_workload_and_batches_follow_the_choice() -> None:
    spec = WorkloadSpec("bursty", 120, (1, 2, 3, 4), 40, baseline_batch="random")
    a = generate(spec, np.random.default_rng(3), cluster=CLUSTER)
    b = generate(spec, np.random.default_rng(3), cluster=CLUSTER)
    assert a == b
    assert len(a) > 10
    for choice, pick in (("max", "b_max"), ("min", "b_min")):
        for job in generate(
            WorkloadSpec("high", 30, (2,), 40, baseline_batch=choice),
            np.random.default_rng(1),
            cluster=CLUSTER,
        ):
            assert job.spec.batch_size == getattr(job.spec, pick)


@pytest.mark.parametrize(
    ("cats", "minutes"), [((1,), [30.0]), ((1, 2, 3, 4), [16.0, 21.0, 41.0, 27.0])]
)
def test_job_lengths_on_one_gpu_at_max_batch(cats: tuple[int, ...], minutes: list[float]) -> None:
    jobs = generate(WorkloadSpec("high", 120, cats, 40), np.random.default_rng(0), cluster=CLUSTER)
    lengths = {
        j.spec.category: j.spec.work / single_gpu_throughput(j.spec, CLUSTER) / 60 for j in jobs
    }
    assert sorted(lengths) == [str(c) for c in cats]
    for c, expected in zip(cats, minutes, strict=True):
        assert lengths[str(c)] == pytest.approx(expected)


def test_rates_follow_the_offered_load() -> None:
    spec = WorkloadSpec("high", 60, (1, 2, 3, 4), 40, load_high=1.0)
    high, low = arrival_rates(spec)
    assert mean_length_s(spec) == pytest.approx(60 * (16 + 21 + 41 + 27) / 4)
    assert high * mean_length_s(spec) == pytest.approx(40.0)
    assert low == pytest.approx(high / 4)


def test_bursty_arrivals_alternate_high_and_low() -> None:
    spec = WorkloadSpec("bursty", 960, (1,), 400, period_min=120)
    times = np.array(arrival_times(spec, np.random.default_rng(5)))
    high, low = arrival_rates(spec)
    for piece in range(8):
        n = np.count_nonzero((times >= piece * 7200) & (times < (piece + 1) * 7200))
        expected = (high if piece % 2 == 0 else low) * 7200
        assert abs(n - expected) < 5 * math.sqrt(expected)  # Poisson, 5 sigma


def test_bad_specs_name_the_field() -> None:
    with pytest.raises(SpecError, match="pattern"):
        WorkloadSpec("sometimes", 60, (1,), 40)
    with pytest.raises(SpecError, match=r"categories\[0\]=5"):
        WorkloadSpec("high", 60, (5,), 40)
    with pytest.raises(SpecError, match="categories"):
        WorkloadSpec("high", 60, (), 40)
    with pytest.raises(SpecError, match="batch_size"):
        category(1).job("x", batch_size=10**6, work=1.0)


def test_itp_import_keeps_durations_at_recorded_allocation(shared_data: Path) -> None:
    jobs = import_itp(shared_data / "itp/195job.csv", cluster=CLUSTER)
    with (shared_data / "itp/195job.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(jobs) == len(rows) == 195
    assert min(j.arrival_s for j in jobs) == 0.0
    for job, row in zip(jobs, rows, strict=True):
        spec = job.spec
        assert spec.gpus == int(row["num_gpu"])
        rate = throughput(spec, spec.gpus, spec.batch_size, CLUSTER)
        assert spec.work / rate == pytest.approx(float(row["duration"]))
    assert gpus_for_load(jobs, load=1.0, cluster=CLUSTER) >= 1


def test_pollux_import(shared_data: Path, tmp_path: Path) -> None:
    # a few rows of every application (NCF's huge batch range makes JobSpec slow to build)
    source = shared_data / "pollux/workloads/workload-1.csv"
    header, *rows = source.read_text().splitlines()
    kept, seen = [], dict.fromkeys(MODELS, 0)
    for row in rows:
        app = row.split(",")[2]
        if seen[app] < (1 if app == "ncf" else 3):
            seen[app] += 1
            kept.append(row)
    subset = tmp_path / "w.csv"
    subset.write_text("\n".join([header, *kept]) + "\n")
    jobs = import_pollux(subset)
    assert len(jobs) == len(kept)
    assert {j.model for j in jobs} == set(MODELS)
    for job, row in zip(jobs, kept, strict=True):
        name, time, app, replicas, _ = row.split(",")
        assert (job.spec.name, job.arrival_s, job.model) == (name, float(time), app)
        assert job.spec.gpus == int(replicas)
        assert job.spec.b_min <= job.spec.batch_size <= job.spec.b_max
        assert job.spec.work == POLLUX_EPOCHS[app] * POLLUX_DATASETS[app]


def test_import_refuses_unknown_model(tmp_path: Path) -> None:
    bad = tmp_path / "w.csv"
    bad.write_text("name,time,application,num_replicas,batch_size\nx,1,alexnet,1,32\n")
    with pytest.raises(SpecError, match=r"w.csv:2.application"):
        import_pollux(bad)
