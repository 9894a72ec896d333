"""Paper mode, the event-driven fixed-batch baseline and Bellows mode side by side.

The three policies (:func:`policies`), each with a queue and each charged the same restart
cost per halt (the simulator charges it, the optimizer prices it):

* ``paper``: the paper's elastic autoscaler (:meth:`AutoscalerConfig.paper`): rounds every
  10 minutes, every decision waits for one;
* ``baseline``: the owner's batch size on as many GPUs as it takes, with a round at every
  arrival and completion (Δ = 0): a plain event-driven scheduler that never changes a batch;
* ``bellows``: Bellows mode as configured by default (:class:`AutoscalerConfig`);
* ``pollux`` (not in :data:`POLICIES`, asked for by name): the Pollux reference
  (:mod:`bellows.sim.pollux`), rounds every 60 s, per-node placement, the same restart cost.

A :class:`Scenario` names a trace (generated, or imported from ITP or Pollux) and a cluster
size; :func:`run_policy` runs one policy on it, writes the run's ``jobs.csv`` and checks it
as a user would (:func:`jobs_csv_over_commit`); :func:`run_many` runs several at once in
separate processes; :func:`check_targets` holds the runs to the targets of issue 10.
"""

from __future__ import annotations

import csv
import math
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from bellows.autoscaler import (
    DEFAULT_OBJECTIVE,
    DEFAULT_RESTART_S,
    AutoscalerConfig,
    Objective,
    Policy,
)
from bellows.inputs import SpecError, parse_float, parse_int
from bellows.jobs import MAX_GPUS
from bellows.scaling import MODEL_EFFICIENCY, ClusterProfile, default_cluster
from bellows.sim.engine import SimResult, run
from bellows.sim.metrics import write_jobs_csv
from bellows.sim.pollux import POLLUX_INTERVAL_S
from bellows.sim.running import Finished, Runner, Task, collect, make_runner
from bellows.sim.workloads.generating import BatchChoice, Pattern, WorkloadSpec, generate
from bellows.sim.workloads.importing import gpus_for_load, import_itp, import_pollux
from bellows.sim.workloads.traces import TraceJob, fit_trace

__all__ = [
    "COLUMNS",
    "POLICIES",
    "POLLUX",
    "POLLUX_GPUS",
    "Column",
    "PolicyRun",
    "Scenario",
    "Source",
    "Target",
    "bursty",
    "check_targets",
    "detailed",
    "imported",
    "jobs_csv_over_commit",
    "median_row",
    "policies",
    "policy_tasks",
    "row",
    "run_many",
    "run_policy",
]

POLICIES: tuple[str, ...] = ("paper", "baseline", "bellows")
POLLUX = "pollux"
"""The Pollux reference's name as a policy (:func:`run_policy`); it always places on nodes."""

POLLUX_GPUS = 64
"""The Pollux workloads' cluster: 16 nodes of 4 T4 GPUs, the size of Pollux's testbed and its
simulator's default, and the nodes our default cluster profile models."""


def policies(
    restart_s: float = DEFAULT_RESTART_S,
    min_runtime_s: float = 0.0,
    *,
    objective: Objective = DEFAULT_OBJECTIVE,
    restart_growth: float | None = None,
    remaining_exponent: float | None = None,
    early_share: float | None = None,
) -> dict[str, AutoscalerConfig]:
    """The three policies by name, each with a queue and charged ``restart_s`` per halt;
    Bellows mode keeps a job from shrinking for ``min_runtime_s`` after a (re)start and
    maximises ``objective``, each earlier move adding ``restart_growth`` restarts to the
    price of its next, its weights' power ``remaining_exponent`` and its early round at
    ``early_share`` (``None``: the core's defaults; paper mode and the baseline keep the
    paper's)."""
    tuned: dict[str, Any] = {}
    if restart_growth is not None:
        tuned["restart_growth"] = restart_growth
    if remaining_exponent is not None:
        tuned["remaining_exponent"] = remaining_exponent
    if early_share is not None:
        tuned["early_share"] = early_share
    return {
        "paper": AutoscalerConfig.paper(queue=True, restart_s=restart_s),
        "baseline": AutoscalerConfig.paper(
            queue=True, restart_s=restart_s, delta_s=0.0, policy=Policy.BASELINE
        ),
        "bellows": AutoscalerConfig(
            queue=True,
            restart_s=restart_s,
            min_runtime_s=min_runtime_s,
            objective=objective,
            **tuned,
        ),
    }


