"""The jobs' TSF rows and goodput tables, computed and cached for the core.

A job's row (:class:`~bellows.autoscaler.state.Row`) is its TSF row under the configured
policy (per GPU count: the value, the best batch, its rate), computed once per template
(:func:`template`: jobs equal but for name and work share one) and cached in
:class:`Tables`. A job decided by goodput (``Autoscaler.charge``) gets goodput rows instead:
per k the batch maximising throughput x E(b) at the middle of each ``1 / GOODPUT_STEPS`` of
its work, recomputed as its progress moves from one such step to the next
(:meth:`Tables.goodput_rows`); their rates are reference samples per second. Pure: no I/O,
no clock; the values depend on the jobs, the cluster and the configuration only.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, Mode, Policy
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.pricing import exact
from bellows.autoscaler.progress import GOODPUT_STEPS, RunningJob, step_middle, step_of
from bellows.autoscaler.shapes import shape_rows
from bellows.autoscaler.state import Row, State
from bellows.jobs import JobSpec
from bellows.scaling import (
    ClusterProfile,
    EfficiencyProfile,
    single_gpu_throughput,
    throughput,
    tsf_tables,
)
from bellows.scaling.measured_rows import StepTimes, measured_tables
from bellows.scaling.placement_memory import ObservedStep, PlacementMemory
from bellows.scaling.placement_steps import PlacementSteps, refuted
from bellows.scaling.tables import candidate_count

__all__ = [
    "GOODPUT_ROWS_KEPT",
    "GOODPUT_STEPS",
    "TABULATE_BATCH",
    "Tables",
    "stacked",
    "template",
]

TABULATE_BATCH = 512  # jobs per vectorized TSF table in Tables.tabulate (~30 MiB peak)
GOODPUT_ROWS_KEPT = 4096  # goodput rows cached before those no known job uses are dropped


def template(job: JobSpec) -> tuple[object, ...]:
    """What a job's row depends on: jobs from one template (all but name and work equal)
    share a row."""
    return (
        job.b_min, job.b_max, job.batch_size, job.k_max, job.m_max, job.weights,
        job.profile, job.elastic, job.gpus, job.placements,
    )  # fmt: skip


def stacked(rows: Sequence[np.ndarray], lengths: np.ndarray, width: int, fill: float) -> np.ndarray:
    """``rows`` (1-D, ``lengths`` long) as one ``[len(rows), width+1]`` array, cut at column
    ``width`` and padded with ``fill`` (no rate, no value past a row): one concatenation and
    one masked store, however many rows (a row-by-row copy was a third of a 400-GPU
    simulation's rounds, issue 11)."""
    columns = max(int(lengths.max()), width + 1)
    out = np.full((len(rows), columns), fill)
    out[np.arange(columns) < lengths[:, None]] = np.concatenate(rows)  # row-major, as joined
    return out if columns == width + 1 else np.ascontiguousarray(out[:, : width + 1])


@dataclass
class Tables:
    """The rows of one core's jobs: computed on its configuration, cluster and engines, and
    cached by template (TSF rows) and by template, profile and step (goodput rows)."""

    config: AutoscalerConfig
    cluster: ClusterProfile
    engines: Engines
    row_cache: dict[tuple[object, ...], Row] = field(default_factory=dict)
    # goodput rows by template, profile and step (goodput_rows): a refitted spec or a
    # learned profile makes keys of one job only, so those of jobs gone are dropped
    goodput_cache: dict[tuple[object, ...], Row] = field(default_factory=dict)
    goodput_bound: int = field(default_factory=lambda: GOODPUT_ROWS_KEPT)  # read when made
    # measured step times, where a job has them, decide its rows instead of the JSA
    # (bellows.scaling.measured_rows; None: the jobs' measured placements outside paper
    # mode, bellows.scaling.placement_steps; the JSA's everywhere in paper mode)
    measured: StepTimes | None = None

    declared: PlacementSteps | None = None  # what jobs' measured placements say (observe)

    def __post_init__(self) -> None:
        self.declared = PlacementSteps(self.cluster)
        # outside paper mode, a job's measured placements decide its rows where it has them
        if self.measured is None and self.config.mode is not Mode.PAPER:
            self.measured = self.declared

    def fork(self) -> Tables:
        """Independent caches holding the same (immutable) rows."""
        twin = copy.copy(self)
        twin.row_cache = dict(self.row_cache)
        twin.goodput_cache = dict(self.goodput_cache)
        if isinstance(self.measured, PlacementMemory):  # what one learns, the other does not
            twin.measured = self.measured.copy()
        return twin

    def observe(
        self,
        s: State,
        charged: Mapping[str, EfficiencyProfile],
        name: str,
        step: ObservedStep,
        now: float,
    ) -> bool:
        """Job ``name``'s measured step, into the placement memory (when :attr:`measured` is
        one); its class's rows refreshed when it changed what is known. A step that
        contradicts the job's measured placements (:func:`contradicts`) revokes them: the
        job is valued by the JSA (and what the memory learns) from then on, so that a
        profile claiming placements faster than the job runs gains it nothing past its
        first reports there."""
        memory, job = self.measured, s.jobs.get(name)
        if job is None:
            return False
        revoked = job.placements and self.contradicts(job, step)
        if revoked:
            s.revoked.add(name)
            s.jobs[name] = job = replace(job, placements=())
            self.rerow(s, charged, name, now)
        if not isinstance(memory, PlacementMemory) or not memory.observe(job, step):
            return bool(revoked)
        self.refresh(s, charged, memory.class_of(job), now)
        return True

    @staticmethod
    def unrevoked(s: State, job: JobSpec) -> JobSpec:
        """``job`` as a revision gives it, without the measured placements a step of it
        refuted before (a refit keeps the owner's profile otherwise)."""
        return replace(job, placements=()) if job.name in s.revoked and job.placements else job

    def contradicts(self, job: JobSpec, step: ObservedStep) -> bool:
        """Whether ``step`` (on the fewest nodes, or nodes unknown) refutes the job's
        measured placements (:func:`~bellows.scaling.placement_steps.refuted`)."""
        fewest = -(-step.gpus // self.cluster.gpus_per_node)
        if step.nodes not in (None, fewest):
            return False
        assert self.declared is not None
        return refuted(job, {(step.gpus, step.batch): step.seconds}, self.declared)

    def refresh(
        self, s: State, charged: Mapping[str, EfficiencyProfile], kind: object, now: float
    ) -> None:
        """What the placement memory knows of the jobs of class ``kind``
        (:meth:`~bellows.scaling.placement_memory.PlacementMemory.class_of`) changed: each
        takes its row of the new version, a running one goes on at its allocation's new rate.
        A job decided by goodput takes its new row at the next step (:meth:`goodput_rows`,
        keyed on the version too)."""
        memory = self.measured
        assert isinstance(memory, PlacementMemory)
        for name, job in s.jobs.items():
            if memory.class_of(job) == kind:
                self.rerow(s, charged, name, now)

    def rerow(
        self, s: State, charged: Mapping[str, EfficiencyProfile], name: str, now: float
    ) -> None:
        """Job ``name`` takes the row of what is known of it now; running, it goes on at its
        allocation's new rate (a job decided by goodput: at its next step's row)."""
        if name in charged:
            return
        job = s.jobs[name]
        s.rows[name] = self.row(job)
        run = s.running.get(name)
        if run is not None:
            held = run.allocation
            rate = self.throughput(job, held.gpus, held.batch)
            shown = run.rerated(rate, run.done)
            done = run.done_at(now)
            s.running[name] = RunningJob(
                held, rate, done, now, run.paused_until, seen=run.seen, shown=shown
            )

    def kind(self, job: JobSpec) -> tuple[object, ...]:
        """What the job's rows are cached under: its template, and, with a placement memory,
        its class and the version of what the memory knows of it (a lesson is a new key)."""
        memory = self.measured
        return (*template(job), memory.stamp(job) if isinstance(memory, PlacementMemory) else None)

    def row(self, job: JobSpec) -> Row:
        """The job's row, from the template cache or computed now."""
        key = self.kind(job)
        row = self.row_cache.get(key)
        if row is None:
            row = self.row_cache[key] = self.compute([job])[0]
        return row

    def tabulate(self, jobs: Iterable[JobSpec]) -> int:
        """Compute the rows of jobs expected to arrive, every new template in vectorized
        batches of ``TABULATE_BATCH`` (jobs of similar candidate counts together, so little
        of a table is padding), with the very same values :meth:`row` gives. Returns how
        many new rows this computed."""
        fresh: dict[tuple[object, ...], JobSpec] = {}
        for job in jobs:
            key = self.kind(job)
            if key not in self.row_cache:
                fresh.setdefault(key, job)
        todo = sorted(fresh.items(), key=lambda item: candidate_count(item[1]))
        for first in range(0, len(todo), TABULATE_BATCH):
            part = todo[first : first + TABULATE_BATCH]
            rows = self.compute([job for _, job in part])
            self.row_cache.update((key, row) for (key, _), row in zip(part, rows, strict=True))
        return len(todo)

    def goodput_rows(
        self,
        s: State,
        charged: Mapping[str, EfficiencyProfile],
        names: Sequence[str],
        now: float,
    ) -> None:
        """Give each charged job among ``names`` the goodput row of its progress step."""
        todo: dict[tuple[object, ...], tuple[JobSpec, EfficiencyProfile, float]] = {}
        keys: dict[str, tuple[object, ...]] = {}
        steps: dict[str, int] = {}
        for name in names:
            profile = charged.get(name)
            if profile is None:
                continue
            job, run = s.jobs[name], s.running.get(name)
            done = run.done_at(now) if run is not None else s.carried.get(name, 0.0)
            step = step_of(done, job.work)
            key = keys[name] = (*self.kind(job), profile, step)
            steps[name] = step
            if key not in self.goodput_cache:  # E at the step's middle: its rate's mean
                todo.setdefault(key, (job, profile, step_middle(step, job.work)))
        if todo:
            parts = list(todo.values())
            rows = self.compute([p[0] for p in parts], [(p[1], p[2]) for p in parts])
            self.goodput_cache.update(zip(todo, rows, strict=True))
        for name, key in keys.items():
            row = self.goodput_cache[key]
            run = s.running.get(name)
            if run is not None and s.rows.get(name) is not row:
                job, profile = s.jobs[name], charged[name]
                step = steps[name]
                s.running[name] = self.regoodput(job, profile, run, row=row, step=step, now=now)
            s.rows[name] = row
        if len(self.goodput_cache) > self.goodput_bound:
            self.drop_goodput_rows(s, charged)

    def drop_goodput_rows(self, s: State, charged: Mapping[str, EfficiencyProfile]) -> None:
        """Keep only the cached goodput rows a known job may use (its spec's template and
        the profile it is charged, at any step); the bound doubles past what is kept, so
        that this costs a pass over the known jobs now and then, not at every round.

        Every revision of a job decided by goodput (a refitted spec, a learned profile)
        makes rows no other job uses: without this the cache grew with every job the
        controller ever revised. A row dropped and needed again is computed again, the
        same (a row does not depend on the jobs it was computed beside)."""
        live = {(*self.kind(s.jobs[n]), p)
                for n in s.jobs if (p := charged.get(n)) is not None}  # fmt: skip
        cache = self.goodput_cache
        self.goodput_cache = {key: row for key, row in cache.items() if key[:-1] in live}
        self.goodput_bound = max(GOODPUT_ROWS_KEPT, 2 * len(self.goodput_cache))

    def regoodput(
        self,
        job: JobSpec,
        profile: EfficiencyProfile,
        run: RunningJob,
        *,
        row: Row,
        step: int,
        now: float,
    ) -> RunningJob:
        """A running job entering the next step of its work: its estimate goes on at the
        goodput of what it holds *there* (the new row's where its batch is the row's, else
        ``X(b, k) E(b)`` at the step's middle), not at the goodput of the step it was placed
        in. Below ``M0`` E falls as training goes on: a job left at its first batch was
        credited its first step's E to the end, so its estimate ran ahead, and the choice to
        move it to the new row's batch (:func:`bellows.autoscaler.applying.batch_move_pays`)
        weighed that stale rate against the new step's."""
        held = run.allocation
        if row.batch[held.gpus] == held.batch:
            rate = float(row.rate[held.gpus])
        else:
            gain = float(profile.efficiency(held.batch, step_middle(step, job.work)))
            rate = self.throughput(job, held.gpus, held.batch) * gain
        done = run.done_at(now)
        return RunningJob(held, rate, done, now, run.paused_until, profile, job.work,
                          run.seen, run.shown)  # fmt: skip

    def throughput(self, job: JobSpec, gpus: int, batch: int) -> float:
        """Samples per second at ``(gpus, batch)``: measured where :attr:`measured` has the
        job, else the JSA's."""
        if self.measured is not None and (self.measured is not self.declared or job.placements):
            seconds = self.measured(job, gpus, batch)
            if seconds is not None and np.isfinite(seconds) and seconds > 0:
                return batch / seconds
        return throughput(job, gpus, batch, self.cluster)

    def compute(
        self,
        jobs: Sequence[JobSpec],
        goodput: Sequence[tuple[EfficiencyProfile, float]] | None = None,
    ) -> list[Row]:
        """One TSF table for ``jobs``; each row is cut to its job's ``k_max`` (the columns
        past it are ``-inf``), so a row is the same whichever batch computed it. With
        ``goodput`` (a profile and the progress of each job): goodput rows, whose rates and
        ``x1`` are reference samples per second."""
        fixed = self.config.policy is Policy.BASELINE
        width = max(job.k_max for job in jobs)
        profiles = None if goodput is None else [g[0] for g in goodput]
        progress = None if goodput is None else [g[1] for g in goodput]
        tables = tsf_tables(
            jobs, self.cluster, fixed_batch=fixed, width=width,
            efficiency=profiles, progress=progress, compiled=self.engines.compiled_weighing,
        )  # fmt: skip
        x1s: Sequence[float | None] = [None] * len(jobs)
        # the jobs' own placements answer only for jobs that carry some: none, nothing to do
        answers = self.measured is not self.declared or any(job.placements for job in jobs)
        if self.measured is not None and not fixed and answers:
            tables, x1s = measured_tables(tables, jobs, self.measured, profiles, progress)
        table = tables.values.astype(np.float64)
        if self.config.node_counts:  # counts that tile nodes only (bellows.autoscaler.shapes)
            shape_rows(table, self.cluster.gpus_per_node)
        grids = exact(table, np.full(len(jobs), -1, dtype=np.int64))
        rows = []
        for j, job in enumerate(jobs):
            rate = tables.throughput[j, : job.k_max + 1].astype(np.float64)
            gain = 1.0
            if goodput is not None and tables.efficiency is not None:
                gain = float(goodput[j][0].efficiency(job.x1_batch, goodput[j][1]))
                rate = rate * tables.efficiency[j, : job.k_max + 1]
            x1 = x1s[j]
            if x1 is None and tables.one is not None and np.isfinite(tables.one[j]):
                x1 = float(tables.one[j])  # a goodput row's own reference
            values = table[j, : job.k_max + 1].copy()
            finite = np.flatnonzero(np.isfinite(values[1:]))
            rows.append(
                Row(
                    values=values,
                    batch=tuple(tables.batch[j, : job.k_max + 1].tolist()),
                    rate=rate,
                    min_gpus=int(finite[0]) + 1 if finite.size else job.k_max + 1,
                    x1=single_gpu_throughput(job, self.cluster) * gain if x1 is None else x1,
                    grid=grids[j, : job.k_max + 1].copy(),
                )
            )
        return rows
