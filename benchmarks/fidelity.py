"""Our simulator against the Pollux artifact's published results (issue 36).

    python benchmarks/fidelity.py [--workloads 1 6 ...] [--policies tiresias pollux bellows]
                                  [--workers 2] [--data DIR] [--restart-s 30] [--alone]
                                  [--physics ours|work|start|pollux|pollux-measured|alone]
                                  [--objective X] [--node-pricing] [--learn] [--slack-share S]
                                  [--restart-growth G] [--measured-rows]
                                  [--remaining-exponent P] [--delta-s D] [--early-share E]
                                  [--learn-placements] [--no-placements]

**The table.** For every Pollux workload (``../shared/data/pollux/workloads/``, 160 jobs on
64 T4 GPUs on 16 nodes of 4) and policy: the Tiresias reference (``--policy tiresias``,
:mod:`bellows.sim.tiresias`), the Pollux reference (``--policy pollux``) and Bellows mode
beside them, each run as the artifact ran its simulator: statistical efficiency charged, jobs
placed on nodes, 60 s rounds for the references, a restart charged ``--restart-s`` (30 s,
the artifact's). It prints the published average JCT (``results/<policy>-load-1.0.json``;
Bellows mode is set beside the published Pollux), ours, their ratio and the Spearman rank
correlation of the per-job JCTs with the published ones, then the mean over workloads.
Issue 36's targets for the references: within 10 % of the published average on every
workload, within 5 % on the mean, Spearman >= 0.9. Exit status 1 when one is missed.
Below the table, Bellows mode's targets (median workload <= 0.90x the published Pollux,
every one <= 1.0x) and whether its restarts per job stay at or below the Pollux reference's:
printed, not part of the exit status. ``--objective``, ``--node-pricing``, ``--learn``,
``--slack-share``, ``--restart-growth``, ``--remaining-exponent``, ``--delta-s`` and
``--early-share`` set Bellows mode's rules (:class:`Variant`), as issue 36 item 3 re-decides
them on the calibrated simulator (``--physics pollux-measured``; docs/autoscaler.md);
``--measured-rows`` has the core decide with the measured step times the physics charges
(``run(decide_measured=True)``), as the Pollux reference does; ``--learn-placements`` has it
learn them from the jobs' progress reports instead (``run(learn_placements=True)``).
On physics that charges the measured step times, each Bellows-mode job's profile carries its
model's measured placements (``import_pollux(placements=...)``), which the core decides by
as the live controller does (:mod:`bellows.scaling.placement_steps`); ``--no-placements``
gives the profiles of one-GPU times only, which the JSA decides from.

``--physics pollux`` runs the simulator with the artifact's physics where ours differs and
the difference is a setting: the first start costs the restart too, as in the artifact
(``run(charge_start=True)``, ``simulate --charge-start``), and each job's work is the
artifact's, in the units of its validation curves (``import_pollux(work="validation")``,
``bellows workload import pollux --work validation``). ``--physics work`` and ``start`` take
one of the two alone, to measure what each is worth. ``--physics alone`` (Tiresias only) is
a diagnostic, not physics: the artifact's physics, and each rigid job's work scaled so that
its time alone on the cluster is the artifact's (``--alone``): what is left is then the
policy and the cluster's dynamics, not one job's speed.

**``--alone``** prints, for each model at each (GPUs, batch) the workloads ask for, one job
alone on the cluster under both physics: the work to completion (reference samples), the step
time (the measured ``placements.csv`` interpolated as the artifact does, against our JSA fit
at the placement our simulator gives), the statistical efficiency over the run, the batch the
job runs at and its JCT, computed here from the measured traces the way the artifact's
simulator describes a job (``simulator/applications.py`` and ``simulator.py``: progress in the
units of the validation curves, the gradient statistics of each epoch interpolated in the
batch, a 30 s restart at every allocation), against our simulator's run of the same job.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from bellows.autoscaler import AutoscalerConfig, Objective, objectives
from bellows.cli.data import data_folder, no_data_folder
from bellows.scaling import MODEL_EFFICIENCY, default_cluster, step_time
from bellows.sim import run
from bellows.sim.comparing import POLLUX_GPUS, policies
from bellows.sim.learning import Learning
from bellows.sim.measured import MeasuredEfficiency, measured_efficiency
from bellows.sim.measured_steps import MeasuredPlacements, MeasuredSteps
from bellows.sim.pollux import POLLUX_INTERVAL_S
from bellows.sim.workloads.importing import POLLUX_EPOCHS, import_pollux
from bellows.sim.workloads.traces import TraceJob, fit_trace

POLICIES = ("tiresias", "pollux", "bellows")
PHYSICS = (
    "ours", "work", "start", "batches", "efficiency", "steps", "work-start", "pollux",
    "pollux-measured", "alone",
)  # fmt: skip
STARTS = ("pollux", "pollux-measured", "start", "work-start", "alone")  # first starts pay
PUBLISHED = {"tiresias": "tiresias", "pollux": "pollux", "bellows": "pollux"}
ARTIFACT_RESTART_S = 30.0  # the artifact's simulator.py: rescale_time = 30 at every allocation
TOLERANCE, MEAN_TOLERANCE, MIN_SPEARMAN = 0.10, 0.05, 0.9


@dataclass(frozen=True)
class Variant:
    """Bellows mode's settings for a run (issue 36 item 3 re-decides them): the round
    objective (``None``: the default), the core told the nodes (``--node-pricing``), learning
    from progress reports of the truth's step times (``--learn``) and, for ``slack``, the
    share of the cluster from which it is the sum of speedups (``--slack-share``)."""

    objective: Objective | None = None
    node_pricing: bool = False
    learn: bool = False
    slack_share: float | None = None
    restart_growth: float | None = None
    measured_rows: bool = False
    remaining_exponent: float | None = None
    delta_s: float | None = None
    early_share: float | None = None
    learn_placements: bool = False
    placements: bool = True

    def config(self, restart_s: float) -> AutoscalerConfig:
        config = policies(restart_s, restart_growth=self.restart_growth)["bellows"]
        if self.objective is not None:
            config = replace(config, objective=self.objective)
        if self.delta_s is not None:
            config = replace(config, delta_s=self.delta_s)
        if self.remaining_exponent is not None:
            config = replace(config, remaining_exponent=self.remaining_exponent)
        if self.early_share is not None:
            config = replace(config, early_share=self.early_share)
        return replace(config, node_counts=self.node_pricing)


@dataclass(frozen=True)
class Row:
    workload: str
    policy: str
    published_s: float
    ours_s: float
    spearman: float
    completed: int
    restarts_per_job: float
    wall_s: float

    @property
    def ratio(self) -> float:
        return self.ours_s / self.published_s


def published(data: Path, policy: str) -> dict[str, dict[str, float]]:
    """``{workload: {job: JCT s}}`` of the artifact's results for ``policy``."""
    path = data / "pollux" / "results" / f"{PUBLISHED[policy]}-load-1.0.json"
    jcts: dict[str, dict[str, float]] = json.loads(path.read_text())["jcts"]
    return jcts


