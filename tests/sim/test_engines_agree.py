"""A whole simulation decides the same, to the byte of jobs.csv and summary.json, whichever
optimizer path runs it (the NumPy engine, ``auto`` with its compile-cost rule, a forced JAX
path), whether the compiled parts or their NumPy versions run, and whether the TSF rows were
tabulated up front in batches or one per arrival."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Engines
from bellows.optimizer import Method
from bellows.scaling import default_cluster, tsf_tables
from bellows.sim import run
from bellows.sim.metrics import jobs_csv_text
from bellows.sim.workloads.generating import WorkloadSpec, generate
from bellows.sim.workloads.traces import TraceJob

GPUS = 40
CONFIGS = {
    "bellows": AutoscalerConfig(),
    "paper": AutoscalerConfig.paper(queue=True),
    "baseline": AutoscalerConfig.paper(policy="baseline"),  # type: ignore[arg-type]
}


@pytest.fixture(scope="module")
def trace() -> tuple[TraceJob, ...]:
    spec = WorkloadSpec("bursty", 90, (1, 2, 3, 4), GPUS, period_min=30)  # type: ignore[arg-type]
    return generate(spec, np.random.default_rng(5), cluster=default_cluster())


def _outputs(
    trace: tuple[TraceJob, ...], config: AutoscalerConfig, engines: Engines | None = None
) -> tuple[str, str]:
    result = run(trace, gpus=GPUS, config=config, cluster=default_cluster(), engines=engines)
    return jobs_csv_text(result.jobs), json.dumps(result.summary(), sort_keys=True)


@pytest.mark.parametrize("mode", sorted(CONFIGS))
def test_every_optimizer_path_gives_the_same_run(trace: tuple[TraceJob, ...], mode: str) -> None:
    config = CONFIGS[mode]
    methods: tuple[Method, ...] = ("numpy", "auto", "dense")
    runs = {
        m: _outputs(trace, AutoscalerConfig(**{**vars(config), "optimizer": m})) for m in methods
    }
    assert runs["auto"] == runs["numpy"]
    assert runs["dense"] == runs["numpy"]
    assert len(runs["numpy"][0].splitlines()) == len(trace) + 1


@pytest.mark.parametrize("mode", sorted(CONFIGS))
@pytest.mark.parametrize(
    "numpy_part",
    [Engines(compiled_layers=False), Engines(compiled_weighing=False)],
    ids=["dp layers", "tsf batches"],
)
def test_the_compiled_parts_and_their_numpy_versions_give_the_same_run(
    trace: tuple[TraceJob, ...], mode: str, numpy_part: Engines
) -> None:
    config = AutoscalerConfig(**{**vars(CONFIGS[mode]), "optimizer": "numpy"})
    compiled = _outputs(trace, config, Engines())
    assert _outputs(trace, config, numpy_part) == compiled


def test_batched_rows_equal_rows_one_job_at_a_time(trace: tuple[TraceJob, ...]) -> None:
    cluster = default_cluster()
    jobs = [job.spec for job in trace]
    for fixed in (False, True):
        batch = tsf_tables(jobs, cluster, fixed_batch=fixed)
        for j, job in enumerate(jobs):
            alone = tsf_tables([job], cluster, fixed_batch=fixed, width=job.k_max)
            cut = slice(0, job.k_max + 1)
            assert np.array_equal(batch.values[j, cut], alone.values[0]), job.name
            assert np.array_equal(batch.batch[j, cut], alone.batch[0]), job.name
            assert np.array_equal(batch.throughput[j, cut], alone.throughput[0]), job.name


def _decisions(trace: tuple[TraceJob, ...], *, tabulate: bool) -> list[Any]:
    auto = Autoscaler(AutoscalerConfig(), capacity=GPUS, cluster=default_cluster())
    if tabulate:
        assert auto.tabulate(job.spec for job in trace) > 0
    out: list[Any] = []
    for job in sorted(trace, key=lambda j: j.arrival_s):
        auto.arrive(job.spec, job.arrival_s)
        out.extend(auto.step(job.arrival_s))
    return out


def test_tabulating_ahead_changes_no_decision(trace: tuple[TraceJob, ...]) -> None:
    assert _decisions(trace, tabulate=True) == _decisions(trace, tabulate=False)
