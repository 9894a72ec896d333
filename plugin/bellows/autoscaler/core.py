"""The autoscaler core (paper Section III-D): a sans-I/O state machine over jobs.

State: ``Arrived`` (FIFO buffer of job names), ``Executing`` (running jobs and their
allocations), ``Finished``. The caller feeds facts — :meth:`Autoscaler.arrive`,
:meth:`Autoscaler.finish`, :meth:`Autoscaler.set_capacity` — each with the time it happened
on the caller's clock, asks :meth:`Autoscaler.next_round_at` when to come back, and calls
:meth:`Autoscaler.step` then. A round runs the optimizer over ``Executing`` + ``Arrived`` (in
arrival order, one DP layer per admitted job) and returns typed decisions, which the core
takes as applied at that time. No I/O, no wall clock: the simulator and the live controller
drive this very object, so identical inputs give identical decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, Policy
from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start
from bellows.autoscaler.progress import RunningJob
from bellows.autoscaler.rounds import RoundClock
from bellows.jobs import Allocation, JobSpec, SpecError
from bellows.optimizer import admit
from bellows.scaling import ClusterProfile, single_gpu_throughput, throughput, tsf_tables

__all__ = ["Autoscaler", "RoundStats"]


@dataclass(frozen=True)
class _Row:
    """A job's TSF row under the configured policy, computed once on arrival."""

    values: np.ndarray  # float64 [k_max+1], -inf where infeasible, column 0 = -inf
    batch: np.ndarray  # int64 [k_max+1], best global batch per GPU count
    rate: np.ndarray  # float64 [k_max+1], samples/s at (k, batch[k])
    min_gpus: int  # smallest feasible k (k_max + 1 when none)


@dataclass(frozen=True)
class RoundStats:
    """What the last round looked at and decided (for metrics and logs)."""

    at: float
    candidates: int
    admitted: int
    objective: float
    decisions: int


@dataclass
class _State:
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    rows: dict[str, _Row] = field(default_factory=dict)
    arrived: list[str] = field(default_factory=list)  # FIFO
    running: dict[str, RunningJob] = field(default_factory=dict)  # in start order
    finished: set[str] = field(default_factory=set)
    rejected: set[str] = field(default_factory=set)
    carried: dict[str, float] = field(default_factory=dict)  # progress kept over a preemption