def trace_of(
    data: Path, workload: str, physics: str, *, placements: bool = False
) -> tuple[TraceJob, ...]:
    """The workload as ``simulate`` fits it to the 64-GPU cluster (``physics="pollux"``: each
    job's work in the artifact's validation-curve units, ``import_pollux(work="validation")``;
    ``"alone"``: that, and each job's work then scaled by :func:`alone_factor`).
    ``placements``: on physics that charges the measured step times, each job's profile
    carries its model's measured placements (``import_pollux(placements=...)``), as an owner
    who measured them would write them in its profile document."""
    path = data / "pollux" / "workloads" / f"{workload}.csv"
    measured = profiles_of(data) if placements and steps_of(data, physics) else None
    jobs = import_pollux(path, **import_options(physics), placements=measured)
    trace = fit_trace(jobs, POLLUX_GPUS)[0]
    if physics != "alone":
        return trace
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    factors: dict[tuple[str, int, int], float] = {}
    out = []
    for row, job in zip(rows, trace, strict=True):
        key = (job.model, int(row["num_replicas"]), int(row["batch_size"]))
        if key not in factors:
            factors[key] = alone_factor(data, job, *key[1:])
        out.append(TraceJob(job.arrival_s, replace(job.spec, work=job.spec.work * factors[key]),
                            job.model))  # fmt: skip
    return tuple(out)


def steps_of(data: Path, physics: str) -> MeasuredSteps | None:
    """The artifact's measured step times as the truth (``pollux``, ``steps``), else none."""
    return MeasuredSteps(profiles_of(data)) if physics in ("pollux-measured", "steps") else None


