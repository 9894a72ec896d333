"""The paper's Section IV grid, run elastic versus baseline, with the paper's numbers beside;
and the scenarios of the report's *Beyond the paper* section.

Each :class:`Experiment` is one of the paper's figures or tables: a generated workload (the
same trace for both policies: the elastic policy ignores ``batch_size``) run under the
elastic policy and the fixed-batch baseline, both in paper mode
(:meth:`AutoscalerConfig.paper`). :func:`run_grid` runs them all and returns :class:`Outcome`
values; :mod:`bellows.sim.report` turns them into Markdown.

:func:`beyond_scenarios` lists the traces on which the report sets paper mode, the
event-driven baseline and Bellows mode side by side (:mod:`bellows.sim.comparing`), and
:func:`run_beyond` runs them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bellows.autoscaler import AutoscalerConfig, Policy
from bellows.scaling import ClusterProfile
from bellows.sim.comparing import (
    POLICIES,
    POLLUX_GPUS,
    PolicyRun,
    Scenario,
    Source,
    bursty,
    imported,
    run_many,
)
from bellows.sim.engine import SimResult, run
from bellows.sim.workloads.generating import BatchChoice, Pattern, WorkloadSpec, generate
from bellows.sim.workloads.traces import fit_trace

__all__ = [
    "BEYOND_SEED",
    "EXPERIMENTS",
    "Beyond",
    "Experiment",
    "Outcome",
    "PaperClaim",
    "beyond_files",
    "beyond_scenarios",
    "quick",
    "run_beyond",
    "run_grid",
]


@dataclass(frozen=True)
class PaperClaim:
    """What the paper reports for an experiment: a jobs-completed gain and/or JCTs (min)."""

    text: str
    jobs_gain: float | None = None  # elastic / baseline - 1, jobs completed
    jct_elastic: float | None = None
    jct_baseline: float | None = None


@dataclass(frozen=True)
class Experiment:
    """One figure or table of the paper: a workload, a cluster, a mode."""

    key: str
    figure: str
    title: str
    workload: WorkloadSpec
    queue: bool
    claim: PaperClaim
    seed: int = 2020


@dataclass(frozen=True)
class Outcome:
    """Both policies' results on one experiment's trace."""

    experiment: Experiment
    elastic: SimResult
    baseline: SimResult

    @property
    def summaries(self) -> tuple[dict[str, Any], dict[str, Any]]:
        return self.elastic.summary(), self.baseline.summary()

    @property
    def jobs_gain(self) -> float | None:
        el, ba = self.summaries
        done_b = ba["jobs_completed"]
        return None if done_b == 0 else el["jobs_completed"] / done_b - 1.0


def _w(
    pattern: str,
    minutes: float,
    cats: tuple[int, ...],
    gpus: int,
    batch: str,
    *,
    period: float = 60,
) -> WorkloadSpec:
    return WorkloadSpec(
        Pattern(pattern), minutes, cats, gpus, baseline_batch=BatchChoice(batch),
        period_min=period,
    )  # fmt: skip


EXPERIMENTS: tuple[Experiment, ...] = (
    Experiment(
        "fig8a", "Fig. 8(a)", "Category 1, high arrival, Max-BS baseline",
        _w("high", 240, (1,), 40, "max"), False,
        PaperClaim("elastic completes about 10x the jobs", jobs_gain=9.0),
    ),
    Experiment(
        "fig8b", "Fig. 8(b)", "Category 1, high arrival, Min-BS baseline",
        _w("high", 240, (1,), 40, "min"), False,
        PaperClaim("baseline comparable to elastic (both run small batches)", jobs_gain=0.0),
    ),
    Experiment(
        "fig8c", "Fig. 8(c)", "Category 1, low arrival, Max-BS baseline",
        _w("low", 240, (1,), 40, "max"), False,
        PaperClaim("elastic marginally more jobs; JCT 23.04 vs 27.39 min (16% faster)",
                   jct_elastic=23.04, jct_baseline=27.39),
    ),
    *(
        Experiment(
            f"fig5{letter}", f"Fig. 5({letter})", f"Category {cat}, high arrival, Random-BS",
            _w("high", 240, (cat,), 40, "random"), False,
            PaperClaim(text, jobs_gain=gain),
        )
        for letter, cat, gain, text in (
            ("a", 1, 0.82, "+82% jobs"),
            ("b", 2, 0.644, "+64.4% jobs"),
            ("c", 3, 0.90, "+90% jobs"),
            ("d", 4, 0.0, "equal (rigid jobs)"),
        )
    ),
    Experiment(
        "fig6a", "Fig. 6(a)", "Category 1, low arrival, Random-BS",
        _w("low", 240, (1,), 40, "random"), False,
        PaperClaim("+97% jobs", jobs_gain=0.97),
    ),
    Experiment(
        "fig6b", "Fig. 6(b)", "Category 1, bursty arrival (60 min), Random-BS",
        _w("bursty", 240, (1,), 40, "random", period=60), False,
        PaperClaim("+119% jobs", jobs_gain=1.19),
    ),
    Experiment(
        "fig7a", "Fig. 7(a), Table III", "40 GPUs, 720 min, mixed bursty (120 min), no queue",
        _w("bursty", 720, (1, 2, 3, 4), 40, "random", period=120), False,
        PaperClaim("+50% jobs; JCT elastic 24.97, baseline 34.12 min", jobs_gain=0.50,
                   jct_elastic=24.97, jct_baseline=34.12),
    ),
    Experiment(
        "fig7b", "Fig. 7(b), Table III", "40 GPUs, 720 min, mixed bursty (120 min), queue",
        _w("bursty", 720, (1, 2, 3, 4), 40, "random", period=120), True,
        PaperClaim("elastic nearly matches arrivals; JCT elastic 33.79, baseline 351.02 min",
                   jct_elastic=33.79, jct_baseline=351.02),
    ),
    Experiment(
        "fig9a", "Fig. 9(a)", "400 GPUs, 480 min, mixed bursty (120 min), no queue",
        _w("bursty", 480, (1, 2, 3, 4), 400, "random", period=120), False,
        PaperClaim("+60% jobs", jobs_gain=0.60),
    ),
    Experiment(
        "fig9b", "Fig. 9(b), Table IV", "400 GPUs, 480 min, mixed bursty (120 min), queue",
        _w("bursty", 480, (1, 2, 3, 4), 400, "random", period=120), True,
        PaperClaim("JCT elastic 27.84, baseline 166.82 min", jct_elastic=27.84,
                   jct_baseline=166.82),
    ),
)  # fmt: skip


def quick(experiment: Experiment) -> Experiment:
    """A smaller version for tests: a quarter of the window, at most 40 GPUs."""
    w = experiment.workload
    small = replace(
        w, minutes=w.minutes / 4, gpus=min(w.gpus, 40), period_min=min(w.period_min, w.minutes / 8)
    )
    return replace(experiment, workload=small)


def run_experiment(
    experiment: Experiment, *, cluster: ClusterProfile, delta_s: float = 600.0
) -> Outcome:
    """Generate the experiment's trace from its seed and run both policies on it."""
    w = experiment.workload
    trace, _ = fit_trace(
        generate(w, np.random.default_rng(experiment.seed), cluster=cluster), w.gpus
    )
    horizon = w.minutes * 60.0
    results = [
        run(
            trace,
            gpus=w.gpus,
            cluster=cluster,
            horizon_s=horizon,
            config=AutoscalerConfig.paper(policy=policy, queue=experiment.queue, delta_s=delta_s),
        )
        for policy in (Policy.ELASTIC, Policy.BASELINE)
    ]
    return Outcome(experiment, results[0], results[1])