class Autoscaler:
    """Decides GPUs and batch sizes for every job; see the module docstring."""

    def __init__(self, config: AutoscalerConfig, *, capacity: int, cluster: ClusterProfile) -> None:
        self._config = config
        self._cluster = cluster
        self._capacity = _check_capacity(capacity)
        self._clock = RoundClock(config.delta_s, config.early_share)
        self._s = _State()
        self._row_cache: dict[tuple[object, ...], _Row] = {}
        self.last_round: RoundStats | None = None

    # ------------------------------------------------------------------ facts in
    def arrive(self, job: JobSpec, now: float) -> bool:
        """Job ``job`` arrived at ``now``; returns ``False`` if it was already known."""
        if job.name in self._s.jobs:
            return False
        self._s.jobs[job.name] = job
        self._s.rows[job.name] = self._row(job)
        self._s.arrived.append(job.name)
        self._clock.note_event(now)
        return True

    def adopt(self, job: JobSpec, allocation: Allocation, now: float, *, done: float = 0.0) -> bool:
        """Take over a job found running at ``allocation`` (a controller rebuilding its state).

        ``done`` is the progress the caller knows of (samples); the next round reconsiders
        the job like any running one. Returns ``False`` if the job was already known.
        """
        if job.name in self._s.jobs:
            return False
        self._s.jobs[job.name] = job
        self._s.rows[job.name] = self._row(job)
        rate = throughput(job, allocation.gpus, allocation.batch, self._cluster)
        self._s.running[job.name] = RunningJob(allocation, rate, done, now, now)
        self._clock.note_event(now)
        return True

    def finish(self, name: str, now: float) -> bool:
        """Job ``name`` completed (or failed, or was deleted) at ``now``.

        Returns ``False`` when the job is unknown or already finished (idempotent).
        A job that finishes while still queued simply leaves the queue.
        """
        if name not in self._s.jobs or name in self._s.finished:
            return False
        self._s.finished.add(name)
        was_running = self._s.running.pop(name, None) is not None
        if name in self._s.arrived:
            self._s.arrived.remove(name)
        self._clock.note_event(now, finished=was_running)
        return True

    def set_capacity(self, gpus: int, now: float) -> None:
        """The cluster now has ``gpus`` GPUs (nodes lost or added)."""
        gpus = _check_capacity(gpus)
        if gpus != self._capacity:
            self._capacity = gpus
            self._clock.note_event(now)

    # ------------------------------------------------------------------ queries
    def next_round_at(self) -> float | None:
        """When the next round is due (``None``: nothing pending)."""
        return self._clock.next_round_at()

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def config(self) -> AutoscalerConfig:
        return self._config

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        """Running jobs and their allocations, in start order."""
        return MappingProxyType({n: r.allocation for n, r in self._s.running.items()})

    @property
    def queued(self) -> tuple[str, ...]:
        """Arrived jobs waiting for GPUs, in arrival order."""
        return tuple(self._s.arrived)

    def job(self, name: str) -> JobSpec:
        return self._s.jobs[name]

    def estimated_done(self, name: str, now: float) -> float:
        """Samples the core estimates job ``name`` has processed by ``now``."""
        return self._s.running[name].done_at(now)

    # ------------------------------------------------------------------ the round
    def step(self, now: float) -> list[Decision]:
        """Run a round if one is due at ``now``; the decisions are taken as applied."""
        if not self._clock.is_due(now):
            return []
        decisions: list[Decision] = []
        decisions.extend(self._preempt_to_fit(now))
        names = list(self._s.running) + self._candidates()
        required = len(self._s.running)
        if names:
            values = self._values(names, now)
            admission = admit(
                values,
                self._capacity,
                required=required,
                backfill=self._config.backfill,
                method=self._config.optimizer,
            )
            admitted = set(admission.admitted)
            gpus = {names[i]: int(admission.gpus[i]) for i in admission.admitted}
            decisions.extend(self._apply(gpus, now))
            objective = admission.objective
        else:
            admitted, objective = set(), 0.0
        decisions.extend(self._reject())
        self._clock.round_done(now, running=len(self._s.running))
        self.last_round = RoundStats(
            at=now,
            candidates=len(names),
            admitted=len(admitted),
            objective=objective,
            decisions=len(decisions),
        )
        return decisions

    def _candidates(self) -> list[str]:
        """Arrived jobs offered to the optimizer, in FIFO order.

        Each admitted job takes at least one GPU, so without backfill no more than the free
        GPU count can be admitted; the rest of the queue is not even looked at. With
        backfill, jobs that could not run even on an empty cluster are passed over.
        """
        arrived = self._s.arrived
        if self._config.backfill:
            return [n for n in arrived if self._s.rows[n].min_gpus <= self._capacity]
        return arrived[: max(0, self._capacity - len(self._s.running))]

    def _values(self, names: Sequence[str], now: float) -> np.ndarray:
        width = min(self._capacity, max(self._s.jobs[n].k_max for n in names))
        values = np.full((len(names), width + 1), -np.inf)  # [jobs, width+1]
        for i, name in enumerate(names):
            row = self._s.rows[name].values[: width + 1]
            values[i, : row.shape[0]] = row
            running = self._s.running.get(name)
            if running is not None and self._config.restart_cost_s > 0:
                values[i, : row.shape[0]] = self._priced(name, running, row, now)
        return values

    def _priced(self, name: str, running: RunningJob, row: np.ndarray, now: float) -> np.ndarray:
        """TSF of a running job with the restart priced in (restart-cost option).

        Moving to ``k`` finishes the remaining work ``W`` in ``W/X(k) + c·h`` seconds instead
        of ``W/X(k)``, where ``c`` is the restart cost and ``h`` the hysteresis factor (at
        least 1): the effective rate ``W / (W/X(k) + c·h)`` replaces ``X(k)``. Pricing the
        restart inside the optimizer keeps the result exact and feasible, which skipping
        rescales after the fact would not (a skipped scale-down could over-commit).
        """
        job = self._s.jobs[name]
        rates = self._s.rows[name].rate[: row.shape[0]]
        remaining = max(job.work - running.done_at(now), 0.0)
        penalty = self._config.restart_cost_s * max(1.0, self._config.hysteresis)
        priced = row.copy()
        current = running.allocation.gpus
        x1 = single_gpu_throughput(job, self._cluster)
        with np.errstate(divide="ignore", invalid="ignore"):
            effective = remaining / (remaining / rates + penalty)
        move = np.isfinite(row) & (np.arange(row.shape[0]) != current) & (rates > 0)
        priced[move] = effective[move] / x1
        return priced

    def _preempt_to_fit(self, now: float) -> list[Decision]:
        """If the running jobs alone no longer fit (capacity shrank), halt the newest ones."""
        out: list[Decision] = []
        while self._s.running and self._min_need(list(self._s.running)) > self._capacity:
            name = next(reversed(self._s.running))
            running = self._s.running.pop(name)
            self._s.arrived.insert(0, name)
            # the job resumes later from its checkpoint, with the progress it had
            self._s.carried[name] = running.done_at(now)
            out.append(Preempt(name, f"cluster capacity fell to {self._capacity} GPUs"))
        return out

    def _min_need(self, names: Sequence[str]) -> int:
        return sum(self._s.rows[n].min_gpus for n in names)

    def _apply(self, gpus: Mapping[str, int], now: float) -> list[Decision]:
        downs: list[Decision] = []
        ups: list[Decision] = []
        starts: list[Decision] = []
        cost = self._config.restart_cost_s
        for name, k in gpus.items():
            row = self._s.rows[name]
            alloc = Allocation(k, int(row.batch[k]))
            rate = float(row.rate[k])
            running = self._s.running.get(name)
            if running is None:
                self._s.arrived.remove(name)
                done = self._s.carried.pop(name, 0.0)
                self._s.running[name] = RunningJob(alloc, rate, done, now, now)
                starts.append(Start(name, alloc.gpus, alloc.batch))
            elif running.allocation != alloc:
                old = running.allocation
                self._s.running[name] = running.moved_to(alloc, rate, now, restart_cost_s=cost)
                change = Rescale(name, old.gpus, old.batch, alloc.gpus, alloc.batch)
                (downs if alloc.gpus < old.gpus else ups).append(change)
        # scale-downs free GPUs before scale-ups and starts claim them
        return downs + ups + starts

    def _reject(self) -> list[Decision]:
        """No-queue mode: every arrived job the round did not start is dropped.

        Jobs halted by a capacity drop were running, and running jobs are never rejected:
        they keep their place at the head of the queue.
        """
        if self._config.queue:
            return []
        kept = [n for n in self._s.arrived if n in self._s.carried]
        dropped = [n for n in self._s.arrived if n not in self._s.carried]
        self._s.arrived[:] = kept
        self._s.rejected.update(dropped)
        return [Reject(name, f"did not fit in {self._capacity} GPUs") for name in dropped]

    def _row(self, job: JobSpec) -> _Row:
        """The job's row; jobs from one template (all but name and work equal) share it."""
        key = (
            job.b_min, job.b_max, job.batch_size, job.k_max, job.m_max, job.weights,
            job.profile, job.elastic, job.gpus,
        )  # fmt: skip
        row = self._row_cache.get(key)
        if row is None:
            row = self._row_cache[key] = self._compute_row(job)
        return row

    def _compute_row(self, job: JobSpec) -> _Row:
        fixed = self._config.policy is Policy.BASELINE
        tables = tsf_tables([job], self._cluster, fixed_batch=fixed, width=job.k_max)
        values = tables.values[0].astype(np.float64)
        finite = np.flatnonzero(np.isfinite(values[1:]))
        return _Row(
            values=values,
            batch=tables.batch[0].astype(np.int64),
            rate=tables.throughput[0].astype(np.float64),
            min_gpus=int(finite[0]) + 1 if finite.size else job.k_max + 1,
        )


def _check_capacity(gpus: int) -> int:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise SpecError("capacity", gpus, "an integer number of GPUs >= 0")
    return gpus