def truth_of(data: Path, physics: str) -> dict[str, MeasuredEfficiency] | None:
    """The artifact's measured efficiency as the truth (``pollux``, ``efficiency``), else none."""
    if physics not in ("pollux", "pollux-measured", "efficiency"):
        return None
    return measured_efficiency(data / "pollux" / "profiles", POLLUX_EPOCHS)


def import_options(physics: str) -> dict[str, str]:
    """``import_pollux``'s keywords for ``physics`` (module docstring)."""
    work = (
        "validation"
        if physics in ("pollux", "pollux-measured", "work", "work-start", "efficiency", "alone")
        else "epochs"
    )  # fmt: skip
    accumulate = physics in ("pollux", "pollux-measured", "batches")
    return {"work": work, "batches": "accumulate" if accumulate else "measured"}


def alone_factor(data: Path, job: TraceJob, gpus: int, batch: int) -> float:
    """A diagnostic, not physics: the factor on a rigid job's work that makes its time alone
    (less the 30 s start) what the artifact's physics gives (:func:`artifact_alone`)."""
    theirs = artifact_alone(data, job.model, gpus, batch, _max_local(job.model, job))
    ours = ours_alone(job, "work-start", data)  # the physics --physics alone runs with
    return (theirs.jct_s - ARTIFACT_RESTART_S) / (ours.jct_s - ARTIFACT_RESTART_S)


def run_one(
    data: Path, workload: str, policy: str, restart_s: float, physics: str, *,
    variant: Variant = Variant(),
) -> Row:  # fmt: skip
    """One policy on one workload (module docstring's settings); ``variant``: Bellows mode's."""
    carried = policy == "bellows" and variant.placements and not variant.measured_rows
    trace = trace_of(data, workload, physics, placements=carried)
    learning = None
    if policy == "bellows":
        config = variant.config(restart_s)
        if variant.slack_share is not None:  # a module constant: this process's runs only
            objectives.SLACK_SHARE = variant.slack_share
        if variant.learn or variant.learn_placements:
            learning = Learning({}, report_s=POLLUX_INTERVAL_S, learn=variant.learn)
    else:
        config = AutoscalerConfig(restart_s=restart_s, delta_s=POLLUX_INTERVAL_S)
    started = time.perf_counter()
    result = run(
        trace, gpus=POLLUX_GPUS, config=config, cluster=default_cluster(),
        efficiency=MODEL_EFFICIENCY, nodes=True, pollux=policy == "pollux",
        tiresias=policy == "tiresias", charge_start=physics in STARTS,
        efficiency_truth=truth_of(data, physics), step_seconds=steps_of(data, physics),
        learning=learning, decide_measured=policy == "bellows" and variant.measured_rows,
        learn_placements=policy == "bellows" and variant.learn_placements,
    )  # fmt: skip
    wall = time.perf_counter() - started
    ours = {j.name: j.finish_s - j.arrival_s for j in result.jobs if j.finish_s is not None}
    pub = published(data, policy)[workload]
    names = [n for n in pub if n in ours]
    rho = float(spearmanr([pub[n] for n in names], [ours[n] for n in names])[0])
    restarts = sum(j.rescales + j.preemptions for j in result.jobs) / max(len(result.jobs), 1)
    return Row(
        workload, policy, statistics.fmean(pub.values()),
        statistics.fmean(ours.values()) if ours else math.inf, rho, len(ours),
        float(restarts), wall,
    )  # fmt: skip


def _task(args: tuple[Path, str, str, float, str, Variant]) -> Row:
    return run_one(*args[:5], variant=args[5])


def bellows_lines(rows: Sequence[Row]) -> list[str]:
    """Issue 36's targets for Bellows mode, beside the rows: avg JCT <= 0.90x the published
    Pollux on the median workload and <= 1.0x on every one, and restarts per job at or below
    the Pollux reference's on every workload (where both ran)."""
    mine = {r.workload: r for r in rows if r.policy == "bellows"}
    if not mine:
        return []
    ratios = [r.ratio for r in mine.values()]
    median, worst = statistics.median(ratios), max(ratios)
    lines = [
        f"bellows mode / published pollux: median {median:.3f} (target <= 0.90), worst "
        f"{worst:.3f} (target <= 1.0): " + ("met" if median <= 0.9 and worst <= 1.0 else "missed")
    ]
    ref = {r.workload: r for r in rows if r.policy == "pollux"}
    both = [w for w in mine if w in ref]
    if both:
        above = [w for w in both if mine[w].restarts_per_job > ref[w].restarts_per_job]
        lines.append(
            "restarts per job at or below the pollux reference's: "
            + (f"on every workload ({len(both)})" if not above else f"not on {', '.join(above)}")
        )
    return lines