class Source(StrEnum):
    GENERATED = "generated"  # the paper's synthetic workload (:mod:`...generating`)
    ITP = "itp"  # an ITP cluster CSV
    POLLUX = "pollux"  # a Pollux workload CSV


@dataclass(frozen=True)
class Scenario:
    """A trace and a cluster to run the policies on.

    Generated traces come from ``workload`` and ``seed`` (as ``bellows workload generate``);
    imported ones from ``path``, cut to their ``first`` jobs when set (quick versions).
    ``gpus`` of an imported trace may be ``None``: the size at which it offers load 1.
    ``charge``: the simulator charges statistical efficiency to every policy's jobs whose
    model has a profile (:data:`bellows.scaling.MODEL_EFFICIENCY`, issue 29).
    ``nodes``: every policy's jobs are placed on nodes (``run(nodes=True)``).
    """

    key: str
    title: str
    source: Source
    workload: WorkloadSpec | None = None
    seed: int = 1
    path: Path | None = None
    gpus: int | None = None
    first: int | None = None
    charge: bool = False
    nodes: bool = False

    def placed(self) -> Scenario:
        """This scenario with every job placed on nodes (key and title say so)."""
        return replace(self, key=f"{self.key}-nodes", title=f"{self.title}, on nodes", nodes=True)

    def charged(self) -> Scenario:
        """This scenario with statistical efficiency charged (key and title say so)."""
        return replace(self, key=f"{self.key}-charged", title=f"{self.title}, E(b) charged",
                       charge=True)  # fmt: skip

    def build(self, cluster: ClusterProfile) -> tuple[tuple[TraceJob, ...], int, float | None]:
        """``(trace, gpus, horizon_s)``: the trace fitted to the cluster, as ``simulate``
        fits it; the horizon is a generated trace's arrival window."""
        if self.source is Source.GENERATED:
            if self.workload is None:
                raise SpecError("workload", None, "a WorkloadSpec for a generated scenario")
            w = self.workload
            trace = generate(w, np.random.default_rng(self.seed), cluster=cluster)
            return fit_trace(trace, w.gpus)[0], w.gpus, w.minutes * 60.0
        if self.path is None:
            raise SpecError("path", None, f"the {self.source} file to import")
        if self.source is Source.ITP:
            trace = import_itp(self.path, cluster=cluster)
        else:
            trace = import_pollux(self.path)
        trace = trace[: self.first] if self.first is not None else trace
        gpus = self.gpus or gpus_for_load(trace, load=1.0, cluster=cluster)
        return fit_trace(trace, gpus, source=str(self.path))[0], gpus, None


def bursty(
    seed: int, *, gpus: int = 400, minutes: float = 480.0, period_min: float = 120.0
) -> Scenario:
    """The paper's large mixed scenario (Fig. 9(b)): bursty arrivals of categories 1-4 with
    random baseline batches, as ``bellows workload generate --pattern bursty ...``."""
    workload = WorkloadSpec(
        Pattern.BURSTY, minutes, (1, 2, 3, 4), gpus, baseline_batch=BatchChoice.RANDOM,
        period_min=period_min,
    )  # fmt: skip
    return Scenario(
        f"bursty-{gpus}-s{seed}",
        f"{gpus} GPUs, {minutes:g} min bursty ({period_min:g} min), categories 1-4, seed {seed}",
        Source.GENERATED,
        workload=workload,
        seed=seed,
    )


