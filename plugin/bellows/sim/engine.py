"""The discrete-event simulator (DESIGN.md §2): the autoscaler core driven by a trace.

The simulator owns the truth about progress. A running job processes ``X(b, k)`` samples per
second (``bellows.scaling.throughput``), exactly, between events: there is no time step.
Every halt costs the job its restart cost (``JobSpec.restart_s``, else
``config.restart_s``) of progress, whatever the policy: after a rescale, and when a job
halted by a capacity drop starts again, it makes no progress for that long while holding
its GPUs, and its completion event moves. Events are arrivals, completions and changes of
capacity, kept in one heap keyed ``(time, priority, sequence)``; steps run when the core
says one is due (``Autoscaler.next_round_at``), after every event at that same time.
Decisions are applied at the step's time, as the core assumes.

Pure swaps are counted: within one step, a job going from ``a`` to ``b`` GPUs while a job of
the same template goes from ``b`` to ``a`` (two halts that change nothing).

With ``nodes=True`` (opt in, issue 29) jobs sit on nodes (:mod:`bellows.sim.nodes`, GPUs
per node from the cluster profile): a job runs at the step time of the placement it got, as
the JSA computes it for that many nodes, and the time jobs spend spread over more nodes than
they need is reported (``spread_job_time_share``). Within a step, every halt frees its GPUs
before the starts and rescales are placed, largest first. The default, ``nodes=False``,
prices every job on the fewest nodes, as if free GPUs were never fragmented, and keeps every
output as before.

With a learning setup (:class:`bellows.sim.learning.Learning`) a job's truth is its true
profile while the core is told its annotated one, stepping jobs report progress every
``report_s`` (report events, after every other kind at the same time) and the core may learn
online (:class:`bellows.sim.learning.OnlineLearner`). Without one, nothing of that runs.

With ``efficiency`` (a profile per model, :data:`bellows.scaling.MODEL_EFFICIENCY`) the
simulator charges statistical efficiency (issue 29, docs/simulator.md): a job whose trace
model has a profile counts its ``work`` in reference samples, and an interval of ``n``
samples at batch ``b`` advances it by ``EfficiencyProfile.progress_after(b, done, n)``; its
completion is ``samples_between(b, done, work) / X(b, k)`` after it resumes. Jobs of other
models, and every job without ``efficiency``, progress at ``X(b, k)`` as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Engines, Mode
from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start
from bellows.autoscaler.straddle import FreeNodes
from bellows.autoscaler.typed import TypedAutoscaler
from bellows.jobs import JobSpec, SpecError
from bellows.scaling import (
    ClusterProfile,
    EfficiencyProfile,
    single_gpu_throughput,
    step_time,
    throughput,
)
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.online import ProgressReport
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.sim.events import EventHeap, Kind
from bellows.sim.gavel import gavel_config, gavel_jobs
from bellows.sim.learning import Learning, OnlineLearner, Revision, true_spec
from bellows.sim.measured import MeasuredEfficiency
from bellows.sim.measured_steps import TypedMeasuredSteps
from bellows.sim.metrics import JobRecord, Segment, spread_share, summarize, template
from bellows.sim.nodes import Nodes, Placement
from bellows.sim.packed_steps import PackedSteps
from bellows.sim.pollux import PolluxPolicy, Retune
from bellows.sim.pollux.speedups import STEPS, StepSeconds, progress_step
from bellows.sim.tiresias import TiresiasPolicy
from bellows.sim.typed_placement import TypedPlacement
from bellows.sim.workloads.traces import TraceJob

__all__ = [
    "PROGRESS_EVERY",
    "CapacityChange",
    "Progress",
    "RunStats",
    "SimResult",
    "SimulationError",
    "StepSeconds",
    "run",
]

Progress = Callable[[float, int], None]
"""Told, every :data:`PROGRESS_EVERY` steps of a run, the simulated time and the events so far
(a command's progress display; it must not touch the run)."""
PROGRESS_EVERY: Final = 1024
_NO_STEPS: Final = np.zeros(0)


class SimulationError(RuntimeError):
    """The core asked for something the simulated cluster cannot do (a bug, not bad input)."""


@dataclass(frozen=True)
class CapacityChange:
    """At ``at_s`` the cluster has ``gpus`` GPUs (nodes lost or added); on a cluster of
    several GPU types, type ``gpu_type`` has."""

    at_s: float
    gpus: int
    gpu_type: str = ""


@dataclass(frozen=True)
class RunStats:
    """How the run went, for the benchmark line: counts and where the wall time went."""

    events: int
    rounds: int
    decisions: int
    wall_s: float
    core_s: float  # inside Autoscaler.step: the optimizer and the decisions it takes
    arrive_s: float  # the JSA's TSF rows (Autoscaler.tabulate up front, then arrive)
    pure_swaps: int = 0  # pairs of same-template jobs exchanging GPU counts in one step
    reports: int = 0  # progress reports of stepping jobs (with a learning setup)
    revisions: int = 0  # of a job in the core after its fit moved (learning on)

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")


@dataclass(frozen=True)
class SimResult:
    """Everything a run produced: per-job records, the cluster's timelines, the stats."""

    jobs: tuple[JobRecord, ...]
    gpus: int
    horizon_s: float | None
    span_s: float  # arrival window used for the offered load
    gpus_in_use: tuple[tuple[float, int], ...]  # (time, GPUs held) after each change
    capacity: tuple[tuple[float, int], ...]  # (time, cluster GPUs)
    stats: RunStats
    mode: Mode = Mode.BELLOWS
    learning: Learning | None = None
    revisions: tuple[Revision, ...] = ()  # every revision of a job in the core, in order
    off_prior: int = 0  # jobs whose true speed differs from their annotation
    inconsistent: tuple[str, ...] = ()  # jobs whose reports did not hold together
    charged: int | None = None  # jobs charged statistical efficiency; None: charging off
    nodes: bool = False  # jobs were placed on nodes (else priced on the fewest)
    reference: str | None = None  # "pollux", "tiresias", "gavel": it decided, not the core
    gpu_types: tuple[str, ...] = ()  # a cluster of several GPU types (issue 39)
    type_moves: int = 0  # changes of type the typed rounds made

    def summary(self) -> dict[str, Any]:
        """The ``summary.json`` of the run (DESIGN.md §5 keys and more)."""
        out = summarize(
            self.jobs,
            gpus=self.gpus,
            horizon_s=self.horizon_s,
            span_s=self.span_s,
            capacity=self.capacity,
        )
        out["mode"] = self.mode.value if self.reference is None else self.reference
        out["pure_swaps"] = self.stats.pure_swaps
        out["events"] = self.stats.events
        out["rounds"] = self.stats.rounds
        if self.charged is not None:
            out["efficiency_charged_jobs"] = self.charged
        if self.nodes:
            out["spread_job_time_share"] = spread_share(self.jobs)
        if self.gpu_types:
            hours = dict.fromkeys(self.gpu_types, 0.0)
            idle = 0.0
            for job in self.jobs:
                for seg in job.segments:
                    span_h = (seg.end_s - seg.start_s) / 3600.0
                    hours[seg.gpu_type] += (seg.gpus - seg.idle_gpus) * span_h
                    idle += seg.idle_gpus * span_h
            out["gpu_hours_by_type"] = hours  # the GPUs jobs ran on, per type
            if idle:  # a type-blind policy's GPUs held on other types, doing nothing
                out["idle_gpu_hours"] = idle
            out["type_moves"] = self.type_moves
        if self.learning is not None:
            out["learning"] = {
                "learn": self.learning.learn,
                "report_s": self.learning.report_s,
                "jobs_off_prior": self.off_prior,
                "reports": self.stats.reports,
                "revisions": self.stats.revisions,
            }
        return out


@dataclass(eq=False)
class _Live:
    """Mutable progress of one job during a run (never leaves this module).

    ``spec`` is the truth; ``told`` what the core is told (the same spec without a learning
    setup, else the annotated one)."""

    spec: JobSpec
    told: JobSpec
    arrival_s: float
    model: str
    single_gpu_s: float
    gpus: int = 0
    batch: int = 0
    rate: float = 0.0
    done: float = 0.0  # samples processed up to ``since`` (reference samples when charged)
    seen: float = 0.0  # samples processed up to ``since``, as a job counts them (its reports)
    seen_bound: float | None = None  # most_seen, once computed
    since: float = 0.0
    resume_at: float = 0.0  # no progress before this (restart after a rescale)
    version: int = 0  # bumps whenever the completion time moves
    start_s: float | None = None
    finish_s: float | None = None
    rejected: bool = False
    rescales: int = 0
    preemptions: int = 0
    segments: list[Segment] = field(default_factory=list)
    # ``done`` counts reference samples (issue 29); the artifact's measured truth (issue 36)
    charge: EfficiencyProfile | MeasuredEfficiency | None = None
    held: Placement = ()  # (node, GPUs) while placed on nodes
    gpu_type: str = ""  # the GPU type it runs on (a typed cluster)
    idle_gpus: int = 0  # held on other types than ``gpu_type``: the type-blind Pollux's waste
    extra_nodes: int = 0  # nodes held beyond the fewest that hold its GPUs
    # (version, progress step at ``since``, when it reaches each next step): step_at's
    steps_seen: tuple[int, int, npt.NDArray[np.float64]] = (-1, 0, _NO_STEPS)

    def most_seen(self) -> float:
        """The most samples the job may process to finish: its work, or, charged, the samples
        its largest batch needs for it (the controller's bound on a job's reports)."""
        if self.charge is None:
            return self.spec.work
        if self.seen_bound is None:
            need = self.charge.samples_between(self.spec.b_max, 0.0, self.spec.work)
            self.seen_bound = max(self.spec.work, float(need))
        return self.seen_bound

    def seen_at(self, now: float) -> float:
        """Samples processed by ``now``, as the job counts them (not reference samples)."""
        return self.seen + self.rate * max(0.0, now - max(self.since, self.resume_at))

    def done_at(self, now: float) -> float:
        samples = self.rate * max(0.0, now - max(self.since, self.resume_at))
        if self.charge is None or samples <= 0.0:
            return self.done + samples
        gained = float(self.charge.progress_after(self.batch, self.done, samples))
        return min(gained, self.spec.work)

    def step_at(self, now: float) -> int:
        """Which 1/STEPS of its work the job has reached at ``now`` (the Pollux reference's
        rows): from the times it reaches each step, computed once per placement in one
        vectorised call (integrating E(b) for every job each round was most of a run)."""
        version, first, times = self.steps_seen
        if version != self.version:
            first = progress_step(self.done, self.spec.work)
            bounds = self.spec.work * np.arange(first + 1, STEPS, dtype=np.float64) / STEPS
            left = np.maximum(bounds - self.done, 0.0)
            if self.charge is not None and bounds.size:
                left = self.charge.samples_between(self.batch, self.done, bounds)
            start = max(self.since, self.resume_at)
            times = start + left / self.rate if self.rate > 0.0 else np.full(left.size, np.inf)
            self.steps_seen = (self.version, first, times)
        return first + int(np.searchsorted(times, now, side="right"))

    def completion_at(self) -> float:
        left = max(0.0, self.spec.work - self.done)
        if self.charge is not None and left > 0.0:
            left = float(self.charge.samples_between(self.batch, self.done, self.spec.work))
        return self.resume_at + left / self.rate

    def close_segment(self, now: float) -> None:
        if self.gpus:
            self.segments.append(
                Segment(
                    self.since,
                    now,
                    self.gpus,
                    self.batch,
                    self.extra_nodes,
                    self.gpu_type,
                    self.idle_gpus,
                )
            )

    def record(self) -> JobRecord:
        return JobRecord(
            name=self.spec.name,
            category=self.spec.category,
            model=self.model,
            arrival_s=self.arrival_s,
            single_gpu_s=self.single_gpu_s,
            start_s=self.start_s,
            finish_s=self.finish_s,
            rejected=self.rejected,
            segments=tuple(self.segments),
            rescales=self.rescales,
            preemptions=self.preemptions,
        )


class _Run:
    """One simulation: the heap, the jobs' truth and the core, stepped to the end."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        *,
        gpus: int,
        config: AutoscalerConfig,
        cluster: ClusterProfile,
        capacity_changes: Sequence[CapacityChange],
        timer: Callable[[], float],
        learning: Learning | None = None,
        efficiency: Mapping[str, EfficiencyProfile] | None = None,
        nodes: bool = False,
        pollux: bool = False,
        engines: Engines | None = None,
        pollux_retune: bool = True,
        tiresias: bool = False,
        charge_start: bool = False,
        efficiency_truth: Mapping[str, MeasuredEfficiency] | None = None,
        step_seconds: StepSeconds | None = None,
        decide_measured: bool = False,
        learn_placements: bool = False,
        typed: TypedCluster | None = None,
        blind: bool = False,
        type_steps: TypedMeasuredSteps | None = None,
    ) -> None:
        self.config = config
        # a typed cluster's types (the Pollux reference on them: type-blind, over virtual
        # nodes; bellows.sim.blind)
        self.types = None if typed is None else TypedPlacement(
            typed, nodes=nodes, blind=pollux, type_steps=type_steps
        )  # fmt: skip
        virtual = None if self.types is None else self.types.virtual
        self.blind_moves = 0  # changes of type of the type-blind Pollux reference's jobs
        self.learn_placements = learn_placements
        self.step_seconds = step_seconds
        self.charge_start = charge_start
        self.nodes = (
            Nodes(gpus, cluster.gpus_per_node) if nodes and typed is None
            else Nodes(gpus, virtual.size) if virtual is not None
            else None
        )  # fmt: skip
        self.placed: dict[str, Placement] = {}  # running job -> its GPUs per node (on nodes)
        self.spread: set[str] = set()  # the placed jobs on more than one node
        self.cluster = cluster
        self.timer = timer
        self.auto: Autoscaler | PolluxPolicy | TiresiasPolicy | TypedAutoscaler = (
            TypedAutoscaler(config, cluster=typed, engines=engines, blind=blind)
            if typed is not None and virtual is None
            else PolluxPolicy(config, capacity=gpus, retune=pollux_retune,
                              cluster=replace(typed.types[0].cluster,
                                              gpus_per_node=virtual.size))
            if typed is not None and virtual is not None
            else PolluxPolicy(config, capacity=gpus, cluster=cluster, retune=pollux_retune,
                         measured=step_seconds) if pollux
            else TiresiasPolicy(config, capacity=gpus, cluster=cluster) if tiresias
            else Autoscaler(config, capacity=gpus, cluster=cluster, engines=engines,
                            measured=PlacementMemory(cluster) if learn_placements
                            else _packed(step_seconds, trace, cluster, decide_measured))
        )  # fmt: skip
        self.capacity = gpus
        self.heap = EventHeap()
        self.learning = learning
        self.learner = (
            None
            if learning is None or not learning.learn
            else OnlineLearner(cluster, checks=learning.checks)
        )
        truth = [j.spec if learning is None else true_spec(j.spec, learning.factors(j))
                 for j in trace]  # fmt: skip
        self.jobs = [
            _Live(t, j.spec, j.arrival_s, j.model, t.work / single_gpu_throughput(t, cluster))
            for j, t in zip(trace, truth, strict=True)
        ]
        if efficiency:
            for job in self.jobs:
                # a job's own profile (by its name) before its model's
                told = efficiency.get(job.spec.name, efficiency.get(job.model))
                self.auto.charge(job.spec.name, told)  # Bellows mode: goodput rows
                real = None if efficiency_truth is None else efficiency_truth.get(job.model)
                job.charge = told if real is None or told is None else real
        self.charged = sum(job.charge is not None for job in self.jobs)
        self.off_prior = sum(job.spec is not job.told for job in self.jobs)
        self.index = {job.spec.name: i for i, job in enumerate(self.jobs)}
        self.kinds: dict[int, JobSpec] = {}  # template() of each job that rescaled, made once
        if len(self.index) != len(self.jobs):
            raise SpecError("trace", "duplicate names", "unique job names")
        for i in sorted(range(len(trace)), key=lambda i: (trace[i].arrival_s, i)):
            self.heap.push(trace[i].arrival_s, Kind.ARRIVAL, i)
        self.changes = list(capacity_changes)
        for i, change in enumerate(self.changes):
            self.heap.push(change.at_s, Kind.CAPACITY, i)
        self.in_use = 0
        self.gpus_in_use: list[tuple[float, int]] = [(0.0, 0)]
        self.capacity_log: list[tuple[float, int]] = [(0.0, gpus)]
        self.events = self.rounds = self.decisions = self.pure_swaps = 0
        self.reports = self.revisions = 0
        self.core_s = 0.0
        started = timer()
        self.auto.tabulate(j.spec for j in trace)  # every TSF row, in vectorized batches
        self.arrive_s = timer() - started

    def loop(self, progress: Progress | None = None) -> None:
        done = 0
        while True:
            at = self.heap.peek_time()
            due = self.auto.next_round_at()
            if due is not None and (at is None or due < at):
                at = due
                self.round(due)
            elif at is None:
                return
            else:
                self.event()
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(at, self.events)

    def event(self) -> None:
        event = self.heap.pop()
        now = event.time
        if event.kind is Kind.COMPLETION:
            job = self.jobs[event.ref]
            if event.version != job.version or job.finish_s is not None:
                return  # the job was rescaled or halted since: a stale completion
            self.events += 1
            self.complete(job, now)
        elif event.kind is Kind.ARRIVAL:
            self.events += 1
            job = self.jobs[event.ref]
            started = self.timer()
            self.auto.arrive(job.told, now)
            self.arrive_s += self.timer() - started
        elif event.kind is Kind.REPORT:
            self.report(self.jobs[event.ref], event.version, now)
        else:
            self.events += 1
            self.change_capacity(self.changes[event.ref], now)

    def change_capacity(self, change: CapacityChange, now: float) -> None:
        """Nodes lost or added: of the cluster, or of one GPU type of a typed one."""
        if isinstance(self.auto, TypedAutoscaler):
            assert self.types is not None
            self.capacity = self.types.resize(change.gpu_type, change.gpus)
            self.auto.set_capacity(change.gpus, now, change.gpu_type)
        else:
            self.capacity = change.gpus
            if self.nodes is not None:
                self.nodes.resize(self.capacity)
            self.auto.set_capacity(self.capacity, now)
        self.capacity_log.append((now, self.capacity))

    def complete(self, job: _Live, now: float) -> None:
        job.close_segment(now)
        job.done, job.since, job.finish_s = job.spec.work, now, now
        self.release(job, now)
        self.auto.finish(job.spec.name, now)
        if self.learner is not None:
            self.learner.forget(job.spec.name)

    def report(self, job: _Live, version: int, now: float) -> None:
        """A stepping job's progress report: its true step time and samples done."""
        if version != job.version or job.finish_s is not None or not job.gpus:
            return  # rescaled, halted or finished since: the report was never made
        assert self.learning is not None  # only a run with a learning setup pushes reports
        self.reports += 1
        done = job.done_at(now)
        spread = len(job.held) if job.held else None
        seconds = self.truth_seconds(job, job.batch)  # the measured truth on its placement
        if seconds is None:
            seconds = step_time(job.spec, job.gpus, job.batch, self.cluster, nodes=spread)
        # a job reports the samples it processed; the core counts a charged job's progress in
        # reference samples (issue 29), which the controller has from the job's gradient noise
        seen = done if job.charge is None else job.seen_at(now)
        report = ProgressReport(job.gpus, job.batch, seconds, seen)
        lie = self.learning.lies.get(job.spec.name)
        if lie is not None:
            report = lie.report(report, job.spec.work)
            done = report.samples if lie.samples is not None else done
        if self.learner is not None:
            assert isinstance(self.auto, Autoscaler)  # run() refuses learning with pollux
            placed, reference = self.learn_placements, done if job.charge is not None else None
            self.revisions += self.learner.report(
                self.auto, job.told, report, now, placements=placed, reference=reference,
                most=job.most_seen(),
            )  # fmt: skip
        elif self.learn_placements:  # no checks, no refit: each report as it comes
            assert isinstance(self.auto, Autoscaler)
            step = ObservedStep(report.gpus, report.batch, report.step_seconds)
            self.auto.observe_step(job.spec.name, now, step)
        self.schedule_report(job, now + self.learning.report_s)

    def schedule_report(self, job: _Live, at: float) -> None:
        if self.learning is not None and at < job.completion_at():
            self.heap.push(at, Kind.REPORT, self.index[job.spec.name], job.version)

    def unplace(self, job: _Live) -> None:
        self.in_use -= job.gpus
        if self.types is not None and self.types.nodes and job.held:
            self.types.release(job.gpu_type, job.held)
        elif self.nodes is not None:
            self.nodes.release(job.held)
        else:
            return
        job.held, job.extra_nodes = (), 0
        self.placed.pop(job.spec.name, None)
        self.spread.discard(job.spec.name)

    def release(self, job: _Live, now: float) -> None:
        self.unplace(job)
        job.gpus = job.batch = 0
        job.rate = 0.0
        job.version += 1
        self.gpus_in_use.append((now, self.in_use))

    def round(self, now: float) -> None:
        started = self.timer()
        if isinstance(self.auto, PolluxPolicy):
            chosen = self.auto.step(now, lambda name: self.jobs[self.index[name]].step_at(now))
            for tune in (d for d in chosen if isinstance(d, Retune)):
                self.retune(self.jobs[self.index[tune.job]], tune.batch, now)
            decisions = [d for d in chosen if not isinstance(d, Retune)]
        elif isinstance(self.auto, TiresiasPolicy):
            decisions = self.auto.step(now)
        elif isinstance(self.auto, TypedAutoscaler):
            assert self.types is not None
            self.auto.see_nodes(self.types.views(self.placed, self.spread, self.type_of))
            decisions = self.auto.step(now)
        else:
            if self.nodes is not None:  # Bellows mode prices counts that would straddle
                seen = FreeNodes(tuple(self.nodes.free), dict(self.placed), frozenset(self.spread))
                self.auto.see_nodes(seen)
            decisions = self.auto.step(now)
        self.core_s += self.timer() - started
        self.rounds += 1
        again = self.auto.next_round_at()
        if again is not None and again <= now:
            raise SimulationError(f"t={now}: a round ran but the core says one is still due")
        if self.nodes is None and not (self.types is not None and self.types.nodes):
            for decision in decisions:
                self.apply(decision, now)
        else:  # every halt frees its GPUs first, then the largest placements go first
            for decision in decisions:
                if not isinstance(decision, Start | Rescale):
                    self.apply(decision, now)
                elif isinstance(decision, Rescale):
                    self.halt(self.jobs[self.index[decision.job]], now)
            placing = [d for d in decisions if isinstance(d, Start | Rescale)]
            for decision in sorted(placing, key=lambda d: -d.gpus):
                self.apply(decision, now, halted=True)
        self.decisions += len(decisions)
        self.pure_swaps += self.swaps(decisions)
        if self.in_use > self.capacity:
            raise SimulationError(
                f"t={now}: {self.in_use} GPUs allocated on a cluster of {self.capacity}"
            )
        self.gpus_in_use.append((now, self.in_use))

    def swaps(self, decisions: Sequence[Decision]) -> int:
        """Pure swaps among one step's rescales (see the module docstring)."""
        moves: dict[tuple[object, int, int], int] = {}
        count = 0
        for d in decisions:
            if not isinstance(d, Rescale) or d.gpus == d.gpus_from:
                continue
            at = self.index[d.job]
            kind = self.kinds.get(at)
            if kind is None:  # a template validates a whole spec: once per job, not per move
                kind = self.kinds[at] = template(self.jobs[at].told)
            back = (kind, d.gpus, d.gpus_from)
            if moves.get(back, 0) > 0:
                moves[back] -= 1
                count += 1
            else:
                here = (kind, d.gpus_from, d.gpus)
                moves[here] = moves.get(here, 0) + 1
        return count

    def retune(self, job: _Live, batch: int, now: float) -> None:
        """A running job changes its batch in place (the Pollux reference: no restart)."""
        job.seen, job.done = job.seen_at(now), job.done_at(now)
        job.close_segment(now)
        job.batch = batch
        if self.types is not None and self.types.virtual is not None:
            self.run_blind(job, batch)
        else:
            job.rate = self.rate(job, job.gpus, batch)
        job.since, job.resume_at = now, max(job.resume_at, now)  # a pause still running goes on
        job.version += 1
        self.heap.push(job.completion_at(), Kind.COMPLETION, self.index[job.spec.name], job.version)

    def halt(self, job: _Live, now: float) -> None:
        """A rescale's first half: the job stops and gives its GPUs back."""
        job.seen, job.done = job.seen_at(now), job.done_at(now)
        job.close_segment(now)
        self.unplace(job)
        job.rescales += 1

    def apply(self, decision: Decision, now: float, *, halted: bool = False) -> None:
        """Apply one decision (``halted``: a rescale whose :meth:`halt` already ran)."""
        job = self.jobs[self.index[decision.job]]
        if isinstance(decision, Start):
            # a job halted by a capacity drop restarts from its checkpoint: it pays again
            first = job.start_s is None and not self.charge_start
            pause = 0.0 if first else self.restart_s(job)
            job.start_s = now if job.start_s is None else job.start_s
            self.place(job, decision.gpus, decision.batch, now, pause=pause,
                       gpu_type=decision.gpu_type)  # fmt: skip
        elif isinstance(decision, Rescale):
            if not halted:
                self.halt(job, now)
            self.place(job, decision.gpus, decision.batch, now, pause=self.restart_s(job),
                       gpu_type=decision.gpu_type)  # fmt: skip
        elif isinstance(decision, Preempt):
            job.seen, job.done = job.seen_at(now), job.done_at(now)
            job.close_segment(now)
            job.preemptions += 1
            self.release(job, now)
        elif isinstance(decision, Reject):
            job.rejected = True

    def restart_s(self, job: _Live) -> float:
        """The restart a start or rescale of ``job`` costs, as the core has it: asked of
        running and waiting jobs only (the core forgets a job it rejects or that finished)."""
        return self.auto.restart_s(job.spec.name)

    def rate(self, job: _Live, gpus: int, batch: int) -> float:
        """Samples per second of a placed job: the JSA's at the nodes it spans, or the measured
        truth's (``step_seconds``) on its placement, the JSA's where the truth has none (the
        artifact's interpolation gives none outside what was measured, where it never runs a
        job; a core deciding with other step times may)."""
        seconds = self.truth_seconds(job, batch)
        if seconds is not None:
            return batch / seconds
        return throughput(job.spec, gpus, batch, self.cluster, nodes=len(job.held))

    def truth_seconds(self, job: _Live, batch: int) -> float | None:
        """The measured truth's step of ``batch`` on the job's placement (``None``: no truth,
        or none there)."""
        if self.step_seconds is None:
            return None
        seconds = self.step_seconds(job.model, job.spec, job.held, batch)
        return seconds if math.isfinite(seconds) and seconds > 0 else None

    def type_of(self, name: str) -> str:
        """The GPU type running job ``name`` is on (a typed cluster)."""
        return self.jobs[self.index[name]].gpu_type

    def place_typed(self, job: _Live, gpus: int, batch: int, now: float, gpu_type: str) -> None:
        assert self.types is not None
        job.gpu_type = gpu_type
        try:
            placed = self.types.place(job.spec, job.model, gpu_type, gpus=gpus, batch=batch)
        except SpecError as error:
            raise SimulationError(f"t={now}: {job.spec.name} on {gpu_type}: {error}") from None
        job.held, job.extra_nodes, job.rate = placed.held, placed.extra_nodes, placed.rate
        if self.types.nodes:
            self.mark_placed(job)

    def mark_placed(self, job: _Live) -> None:
        """``job`` holds ``job.held`` on nodes: as the straddle views and spread see it."""
        self.placed[job.spec.name] = job.held
        if len(job.held) > 1:
            self.spread.add(job.spec.name)

    def run_blind(self, job: _Live, batch: int) -> None:
        """Type, batch and rate of a type-blind job at ``batch`` on the GPUs it holds: the
        GPUs it holds on other types than the one it runs on do nothing."""
        assert self.types is not None
        try:
            run = self.types.blind(job.spec, job.model, job.held, gpus=job.gpus, batch=batch)
        except SpecError as error:
            raise SimulationError(f"{job.spec.name}: {error}") from None
        job.gpu_type, job.batch, job.idle_gpus = run.gpu_type, run.batch, run.idle_gpus
        job.extra_nodes, job.rate = run.extra_nodes, run.rate

    def place(
        self, job: _Live, gpus: int, batch: int, now: float, *, pause: float, gpu_type: str = ""
    ) -> None:
        job.gpus, job.batch = gpus, batch
        if self.types is not None and self.types.virtual is None:
            self.place_typed(job, gpus, batch, now, gpu_type)
        elif self.nodes is None:
            job.rate = throughput(job.spec, gpus, batch, self.cluster)
        else:
            try:
                if isinstance(self.auto, PolluxPolicy | TiresiasPolicy):  # it places its jobs
                    job.held = self.nodes.take(self.auto.placement(job.spec.name))
                else:
                    job.held = self.nodes.place(gpus)
            except SpecError as error:
                raise SimulationError(f"t={now}: {job.spec.name}: {error}") from None
            self.mark_placed(job)
            if self.types is not None:  # the type-blind Pollux reference's virtual nodes
                before = job.gpu_type
                self.run_blind(job, batch)
                self.blind_moves += bool(before) and before != job.gpu_type
            else:
                job.extra_nodes = len(job.held) - self.nodes.fewest(gpus)
                job.rate = self.rate(job, gpus, batch)
        job.since, job.resume_at = now, now + pause
        job.version += 1
        self.in_use += gpus
        self.heap.push(job.completion_at(), Kind.COMPLETION, self.index[job.spec.name], job.version)
        if self.learning is not None:
            if self.learner is not None:  # a new run: its reports are checked afresh
                seen = job.done_at(now) if job.charge is None else job.seen_at(now)
                self.learner.started(job.spec.name, seen)
            self.schedule_report(job, job.resume_at + self.learning.report_s)


def _packed(
    steps: StepSeconds | None, trace: Sequence[TraceJob], cluster: ClusterProfile, on: bool
) -> PackedSteps | None:
    """The measured truth as the core's step times, by each job's trace model (``on``)."""
    if not on or steps is None:
        return None
    return PackedSteps(steps, {job.spec.name: job.model for job in trace}, cluster.gpus_per_node)


def run(
    trace: Sequence[TraceJob],
    *,
    gpus: int,
    config: AutoscalerConfig,
    cluster: ClusterProfile,
    horizon_s: float | None = None,
    span_s: float | None = None,
    capacity_changes: Sequence[CapacityChange] = (),
    timer: Callable[[], float] = time.perf_counter,
    learning: Learning | None = None,
    progress: Progress | None = None,
    efficiency: Mapping[str, EfficiencyProfile] | None = None,
    nodes: bool = False,
    pollux: bool = False,
    engines: Engines | None = None,
    pollux_retune: bool = True,
    tiresias: bool = False,
    charge_start: bool = False,
    efficiency_truth: Mapping[str, MeasuredEfficiency] | None = None,
    step_seconds: StepSeconds | None = None,
    decide_measured: bool = False,
    learn_placements: bool = False,
    typed: TypedCluster | None = None,
    blind: bool = False,
    gavel: bool = False,
    type_steps: TypedMeasuredSteps | None = None,
) -> SimResult:
    """Simulate ``trace`` on ``gpus`` GPUs under ``config`` until every event is processed.

    ``horizon_s`` is where ``jobs_completed`` is read (the paper reads its curves at the end
    of the arrival window); ``span_s`` is the window the offered load is computed over
    (default: the horizon, else the last arrival). ``timer`` only measures where wall time
    goes; simulated time never reads it. ``learning``: jobs run at their true speed, report
    progress and (``learn=True``) the core learns it online (:mod:`bellows.sim.learning`);
    ``None`` (default) runs every job as annotated, without reports. ``progress`` is told how
    far the run got (:data:`Progress`). ``efficiency``: charge statistical efficiency to the
    jobs whose trace model it maps, or whose name (which wins: a job's own profile, as the
    twin charges each job its model's restated at its batch); ``None`` (default): charging
    off, every output as before issue 29.
    ``nodes``: place jobs on the cluster's nodes and charge each the step time of its
    placement (:mod:`bellows.sim.nodes`); ``False`` (default): every job on the fewest nodes,
    every output as before.
    ``pollux``: the Pollux reference (:mod:`bellows.sim.pollux`) decides instead of the core,
    every ``config.delta_s``, charged ``config``'s restart costs; it places jobs per node
    itself, so it needs ``nodes``, and models neither capacity changes nor learning;
    ``pollux_retune=False``: its batch changes are restarts, as Bellows mode's
    (:class:`~bellows.sim.pollux.PolluxPolicy`'s ``retune``).
    ``tiresias``: the Tiresias reference (:mod:`bellows.sim.tiresias`) decides instead, under
    the same conditions as ``pollux``. ``charge_start``: a job's first start costs its
    restart cost too, as in the Pollux artifact's simulator (default: it costs nothing).
    ``efficiency_truth``: with ``efficiency``, what a charged job of a model it maps really
    makes is that measured efficiency (:mod:`bellows.sim.measured`, the artifact's), while
    the policies decide with ``efficiency``'s profiles (default: those are the truth too).
    ``step_seconds``: on nodes, a job's step time is that measured truth on its placement
    (:data:`StepSeconds`; ``benchmarks/fidelity.py`` gives the artifact's); the Pollux
    reference decides with it too (its goodput rows), the core and Tiresias as before
    (default: the JSA's is the truth). ``decide_measured``: Bellows mode's core decides
    with ``step_seconds`` too, on each count packed on the fewest nodes
    (:class:`~bellows.sim.measured_steps.PackedSteps`), as the Pollux reference does
    (default: with the JSA, as the live controller does). ``learn_placements``: with a
    ``learning`` setup, the core learns from each report the step time the job measured on
    its GPUs, for every job of its class (``Autoscaler.observe_step``,
    :class:`~bellows.scaling.placement_memory.PlacementMemory`), as a live controller can.
    ``engines``: the core's (:class:`~bellows.autoscaler.Engines`; ``None``: the run's own);
    the same outputs whichever.
    ``typed``: a cluster of several GPU types (issue 39; ``gpus`` must be its total): Bellows
    mode decides by :class:`~bellows.autoscaler.typed.TypedAutoscaler` (``blind``: its
    type-blind comparison), each job runs at the JSA of its section on its type, on that
    type's nodes with ``nodes``; the summary adds GPU-hours per type. With ``pollux`` the
    Pollux reference decides instead, type-blind, as Sia's paper compares it: over the
    cluster cut into equal virtual nodes, each job run on the type it holds most GPUs of
    (:mod:`bellows.sim.blind`; the GPUs it holds on other types are the summary's
    ``idle_gpu_hours``). With ``gavel`` a Gavel-like reference decides
    (:mod:`bellows.sim.gavel`: every job rigid, the typed rounds maximising the sum of
    normalised throughputs). ``type_steps``: on a typed cluster, a job's step time is the
    measured truth of its type on its placement (:class:`~bellows.sim.measured_steps.
    TypedMeasuredSteps`; the JSA of its section where it has none). Its capacity changes
    name the type whose GPUs change (``CapacityChange.gpu_type``). It takes no Tiresias
    reference, learning or one-type measured step times.
    """
    if type_steps is not None and (typed is None or not nodes):
        raise SpecError("type_steps", "without typed nodes", "a typed cluster on nodes")
    if gavel:
        if typed is None or pollux or tiresias or blind:
            raise SpecError("gavel", True, "a cluster of several GPU types (typed=...), and "
                            "no other reference nor blind")  # fmt: skip
        trace, config = gavel_jobs(trace, typed), gavel_config(config)
    if typed is None and any(change.gpu_type for change in capacity_changes):
        raise SpecError("capacity_changes", "with a gpu_type", "a cluster of several GPU types")
    if typed is not None:
        _check_typed(typed, gpus, config, pollux=pollux, tiresias=tiresias, learning=learning,
                     step_seconds=step_seconds, changes=capacity_changes)  # fmt: skip
    if pollux and tiresias:
        raise SpecError("tiresias", True, "one reference policy: pollux or tiresias")
    if step_seconds is not None and not nodes:
        raise SpecError("step_seconds", "without nodes", "node placement (nodes=True)")
    if decide_measured and step_seconds is None:
        raise SpecError("decide_measured", True, "measured step times (step_seconds=...)")
    if learn_placements and (learning is None or decide_measured or pollux or tiresias):
        raise SpecError("learn_placements", True, "a learning setup (reports), the core "
                        "deciding (no reference) and not decide_measured")  # fmt: skip
    if (pollux or tiresias) and (not nodes or capacity_changes or learning is not None):
        missing = ("fewest-nodes placement" if not nodes else "capacity changes"
                   if capacity_changes else "a learning setup")  # fmt: skip
        raise SpecError(
            "pollux" if pollux else "tiresias", "with " + missing,
            "node placement (nodes=True), a fixed cluster and no learning setup",
        )  # fmt: skip
    started = timer()
    state = _Run(
        trace, gpus=gpus, config=config, cluster=cluster,
        capacity_changes=capacity_changes, timer=timer, learning=learning,
        efficiency=efficiency, nodes=nodes, pollux=pollux, engines=engines,
        pollux_retune=pollux_retune, tiresias=tiresias, charge_start=charge_start,
        efficiency_truth=efficiency_truth, step_seconds=step_seconds,
        decide_measured=decide_measured, learn_placements=learn_placements, typed=typed,
        blind=blind, type_steps=type_steps,
    )  # fmt: skip
    state.loop(progress)
    wall = timer() - started
    last_arrival = max((j.arrival_s for j in trace), default=0.0)
    window = (
        span_s if span_s is not None else (horizon_s if horizon_s is not None else last_arrival)
    )
    return SimResult(
        jobs=tuple(job.record() for job in state.jobs),
        gpus=gpus,
        horizon_s=horizon_s,
        span_s=window,
        gpus_in_use=tuple(state.gpus_in_use),
        capacity=tuple(state.capacity_log),
        stats=RunStats(
            events=state.events,
            rounds=state.rounds,
            decisions=state.decisions,
            wall_s=wall,
            core_s=state.core_s,
            arrive_s=state.arrive_s,
            pure_swaps=state.pure_swaps,
            reports=state.reports,
            revisions=state.revisions,
        ),
        mode=config.mode,
        learning=learning,
        revisions=() if state.learner is None else tuple(state.learner.revisions),
        off_prior=state.off_prior,
        inconsistent=() if state.learner is None else tuple(sorted(state.learner.inconsistent)),
        charged=None if efficiency is None else state.charged,
        nodes=nodes,
        reference=("pollux" if pollux else "tiresias" if tiresias else "gavel" if gavel else None),
        gpu_types=() if typed is None else typed.names,
        type_moves=(
            state.auto.moves if isinstance(state.auto, TypedAutoscaler) else state.blind_moves
        ),
    )


def _check_typed(
    typed: TypedCluster,
    gpus: int,
    config: AutoscalerConfig,
    *,
    pollux: bool,
    tiresias: bool,
    learning: Learning | None,
    step_seconds: StepSeconds | None,
    changes: Sequence[CapacityChange],
) -> None:
    """What a typed run refuses (``run``'s docstring)."""
    if gpus != typed.total:
        raise SpecError("gpus", gpus, f"the typed cluster's {typed.total} GPUs")
    if config.mode is not Mode.BELLOWS:
        raise SpecError("mode", config.mode.value, "bellows on a cluster of several GPU types "
                        "(paper mode keeps one pool: give it the GPUs as one)")  # fmt: skip
    if tiresias or learning is not None or step_seconds is not None:
        raise SpecError("typed", typed.names, "no Tiresias reference, learning or one-type "
                        "measured step times (not modelled on types)")  # fmt: skip
    for i, change in enumerate(changes):
        if change.gpu_type not in typed.names:
            raise SpecError(f"capacity_changes[{i}].gpu_type", change.gpu_type,
                            f"one of {', '.join(typed.names)}")  # fmt: skip