def table(rows: Sequence[Row]) -> tuple[list[str], bool]:
    """The printed lines and whether the references met issue 36's targets."""
    lines = [
        "| workload | policy | published avg JCT (s) | ours (s) | ours / published "
        "| Spearman per job | restarts/job | wall (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    ok = True
    for r in rows:
        ref = r.policy != "bellows"
        miss = ref and (abs(r.ratio - 1) > TOLERANCE or r.spearman < MIN_SPEARMAN)
        ok &= not miss
        label = r.policy if ref else "bellows (vs published pollux)"
        lines.append(
            f"| {r.workload} | {label} | {r.published_s:,.0f} | {r.ours_s:,.0f} | "
            f"{r.ratio:.3f}{' *' if miss else ''} | {r.spearman:.3f} | "
            f"{r.restarts_per_job:.2f} | {r.wall_s:.1f} |".replace(",", " ")
        )
    for policy in dict.fromkeys(r.policy for r in rows):
        mine = [r for r in rows if r.policy == policy]
        pub = statistics.fmean(r.published_s for r in mine)
        ours = statistics.fmean(r.ours_s for r in mine)
        miss = policy != "bellows" and len(mine) > 1 and abs(ours / pub - 1) > MEAN_TOLERANCE
        ok &= not miss
        lines.append(
            f"| mean of {len(mine)} | {policy} | {pub:,.0f} | {ours:,.0f} | "
            f"{ours / pub:.3f}{' *' if miss else ''} | "
            f"{statistics.median(r.spearman for r in mine):.3f} (median) | | |".replace(",", " ")
        )
    return lines, ok


# ------------------------------------------------------------------ the artifact's physics
# What follows computes one job alone the way the Pollux artifact's simulator describes a
# job (read, not copied): our own code over the same measured traces.


@dataclass(frozen=True)
class Validation:
    """A model's validation runs: per batch, per epoch row, progress and gradient stats."""

    batches: tuple[int, ...]
    progress: np.ndarray  # (batches, epochs)
    grad_sqr: np.ndarray
    grad_var: np.ndarray


def validation(data: Path, model: str) -> Validation:
    runs: dict[int, list[dict[str, str]]] = {}
    for path in (data / "pollux" / "profiles" / model).glob("validation-*.csv"):
        with path.open() as handle:
            runs[int(path.stem.split("-")[1])] = list(csv.DictReader(handle))
    batches = tuple(sorted(runs))
    size = min(len(r) for r in runs.values())

    def column(name: str) -> np.ndarray:
        return np.array([[float(row[name]) for row in runs[b][:size]] for b in batches])

    return Validation(batches, column("progress"), column("grad_sqr"), column("grad_var"))


def max_epochs(model: str) -> int:
    return POLLUX_EPOCHS[model]


def artifact_work(data: Path, model: str) -> float:
    """Reference samples to completion in the artifact's units: the progress of the last
    epoch (the least over the validation runs) times the smallest batch."""
    v = validation(data, model)
    epochs = max_epochs(model)
    return float(v.progress[:, epochs - 1].min() * v.batches[0])


def _grad_stats(v: Validation, batch: float, epoch: int) -> tuple[float, float]:
    """Gradient statistics at ``batch`` in ``epoch``, linear between the measured batches."""
    b = np.array(v.batches, dtype=float)
    sqr = float(np.interp(batch, b, v.grad_sqr[:, epoch]))
    var = float(np.interp(batch, b, v.grad_var[:, epoch]))
    return sqr, var


def profiles_of(data: Path) -> Path:
    """The folder of the measured models (``pollux/profiles``) in the data folder."""
    return data / "pollux" / "profiles"


def artifact_placement(gpus: int, per_node: int = 4) -> tuple[int, ...]:
    """Where the artifact's Tiresias puts a job on an empty cluster: the most free first."""
    parts: list[int] = []
    while sum(parts) < gpus:
        parts.append(min(per_node, gpus - sum(parts)))
    return tuple(parts)


@dataclass(frozen=True)
class Alone:
    work: float  # reference samples
    step_s: float  # one step at the batch it runs (accumulation included)
    batch: int
    measured_s: float  # measured at the same placement and batch (passes of the local limit)
    efficiency: float  # reference samples per sample, over the whole run
    jct_s: float


def artifact_alone(data: Path, model: str, gpus: int, batch: int, max_local: int) -> Alone:
    """One rigid job alone under the artifact's physics (module docstring)."""
    v = validation(data, model)
    init = v.batches[0]
    local = math.ceil(batch / gpus - 1e-8)
    accum = math.ceil(local / max_local - 1e-8) - 1
    if gpus == 1 and batch > init:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = min(atomic, int(v.batches[-1] / (gpus * (accum + 1))))
    total = gpus * atomic * (accum + 1)
    measured = MeasuredPlacements(profiles_of(data) / model)
    step, sync = measured.step(artifact_placement(gpus), atomic)
    step += (step - sync) * accum
    epochs = max_epochs(model)
    bounds = np.concatenate([[0.0], v.progress.min(axis=0)[:epochs]])
    seconds = samples = 0.0
    for epoch in range(epochs):
        sqr, var = _grad_stats(v, total, epoch)
        scale = total / init
        gain = (var + sqr) / (var / scale + sqr)
        steps = (bounds[epoch + 1] - bounds[epoch]) / gain
        seconds += steps * step
        samples += steps * total
    work = float(bounds[epochs] * init)
    return Alone(work, step, total, step, work / samples, seconds + ARTIFACT_RESTART_S)


def ours_alone(job: TraceJob, physics: str, data: Path) -> Alone:
    """The same job alone in our simulator (the Tiresias reference: rigid, on nodes)."""
    spec = job.spec
    truth = truth_of(data, physics)
    lone = TraceJob(0.0, spec, job.model)
    result = run(
        [lone], gpus=POLLUX_GPUS, config=AutoscalerConfig(restart_s=ARTIFACT_RESTART_S,
                                                          delta_s=POLLUX_INTERVAL_S),
        cluster=default_cluster(), efficiency=MODEL_EFFICIENCY, nodes=True, tiresias=True,
        charge_start=True, efficiency_truth=truth, step_seconds=steps_of(data, physics),
    )  # fmt: skip
    record = result.jobs[0]
    assert record.finish_s is not None
    nodes = math.ceil(spec.gpus / 4)
    step = float(step_time(spec, spec.gpus, spec.batch_size, default_cluster(), nodes=nodes))
    profile = MODEL_EFFICIENCY[job.model] if truth is None else truth[job.model]
    samples = float(profile.samples_between(spec.batch_size, 0.0, spec.work))
    local = spec.batch_size / spec.gpus
    limit = _max_local(job.model, job)
    passes = math.ceil(local / limit - 1e-8)
    placements = MeasuredPlacements(profiles_of(data) / job.model)
    step_one, sync = placements.step(artifact_placement(spec.gpus), local / passes)
    measured = step_one + (passes - 1) * (step_one - sync)
    return Alone(spec.work, step, spec.batch_size, measured, spec.work / samples, record.finish_s)


def alone_table(data: Path, physics: str) -> list[str]:
    """One line per model and (GPUs, batch) asked for by the workloads."""
    configs: dict[tuple[str, int, int], TraceJob] = {}
    for path in sorted((data / "pollux" / "workloads").glob("workload-*.csv")):
        with path.open() as handle:
            rows = list(csv.DictReader(handle))
        trace = fit_trace(import_pollux(path, **import_options(physics)), POLLUX_GPUS)[0]
        for row, job in zip(rows, trace, strict=True):
            key = (job.model, int(row["num_replicas"]), int(row["batch_size"]))
            configs.setdefault(key, job)
    lines = [
        "| model | GPUs | trace batch | work theirs / ours (M ref. samples) "
        "| step theirs / ours (s) | ours: measured / JSA fit (s) | batch theirs / ours "
        "| E theirs / ours | JCT alone theirs / ours (s) | ours / theirs |",
        "|---|---:|---:|---|---|---|---|---|---|---:|",
    ]
    for (model, gpus, batch), job in sorted(configs.items()):
        theirs = artifact_alone(data, model, gpus, batch, _max_local(model, job))
        ours = ours_alone(job, physics, data)
        lines.append(
            f"| {model} | {gpus} | {batch} | {theirs.work / 1e6:.3g} / {ours.work / 1e6:.3g} | "
            f"{theirs.step_s:.3f} / {ours.step_s:.3f} | "
            f"{ours.measured_s:.3f} / {ours.step_s:.3f} | "
            f"{theirs.batch} / {ours.batch} | "
            f"{theirs.efficiency:.3f} / {ours.efficiency:.3f} | {theirs.jct_s:,.0f} / "
            f"{ours.jct_s:,.0f} | {ours.jct_s / theirs.jct_s:.2f} |".replace(",", " ")
        )
    return lines


def _max_local(model_name: str, job: TraceJob | None) -> int:
    """The artifact's largest per-GPU batch: the measured one, yolov3's held to 8."""
    return MeasuredSteps.local_limit(model_name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", type=int, nargs="+", default=list(range(1, 9)))
    parser.add_argument("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--restart-s", type=float, default=ARTIFACT_RESTART_S)
    parser.add_argument("--physics", choices=PHYSICS, default="ours")
    parser.add_argument("--alone", action="store_true", help="one job alone, both physics")
    parser.add_argument(
        "--objective",
        choices=[o.value for o in Objective],
        default=None,
        help="Bellows mode's round objective (default: the core's default)",
    )
    parser.add_argument(
        "--node-pricing",
        action="store_true",
        help="Bellows mode's core is told the nodes (as --placement nodes)",
    )
    parser.add_argument(
        "--learn",
        action="store_true",
        help="Bellows mode learns from progress reports (60 s) of the truth",
    )
    parser.add_argument(
        "--slack-share",
        type=float,
        default=None,
        help="with --objective slack: the share of the cluster from which it "
        "is the sum of speedups (objectives.SLACK_SHARE; default 0.45)",
    )
    parser.add_argument(
        "--restart-growth",
        type=float,
        default=None,
        help="Bellows mode: each earlier move adds this many restarts to the price of its "
        "next (default: the core's, 0.25)",
    )
    parser.add_argument(
        "--measured-rows",
        action="store_true",
        help="Bellows mode decides with the measured step times too, each count packed on "
        "the fewest nodes (run(decide_measured=True)), as the Pollux reference does; "
        "needs --physics pollux-measured or steps",
    )
    parser.add_argument(
        "--remaining-exponent",
        type=float,
        default=None,
        help="the power of remaining's weights (AutoscalerConfig.remaining_exponent; default 0.3)",
    )
    parser.add_argument(
        "--delta-s",
        type=float,
        default=None,
        help="Bellows mode's seconds between rounds (default: the core's, 120)",
    )
    parser.add_argument(
        "--early-share",
        type=float,
        default=None,
        help="Bellows mode: a round starts early once this share of the running jobs "
        "finished since the last (the paper's hybrid trigger; 0: off; default: the core's, "
        "0.05)",
    )
    parser.add_argument(
        "--learn-placements",
        action="store_true",
        help="Bellows mode learns, from progress reports (60 s), the step time each job "
        "measured on its GPUs, for every job of its class (run(learn_placements=True))",
    )
    parser.add_argument(
        "--no-placements",
        action="store_true",
        help="the jobs' profiles carry their one-GPU step times only, not their measured "
        "placements: Bellows mode decides with the JSA (as before issue 36's placements)",
    )
    args = parser.parse_args(argv)
    if args.learn_placements and args.measured_rows:
        parser.error("--learn-placements learns what --measured-rows is told: one of the two")
    variant = Variant(
        None if args.objective is None else Objective(args.objective), args.node_pricing,
        args.learn, args.slack_share, args.restart_growth, args.measured_rows,
        args.remaining_exponent, args.delta_s, args.early_share, args.learn_placements,
        not args.no_placements,
    )  # fmt: skip
    if args.measured_rows and steps_of(Path("."), args.physics) is None:
        parser.error("--measured-rows: the core decides with the measured step times the "
                     "physics charges: with --physics pollux-measured or steps")  # fmt: skip
    if args.physics == "alone" and set(args.policies) != {"tiresias"}:
        parser.error("--physics alone scales rigid jobs: with --policies tiresias only")
    data = args.data or data_folder()
    if data is None:
        parser.error(no_data_folder())
    if args.alone:
        print("\n".join(alone_table(data, args.physics)))
        return 0
    tasks = [(data, f"workload-{w}", p, args.restart_s, args.physics, variant)
             for w in args.workloads for p in args.policies]  # fmt: skip
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            rows = list(pool.map(_task, tasks))
    else:
        rows = [_task(t) for t in tasks]
    lines, ok = table(rows)
    print(f"physics {args.physics}, efficiency charged, on nodes, restart {args.restart_s:g} s")
    print("\n".join(lines))
    print("\n".join(bellows_lines(rows)))
    print("targets (references): " + ("met" if ok else "missed (*)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