def imported(
    source: Source, path: Path, *, gpus: int | None = None, first: int | None = None
) -> Scenario:
    """An imported trace; ``gpus=None`` sizes the cluster for offered load 1."""
    cut = "" if first is None else f", first {first} jobs"
    size = "load 1" if gpus is None else f"{gpus} GPUs"
    return Scenario(
        f"{source}-{path.stem}" + ("" if first is None else f"-{first}"),
        f"{source.upper() if source is Source.ITP else source.title()} {path.stem} ({size}{cut})",
        source,
        path=path,
        gpus=gpus,
        first=first,
    )


@dataclass(frozen=True)
class PolicyRun:
    """One policy's run on one scenario: its summary and what its ``jobs.csv`` showed."""

    scenario: str
    policy: str
    gpus: int
    summary: Mapping[str, Any]  # summary.json's keys, less completed_over_time
    over_commit: int  # most GPUs held beyond the capacity at any instant, from jobs.csv
    csv_rows: int  # jobs in jobs.csv
    wall_s: float
    result: SimResult | None = None  # kept for plots when asked for


def run_policy(
    scenario: Scenario,
    policy: str,
    *,
    restart_s: float = DEFAULT_RESTART_S,
    cluster: ClusterProfile | None = None,
    keep_result: bool = False,
    min_runtime_s: float = 0.0,
    objective: Objective = DEFAULT_OBJECTIVE,
    restart_growth: float | None = None,
    pollux_retune: bool = True,
    remaining_exponent: float | None = None,
    early_share: float | None = None,
) -> PolicyRun:
    """Run ``policy`` on ``scenario``; write its ``jobs.csv`` to a temporary folder and
    rebuild the GPUs held at every instant from that file alone. ``pollux_retune=False``:
    the Pollux reference's batch changes are restarts, as Bellows mode's (``run``'s)."""
    profile = default_cluster() if cluster is None else cluster
    pollux = policy == POLLUX
    config = (
        AutoscalerConfig(restart_s=restart_s, delta_s=POLLUX_INTERVAL_S) if pollux
        else policies(
            restart_s, min_runtime_s, objective=objective, restart_growth=restart_growth,
            remaining_exponent=remaining_exponent, early_share=early_share,
        )[policy]
    )  # fmt: skip
    trace, gpus, horizon = scenario.build(profile)
    started = time.perf_counter()
    charge = MODEL_EFFICIENCY if scenario.charge else None
    result = run(
        trace, gpus=gpus, config=config, cluster=profile, horizon_s=horizon, efficiency=charge,
        nodes=scenario.nodes or pollux, pollux=pollux, pollux_retune=pollux_retune,
    )  # fmt: skip
    wall = time.perf_counter() - started
    summary = result.summary()
    summary.pop("completed_over_time")
    with tempfile.TemporaryDirectory(prefix="bellows-policies-") as folder:
        path = Path(folder) / "jobs.csv"
        write_jobs_csv(result.jobs, path)
        rows, count = _read_allocations(path)
    return PolicyRun(
        scenario.key, policy, gpus, summary, _peak_over(rows, result.capacity), count, wall,
        result if keep_result else None,
    )  # fmt: skip


def _run_task(scenario: Scenario, policy: str, options: Mapping[str, Any]) -> PolicyRun:
    """One run wherever a runner puts it (a module-level function, so that it pickles);
    ``options`` are :func:`run_policy`'s keywords."""
    return run_policy(scenario, policy, **options)


def _task_key(scenario: Scenario, policy: str) -> str:
    return f"{scenario.key}/{policy}"


