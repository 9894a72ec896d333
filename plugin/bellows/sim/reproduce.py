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

Every run is a :class:`~bellows.sim.running.Task` (an experiment's two policies are two, on
the one trace, built here once and shared), so that ``bellows reproduce`` runs them as
``bellows sweep`` runs cells: in this process, on local workers or on Ray
(:func:`run_reproduction`, all runs in one go, so that no worker waits for a slow part).
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
    policy_tasks,
    run_many,
)
from bellows.sim.engine import SimResult, run
from bellows.sim.running import Finished, InProcess, Runner, Task, collect
from bellows.sim.workloads.generating import BatchChoice, Pattern, WorkloadSpec, generate
from bellows.sim.workloads.traces import TraceJob, fit_trace

__all__ = [
    "BEYOND_SEED",
    "EXPERIMENTS",
    "PAPER_DELTA_S",
    "Beyond",
    "Experiment",
    "Outcome",
    "PaperClaim",
    "beyond_files",
    "beyond_scenarios",
    "experiment_trace",
    "grid_tasks",
    "quick",
    "run_beyond",
    "run_experiment",
    "run_experiment_policy",
    "run_grid",
    "run_reproduction",
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


_GRID_POLICIES = (Policy.ELASTIC, Policy.BASELINE)
PAPER_DELTA_S = 600.0


def experiment_trace(experiment: Experiment, cluster: ClusterProfile) -> tuple[TraceJob, ...]:
    """The experiment's trace, generated from its seed and fitted to its cluster."""
    w = experiment.workload
    rng = np.random.default_rng(experiment.seed)
    return fit_trace(generate(w, rng, cluster=cluster), w.gpus)[0]


def run_experiment_policy(
    trace: tuple[TraceJob, ...],
    experiment: Experiment,
    policy: Policy,
    cluster: ClusterProfile,
    delta_s: float = PAPER_DELTA_S,
) -> SimResult:
    """One policy of an experiment, in paper mode, on its trace (a module-level function:
    a runner may send it to another process)."""
    w = experiment.workload
    config = AutoscalerConfig.paper(policy=policy, queue=experiment.queue, delta_s=delta_s)
    return run(trace, gpus=w.gpus, cluster=cluster, horizon_s=w.minutes * 60.0, config=config)


def run_experiment(
    experiment: Experiment, *, cluster: ClusterProfile, delta_s: float = PAPER_DELTA_S
) -> Outcome:
    """Generate the experiment's trace from its seed and run both policies on it, here."""
    trace = experiment_trace(experiment, cluster)
    elastic, baseline = (
        run_experiment_policy(trace, experiment, p, cluster, delta_s) for p in _GRID_POLICIES
    )
    return Outcome(experiment, elastic, baseline)


def _key(experiment: Experiment, policy: Policy) -> str:
    return f"{experiment.key}/{policy.value}"


def grid_tasks(
    experiments: Sequence[Experiment], *, cluster: ClusterProfile, delta_s: float = PAPER_DELTA_S
) -> tuple[list[Task], dict[str, object]]:
    """Both policies of every experiment as tasks (keyed ``experiment/policy``), and the
    experiments' traces they share, by experiment key; a task's cost is its trace's jobs."""
    shared: dict[str, object] = {}
    tasks: list[Task] = []
    for experiment in experiments:
        trace = experiment_trace(experiment, cluster)
        shared[experiment.key] = trace
        tasks.extend(
            Task(_key(experiment, p), run_experiment_policy, (experiment, p, cluster, delta_s),
                 shared=(experiment.key,), cost=float(len(trace)))
            for p in _GRID_POLICIES
        )  # fmt: skip
    return tasks, shared


def run_reproduction(
    experiments: Sequence[Experiment],
    scenarios: Sequence[Scenario],
    *,
    runner: Runner,
    cluster: ClusterProfile,
    on_outcome: Callable[[Outcome], None] = lambda _: None,
    on_run: Callable[[PolicyRun], None] = lambda _: None,
) -> tuple[list[Outcome], Beyond]:
    """Every experiment (both policies) and the three policies on every scenario, all on
    ``runner`` at once; ``on_outcome`` is called as an experiment's second policy finishes,
    ``on_run`` as each run beyond the paper does. The real-trace replays beyond the paper
    are the longest runs: they start first. A run that fails twice raises
    :class:`~bellows.sim.running.TaskFailedError` once every other has finished."""
    tasks, shared = grid_tasks(experiments, cluster=cluster)
    longest = max((t.cost for t in tasks), default=0.0)
    beyond = [
        replace(t, cost=longest + t.cost)
        for t in policy_tasks([(s, p) for s in scenarios for p in POLICIES], keep_results=True)
    ]
    by_key = {e.key: e for e in experiments}
    halves: dict[str, SimResult] = {}

    def done(finished: Finished) -> None:
        if not finished.ok:
            return
        if isinstance(finished.value, PolicyRun):
            on_run(finished.value)
            return
        key, _, policy = finished.key.partition("/")
        halves[finished.key] = finished.value
        other = _key(by_key[key], Policy.BASELINE if policy == Policy.ELASTIC else Policy.ELASTIC)
        if other in halves:
            on_outcome(_outcome(by_key[key], halves))

    values = collect(runner, [*beyond, *tasks], shared, on_done=done)
    outcomes = [_outcome(e, values) for e in experiments]
    runs = {(r.scenario, r.policy): r for r in values.values() if isinstance(r, PolicyRun)}
    return outcomes, [(s, {p: runs[(s.key, p)] for p in POLICIES}) for s in scenarios]


def _outcome(experiment: Experiment, results: dict[str, Any]) -> Outcome:
    elastic, baseline = (results[_key(experiment, p)] for p in _GRID_POLICIES)
    return Outcome(experiment, elastic, baseline)


def run_grid(
    experiments: Sequence[Experiment],
    *,
    cluster: ClusterProfile,
    runner: Runner | None = None,
    on_done: Callable[[Outcome], None] = lambda _: None,
) -> list[Outcome]:
    """Run every experiment (on ``runner``; default: one after another, here); ``on_done``
    is called as each completes (progress bars). Outcomes come back in ``experiments``'
    order."""
    outcomes, _ = run_reproduction(
        experiments, (), runner=runner or InProcess(), cluster=cluster, on_outcome=on_done
    )
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
    runner: Runner | None = None,
    on_done: Callable[[PolicyRun], None] = lambda _: None,
) -> Beyond:
    """Run the three policies on every scenario, on ``runner`` (default: ``workers`` local
    processes); the results keep their :class:`SimResult` for the figures."""
    tasks = [(s, p) for s in scenarios for p in POLICIES]
    runs = run_many(tasks, workers=workers, runner=runner, keep_results=True, on_done=on_done)
    by_key = {(r.scenario, r.policy): r for r in runs}
    return [(s, {p: by_key[(s.key, p)] for p in POLICIES}) for s in scenarios]