def run_grid(
    experiments: Sequence[Experiment],
    *,
    cluster: ClusterProfile,
    on_done: Callable[[Outcome], None] = lambda _: None,
) -> list[Outcome]:
    """Run every experiment in order; ``on_done`` is called after each (progress bars)."""
    outcomes = []
    for experiment in experiments:
        outcome = run_experiment(experiment, cluster=cluster)
        on_done(outcome)
        outcomes.append(outcome)
    return outcomes


BEYOND_SEED = 1
"""Seed of the generated scenario in *Beyond the paper* (``benchmarks/policies.py``'s first)."""
_QUICK_POLLUX_JOBS = 40


def beyond_files(data: Path, *, is_quick: bool = False) -> list[Path]:
    """The real traces *Beyond the paper* reads under ``data`` (``shared/data``)."""
    if is_quick:
        return [data / "itp" / "195job.csv", data / "pollux" / "workloads" / "workload-1.csv"]
    pollux = [data / "pollux" / "workloads" / f"workload-{i}.csv" for i in range(1, 9)]
    return [data / "itp" / "cluster04.csv", *pollux]


def beyond_scenarios(
    data: Path, *, is_quick: bool = False, seed: int = BEYOND_SEED
) -> list[Scenario]:
    """The paper's 400-GPU bursty scenario, the ITP cluster04 replay at offered load 1 and the
    eight Pollux workloads on 64 GPUs; quick: 40 GPUs for 120 min, ITP's 195-job sample and
    the first 40 jobs of Pollux workload 1."""
    files = beyond_files(data, is_quick=is_quick)
    if is_quick:
        return [
            bursty(seed, gpus=40, minutes=120.0, period_min=30.0),
            imported(Source.ITP, files[0]),
            imported(Source.POLLUX, files[1], gpus=POLLUX_GPUS, first=_QUICK_POLLUX_JOBS),
        ]
    return [
        bursty(seed),
        imported(Source.ITP, files[0]),
        *(imported(Source.POLLUX, path, gpus=POLLUX_GPUS) for path in files[1:]),
    ]


Beyond = list[tuple[Scenario, dict[str, PolicyRun]]]
"""Each scenario with its runs by policy name (``paper``, ``baseline``, ``bellows``)."""


def run_beyond(
    scenarios: Sequence[Scenario],
    *,
    workers: int = 1,
    on_done: Callable[[PolicyRun], None] = lambda _: None,
) -> Beyond:
    """Run the three policies on every scenario, ``workers`` runs at a time; the results keep
    their :class:`SimResult` for the figures."""
    tasks = [(s, p) for s in scenarios for p in POLICIES]
    runs = run_many(tasks, workers=workers, keep_results=True, on_done=on_done)
    by_key = {(r.scenario, r.policy): r for r in runs}
    return [(s, {p: by_key[(s.key, p)] for p in POLICIES}) for s in scenarios]