def policy_tasks(
    tasks: Sequence[tuple[Scenario, str]],
    *,
    restart_s: float = DEFAULT_RESTART_S,
    keep_results: bool = False,
    min_runtime_s: float = 0.0,
    objective: Objective = DEFAULT_OBJECTIVE,
    restart_growth: float | None = None,
    pollux_retune: bool = True,
    remaining_exponent: float | None = None,
    early_share: float | None = None,
) -> list[Task]:
    """Each ``(scenario, policy)`` as a :class:`~bellows.sim.running.Task` whose value is
    its :class:`PolicyRun` (keyed ``scenario/policy``). Replays of real traces are the
    longest runs: they are marked so, so that a parallel runner starts them first."""
    options = {
        "restart_s": restart_s, "keep_result": keep_results, "min_runtime_s": min_runtime_s,
        "objective": objective, "restart_growth": restart_growth, "pollux_retune": pollux_retune,
        "remaining_exponent": remaining_exponent, "early_share": early_share,
    }  # fmt: skip
    return [
        Task(
            _task_key(s, p), _run_task, (s, p, options),
            cost=1.0 if s.source is Source.GENERATED else 2.0,
        )
        for s, p in tasks
    ]  # fmt: skip


def run_many(
    tasks: Sequence[tuple[Scenario, str]],
    *,
    workers: int = 1,
    runner: Runner | None = None,
    restart_s: float = DEFAULT_RESTART_S,
    keep_results: bool = False,
    on_done: Callable[[PolicyRun], None] = lambda _: None,
    min_runtime_s: float = 0.0,
    objective: Objective = DEFAULT_OBJECTIVE,
    restart_growth: float | None = None,
    pollux_retune: bool = True,
    remaining_exponent: float | None = None,
    early_share: float | None = None,
) -> list[PolicyRun]:
    """Run every ``(scenario, policy)`` on ``runner`` (default: ``workers`` local processes,
    or this one when ``workers`` is 1; see :mod:`bellows.sim.running`), ``on_done`` called
    as each finishes; results come back in the order of ``tasks``. A run that fails twice
    raises :class:`~bellows.sim.running.TaskFailedError` once the others have finished."""

    def done(finished: Finished) -> None:
        if finished.ok:
            on_done(finished.value)

    work = policy_tasks(
        tasks, restart_s=restart_s, keep_results=keep_results, min_runtime_s=min_runtime_s,
        objective=objective, restart_growth=restart_growth, pollux_retune=pollux_retune,
        remaining_exponent=remaining_exponent, early_share=early_share,
    )  # fmt: skip
    values = collect(runner or make_runner(workers), work, {}, on_done=done)
    return [values[_task_key(s, p)] for s, p in tasks]


# ---------------------------------------------------------------- jobs.csv, as a user reads it
_Alloc = tuple[float, float, int]  # start minute, end minute (inf: open), GPUs


def _read_allocations(path: Path) -> tuple[list[list[_Alloc]], int]:
    """Each row's ``(start, end, GPUs)`` stretches from its ``allocations`` column, and the
    number of rows; an entry holds until the next one, or ``finish_min`` (open if empty)."""
    rows: list[list[_Alloc]] = []
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = {"finish_min", "allocations"} - set(reader.fieldnames or ())
        if missing:
            raise SpecError(f"{path.name}: header", sorted(missing), "the jobs.csv columns")
        for line, row in enumerate(reader, start=2):
            where = f"{path.name}:{line}"
            finish_text = row.get("finish_min") or ""
            finish = (
                math.inf if not finish_text.strip() else
                parse_float(f"{where}.finish_min", finish_text, minimum=0.0)
            )  # fmt: skip
            rows.append(_stretches(row.get("allocations") or "", finish, where))
    return rows, len(rows)


def _stretches(text: str, finish: float, where: str) -> list[_Alloc]:
    entries: list[tuple[float, int]] = []
    field = f"{where}.allocations"
    for entry in filter(None, text.split(";")):
        minute, sep, rest = entry.partition(":")
        gpus, at, batch = rest.partition("@")
        try:
            if not (sep and at):
                raise SpecError(field, entry, "")
            start = parse_float(field, minute, minimum=0.0)
            count = parse_int(field, gpus, maximum=MAX_GPUS)
            parse_int(field, batch)
        except SpecError:
            raise SpecError(
                field, entry, f"';'-separated minute:gpus@batch entries (minute >= 0, at most "
                f"{MAX_GPUS} GPUs)"
            ) from None  # fmt: skip
        if entries and start < entries[-1][0]:
            raise SpecError(f"{where}.allocations", entry, "entries in time order")
        entries.append((start, count))
    if not entries:
        return []
    ends = [e[0] for e in entries[1:]] + [finish]
    if finish < entries[-1][0]:
        raise SpecError(f"{where}.finish_min", finish, "a finish after the last allocation")
    return [(s, end, g) for (s, g), end in zip(entries, ends, strict=True) if g > 0 and end > s]


def _peak_over(rows: Iterable[list[_Alloc]], capacity: Sequence[tuple[float, int]]) -> int:
    """Most GPUs held beyond the capacity at any instant (0: never over-committed).

    At one instant, releases come first, then capacity changes, then acquisitions: a job
    that starts when another ends does not overlap it. ``capacity`` is ``(second, GPUs)``.
    """
    events: list[tuple[float, int, int]] = []  # (minute, order, change)
    for stretches in rows:
        for start, end, gpus in stretches:
            events.append((start, 2, gpus))
            if math.isfinite(end):
                events.append((end, 0, -gpus))
    for second, gpus in capacity:
        events.append((round(second / 60.0, 4), 1, gpus))
    held = 0
    cap = 0
    peak = 0
    events.sort(key=lambda e: (e[0], e[1]))
    for i, (minute, order, value) in enumerate(events):
        if order == 1:
            cap = value
        else:
            held += value
        last_at_instant = i + 1 == len(events) or events[i + 1][0] != minute
        if last_at_instant:
            peak = max(peak, held - cap)
    return peak


def jobs_csv_over_commit(path: Path, capacity: Sequence[tuple[float, int]] | int) -> int:
    """Most GPUs the jobs in ``path`` (a ``jobs.csv``) hold beyond the cluster at any
    instant: 0 means never over-committed. ``capacity`` is the cluster's GPUs, or its
    ``(second, GPUs)`` changes (a run's ``SimResult.capacity``).

    Raises :class:`SpecError` naming the line and column of a cell it cannot read.
    """
    changes = [(0.0, capacity)] if isinstance(capacity, int) else list(capacity)
    rows, _ = _read_allocations(path)
    return _peak_over(rows, changes)


# ---------------------------------------------------------------- tables and targets
@dataclass(frozen=True)
class Column:
    """One column of the side-by-side tables: a ``summary.json`` key and how to show it."""

    key: str
    header: str
    digits: int
    percent: bool = False

    def cell(self, run_summary: Mapping[str, Any]) -> str:
        value = run_summary.get(self.key)
        if value is None:
            return "n/a"
        if self.percent:
            return f"{value * 100:.{self.digits}f} %"
        return f"{value:.{self.digits}f}" if isinstance(value, float) else str(value)


COLUMNS: tuple[Column, ...] = (
    Column("avg_jct_min", "avg JCT (min)", 1),
    Column("p99_jct_min", "p99 JCT (min)", 1),
    Column("avg_queue_min", "avg wait (min)", 1),
    Column("idle_while_waiting_share", "idle beside waiting", 1, percent=True),
    Column("utilization", "utilization", 1, percent=True),
    Column("rescales_per_job", "rescales/job", 2),
    Column("pure_swaps", "pure swaps", 0),
    Column("jobs_dropped", "dropped", 0),
    Column("unfinished", "unfinished", 0),
    Column("over_commit", "over-commit (jobs.csv)", 0),
    Column("makespan_min", "makespan (min)", 0),
)


def row(run_: PolicyRun) -> dict[str, Any]:
    """A run's summary with the ``jobs.csv`` check and the jobs that neither finished nor
    were dropped (still waiting when the run ran out of events) beside it."""
    s = run_.summary
    left = s["jobs_total"] - s["jobs_completed_total"] - s["jobs_dropped"]
    return {**s, "over_commit": run_.over_commit, "unfinished": left}


def median_row(runs: Sequence[PolicyRun]) -> dict[str, Any]:
    """The median over runs (seeds) of every numeric column."""
    out: dict[str, Any] = {}
    for column in COLUMNS:
        values = [row(r).get(column.key) for r in runs]
        known = [v for v in values if isinstance(v, int | float)]
        out[column.key] = statistics.median(known) if len(known) == len(values) else None
    return out


@dataclass(frozen=True)
class Target:
    """One target of issue 10, measured: ``value`` over the seeds, and whether it was met."""

    name: str
    value: str
    limit: str
    met: bool


def _ratio(num: Any, den: Any) -> float:
    if not isinstance(num, int | float) or not isinstance(den, int | float) or den <= 0:
        return math.inf
    return float(num) / float(den)


def check_targets(
    seeds: Mapping[int, Mapping[str, PolicyRun]], others: Sequence[PolicyRun] = ()
) -> list[Target]:
    """Issue 10's targets on the bursty runs ``seeds`` (seed -> policy -> run).

    Ratios, idle share, rescales and p99 are judged on the median over seeds (the worst seed
    is shown beside it); drops, over-commit and pure swaps on every run, ``others`` (the
    real traces) included.
    """
    per_seed = list(seeds.values())

    def values(key: str, over: str | None = None) -> list[float]:
        """Bellows' ``key`` in each seed, or its ratio to policy ``over``'s."""
        out = []
        for runs in per_seed:
            mine = runs["bellows"].summary.get(key)
            theirs = None if over is None else runs[over].summary.get(key)
            out.append(_ratio(mine, theirs) if over else float(mine or 0.0))
        return out

    def gauge(name: str, measured: list[float], limit: float, fmt: str, text: str) -> Target:
        median = statistics.median(measured)
        shown = f"median {fmt.format(median)}, worst {fmt.format(max(measured))}"
        return Target(name, shown, text, median <= limit)

    out = [
        gauge("avg JCT, Bellows / paper mode", values("avg_jct_min", "paper"), 0.33,
              "{:.3f}", "<= 0.33"),
        gauge("avg JCT, Bellows / event-driven baseline", values("avg_jct_min", "baseline"),
              0.6, "{:.3f}", "<= 0.6"),
        gauge("GPU-time idle beside waiting jobs (Bellows)", values("idle_while_waiting_share"),
              0.02, "{:.2%}", "<= 2 % of capacity x time"),
        gauge("rescales per job (Bellows)", values("rescales_per_job"), 0.5, "{:.3f}", "<= 0.5"),
        gauge("p99 JCT, Bellows / paper mode", values("p99_jct_min", "paper"), 1.0, "{:.3f}",
              "<= 1 (not worse than paper mode)"),
    ]  # fmt: skip
    every = [run_ for r in per_seed for run_ in r.values()] + list(others)
    for name, key in (
        ("pure swaps", "pure_swaps"),
        ("jobs dropped", "jobs_dropped"),
        ("jobs unfinished (neither finished nor dropped)", "unfinished"),
    ):
        worst = max(int(row(r)[key]) for r in every)
        out.append(Target(f"{name}, every run", f"most {worst}", "0", worst == 0))
    worst_over = max(r.over_commit for r in every)
    short = [r for r in every if r.csv_rows != r.summary["jobs_total"]]
    out.append(
        Target(
            "GPUs over-committed at any instant (rebuilt from jobs.csv), every run",
            f"most {worst_over} GPUs" + (f"; {len(short)} files miss jobs" if short else ""),
            "0",
            worst_over == 0 and not short,
        )
    )
    return out


def detailed(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """The scenarios *Beyond the paper* shows in full (a table and two figures each): every
    generated trace and ITP replay, and the first Pollux workload."""
    pollux = [s for s in scenarios if s.source is Source.POLLUX]
    return [s for s in scenarios if s.source is not Source.POLLUX] + pollux[:1]
