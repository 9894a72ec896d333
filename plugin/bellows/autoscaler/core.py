"""The autoscaler core (paper Section III-D): a sans-I/O state machine over jobs.

State: ``Arrived`` (FIFO buffer of job names), ``Executing`` (running jobs and their
allocations), ``Finished``. A job that finishes (or is rejected) is forgotten at once, all
kept by its name with it (issue 35: the core's memory follows the jobs it holds). The caller
feeds facts — :meth:`Autoscaler.arrive`,
:meth:`Autoscaler.finish`, :meth:`Autoscaler.set_capacity` — each with the time it happened
on the caller's clock, asks :meth:`Autoscaler.next_round_at` when to come back, and calls
:meth:`Autoscaler.step` then. Time never goes backwards: a fact or a step dated before the
last one raises :class:`ClockError`, as h11 raises on an illegal transition.

A step does what is due, in this order:

* **Preemption**, at the moment the capacity falls below the GPUs in use: the newest jobs
  are halted until the rest fit; they wait at the head of the queue with their progress.
* **A round**, on the Δ grid or when the hybrid trigger fires: the optimizer over
  ``Executing`` + ``Arrived`` (in arrival order, one DP layer per admitted job), with each
  running job's moves priced by its restart cost (:mod:`bellows.autoscaler.pricing`).
* **A fill** (Bellows mode only), at the moment an arrival, a completion or a capacity
  change leaves GPUs free while jobs wait: the optimizer over the waiting jobs and the free
  GPUs alone. No running job is touched; only rounds take GPUs from running jobs.

**Nodes** and **goodput** (issue 29, Bellows mode only): a caller that knows where the GPUs
sit says so before a step (:meth:`Autoscaler.see_nodes`), and counts that would straddle
nodes are priced at their step time there; a job given an efficiency profile
(:meth:`Autoscaler.charge`) is decided by goodput rows, in reference samples.

This class holds the state and the clock, and decides what is due; what it computes lives
in pure modules it calls, over its :class:`~bellows.autoscaler.state.State`:
:mod:`~bellows.autoscaler.rows` (TSF rows and goodput tables, cached by template),
:mod:`~bellows.autoscaler.valuing` (the rows priced for restarts, nodes and the objective),
:mod:`~bellows.autoscaler.admission` (candidates, admission, the optimizer's solve,
preemption, protection, rejection) and :mod:`~bellows.autoscaler.applying` (decisions and
facts applied to the state, the notes on jobs kept).

Decisions are typed values, taken as applied at the step's time. No I/O, no wall clock: the
simulator and the live controller drive this very object, so identical inputs give identical
decisions.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType

import numpy as np

from bellows.autoscaler import admission, applying
from bellows.autoscaler.config import AutoscalerConfig, Mode, Policy, restart_s
from bellows.autoscaler.decisions import Decision, Keep
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.rounds import RoundClock
from bellows.autoscaler.rows import GOODPUT_STEPS, TABULATE_BATCH, Tables
from bellows.autoscaler.state import RoundStats, State
from bellows.autoscaler.straddle import FreeNodes
from bellows.autoscaler.valuing import Pricing
from bellows.jobs import Allocation, JobSpec, SpecError
from bellows.scaling import ClusterProfile, EfficiencyProfile
from bellows.scaling.measured_rows import StepTimes
from bellows.scaling.placement_memory import ObservedStep

__all__ = ["GOODPUT_STEPS", "TABULATE_BATCH", "Autoscaler", "ClockError", "RoundStats"]


class ClockError(RuntimeError):
    """A fact or a step dated before the last one: the caller's clock went backwards."""


class Autoscaler:
    """Decides GPUs and batch sizes for every job; see the module docstring."""

    # Shortcuts that decide exactly as the full optimizer, in less time: only the candidates
    # FIFO admission takes get a row, a lone candidate is placed without the DP, waiting
    # jobs' grid rows are computed once. The tests turn them off to hold them to it.
    shortcuts = True

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        capacity: int,
        cluster: ClusterProfile,
        engines: Engines | None = None,
        measured: StepTimes | None = None,
    ) -> None:
        """``engines``: the optimizer's and the JSA's (:class:`Engines`; ``None``: this core's
        own). ``measured``: step times measured where jobs run, deciding the rows of the jobs
        they know instead of the JSA (:mod:`bellows.scaling.measured_rows`; alike for jobs of
        one template); a ``PlacementMemory`` learns from :meth:`observe_step`."""
        self._config = config
        self._engines = Engines() if engines is None else engines
        self._cluster = cluster
        self._capacity = _check_capacity(capacity)
        self._clock = RoundClock(config.delta_s, config.early_share, config.early_gap_s)
        self._s = State()
        self._tables = Tables(config, cluster, self._engines, measured=measured)  # rows
        self._now = float("-inf")  # the latest time a fact or a step carried
        self._preempt_at: float | None = None  # capacity fell below the GPUs in use
        self._fill_at: float | None = None  # GPUs may be free while jobs wait
        self.last_round: RoundStats | None = None
        self.note_keeps = False  # live: each round lists in keeps the jobs it kept, and why
        self.keeps: tuple[Keep, ...] = ()
        self._batch_kept: dict[str, int] = {}  # job -> the batch a round declined (_apply)
        self._need = 0  # GPUs the running and admitted jobs need at their least (SLACK)
        self._priced: tuple[list[str], np.ndarray] | None = None  # the last round's values
        self._nodes: FreeNodes | None = None  # where GPUs sit, for the next step (see_nodes)
        self._ratios: dict[tuple[object, ...], np.ndarray] = {}  # straddle ratios (Pricing)
        self._squeezed: dict[str, int] = {}  # job -> its room in this round's placement

    def fork(self) -> Autoscaler:
        """An independent core in this one's state (a what-if: the controller's start-up
        rehearsal). Immutable specs, rows and running jobs are shared, only their containers
        copied: milliseconds at 10 000 jobs, where ``copy.deepcopy`` took a second."""
        twin = copy.copy(self)
        twin._s = self._s.copy()
        twin._clock = dataclasses.replace(self._clock)
        twin._tables = self._tables.fork()
        return twin

    def charge(self, name: str, profile: EfficiencyProfile | None) -> None:
        """Decide job ``name`` by goodput with ``profile`` (Bellows mode; ``None``: by
        throughput, as every job without a profile). Call before it arrives, or (a profile
        learned online) with a :meth:`revise` that says its progress in reference samples;
        paper mode and the baseline keep the paper's premise and ignore it (:attr:`goodput`)."""
        if profile is None:
            self._s.charged.pop(name, None)
        elif self.goodput:
            self._s.charged[name] = profile

    def see_nodes(self, nodes: FreeNodes | None) -> None:
        """Where the GPUs sit now, for the next :meth:`step` only (Bellows mode): its counts
        that would straddle nodes are priced at their step time there
        (:mod:`bellows.autoscaler.straddle`); ``None`` or never called: every count priced on
        the fewest nodes. Paper mode and the baseline ignore it."""
        self._nodes = nodes

    @property
    def goodput(self) -> bool:
        """Whether :meth:`charge` takes effect: Bellows mode, not the fixed-batch baseline."""
        return self._config.mode is Mode.BELLOWS and self._config.policy is not Policy.BASELINE

    def charged(self, name: str) -> EfficiencyProfile | None:
        """The efficiency job ``name`` is decided by (``None``: by throughput)."""
        return self._s.charged.get(name)

    # ------------------------------------------------------------------ facts in
    def arrive(self, job: JobSpec, now: float) -> bool:
        """Job ``job`` arrived at ``now``; returns ``False`` if it is already known (running
        or waiting: a finished or rejected job is forgotten, and its name may come again)."""
        self._advance(now)
        if job.name in self._s.jobs:
            return False
        row = self._tables.row(job)  # first: a job the JSA cannot tabulate leaves no trace
        self._s.jobs[job.name] = job
        self._s.rows[job.name] = row
        self._s.arrived.append(job.name)
        self._clock.note_event(now)
        self._may_fill(now)
        return True

    def adopt(
        self,
        job: JobSpec,
        allocation: Allocation,
        now: float,
        *,
        done: float = 0.0,
        since: float | None = None,
    ) -> bool:
        """Take over a job found running at ``allocation`` (a controller rebuilding its state).

        ``done`` is the progress the caller knows of (samples) as of ``since``, the time on
        the caller's clock the job (re)started at ``allocation`` (default: ``now``); from
        then the core counts progress at the allocation's rate, after the restart a resume
        costs. The next round reconsiders the job like any running one. Returns ``False`` if
        the job was already known. :class:`SpecError` (nothing changed) for an allocation
        the job's bounds rule out: the caller's journal is wrong, and the tables (sized by
        ``k_max``) have no row for it.
        """
        applying.check_adoptable(job, allocation)
        self._advance(now)
        if job.name in self._s.jobs:
            return False
        row = self._tables.row(job)
        self._s.jobs[job.name] = job
        self._s.rows[job.name] = row
        rate_of = self._tables.throughput
        applying.adopted(self._s, self._config, rate_of, job, allocation, now=now, done=done,
                         since=since)  # fmt: skip
        self._clock.note_event(now)
        self._check_fit(now)
        return True

    def revise(
        self, job: JobSpec, now: float, *, done: float | None = None, since: float | None = None
    ) -> bool:
        """Replace what the core knows of a running or waiting job by ``job`` (same name).

        What a controller learns while the job runs: a profile refitted to its progress, the
        restart cost it measured (``restart_s``), and ``done``, the samples it reported as of
        ``since`` (default ``now``). The current allocation is left as it is: a revision is
        an event like an arrival, so the next round on the Δ grid decides with the revised
        spec; until then the core counts progress at the allocation's revised rate (callers
        revise when the fit moved, not at every report). Returns ``False`` when the job is
        unknown (finished and rejected jobs are forgotten). A spec the JSA cannot tabulate
        raises, changing nothing.
        """
        self._advance(now)
        name, job = job.name, self._tables.unrevoked(self._s, job)
        if name not in self._s.jobs:
            return False
        # not through the template cache: every refit is a new template, and caching each
        # would grow the cache for as long as the controller runs
        row = self._tables.compute([job])[0]
        self._s.jobs[name] = job
        self._s.rows[name] = row
        profile = self._s.charged.get(name)
        rate_of = self._tables.throughput
        applying.revised(self._s, rate_of, job, profile, now=now, done=done, since=since)
        self._clock.note_event(now)
        return True

    def observe_step(self, name: str, now: float, step: ObservedStep) -> bool:
        """A step of job ``name`` measured where it ran, for the jobs of its class when the core
        has a placement memory (``measured``): whether their rows changed (next round's)."""
        self._advance(now)
        return self._tables.observe(self._s, self._s.charged, name, step, now)

    def finish(self, name: str, now: float) -> bool:
        """Job ``name`` completed (or failed, or was deleted) at ``now``.

        Returns ``False`` when the job is unknown or already finished (idempotent).
        A job that finishes while still queued simply leaves the queue. The core then
        forgets it (:meth:`_forget`): a caller that needs its spec later keeps it itself.
        """
        self._advance(now)
        if name not in self._s.jobs:
            return False
        running = self._s.running.pop(name, None)
        if running is not None:
            self._s.in_use -= running.allocation.gpus
        if name in self._s.arrived:
            self._s.arrived.remove(name)
        self._forget(name)
        self._clock.note_event(now, finished=running is not None)
        self._may_fill(now)
        return True

    def set_capacity(self, gpus: int, now: float) -> None:
        """The cluster now has ``gpus`` GPUs (nodes lost or added)."""
        self._advance(now)
        gpus = _check_capacity(gpus)
        if gpus != self._capacity:
            self._capacity = gpus
            self._clock.note_event(now)
            self._check_fit(now)
            self._may_fill(now)

    # ------------------------------------------------------------------ queries
    def next_round_at(self) -> float | None:
        """When the next step has something to do (``None``: nothing pending).

        Never before the latest fact: a caller that fed later facts before stepping gets the
        overdue step at the time of the latest one, not in the past.
        """
        due = self._clock.next_round_at()
        for urgent in (self._preempt_at, self._fill_at):
            if urgent is not None:
                due = urgent if due is None else min(due, urgent)
        return None if due is None else max(due, self._now)

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def config(self) -> AutoscalerConfig:
        return self._config

    @property
    def engines(self) -> Engines:
        """The engines this core runs on (a fork shares them)."""
        return self._engines

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        """Running jobs and their allocations, in start order."""
        return MappingProxyType({n: r.allocation for n, r in self._s.running.items()})

    @property
    def queued(self) -> tuple[str, ...]:
        """Arrived jobs waiting for GPUs, in arrival order."""
        return tuple(self._s.arrived)

    @property
    def in_use(self) -> int:
        """GPUs the running jobs hold."""
        return self._s.in_use

    def job(self, name: str) -> JobSpec:
        return self._s.jobs[name]

    def restart_s(self, name: str) -> float:
        """Seconds of progress one halt costs job ``name`` (its own figure or the default)."""
        return restart_s(self._s.jobs[name], self._config)

    def estimated_done(self, name: str, now: float) -> float:
        """Samples the core estimates job ``name`` has processed by ``now``."""
        return self._s.running[name].done_at(now)

    def carried(self, name: str) -> float:
        """The samples waiting job ``name`` resumes from (0: none carried)."""
        return self._s.carried.get(name, 0.0)

    def carry(self, name: str, done: float) -> None:
        """Waiting job ``name`` resumes from ``done`` samples after its restart (a type move)."""
        if name not in self._s.arrived:
            raise KeyError(name)
        self._s.carried[name] = done

    # ------------------------------------------------------------------ the step
    def step(self, now: float) -> list[Decision]:
        """Do what is due at ``now`` (see the module docstring); decisions are taken as applied."""
        self._advance(now)
        decisions: list[Decision] = []
        if self._preempt_at is not None and self._preempt_at <= now:
            self._preempt_at = None
            decisions.extend(self._halt_newest(now))
        if self._clock.is_due(now):
            self._fill_at = None
            decisions.extend(self._round(now))
        elif self._fill_at is not None and self._fill_at <= now:
            self._fill_at = None
            decisions.extend(self._fill(now))
        self._nodes = None
        return decisions

    def _round(self, now: float) -> list[Decision]:
        decisions: list[Decision] = []
        decisions.extend(admission.preempt_to_fit(self._s, self._capacity, now))
        running = list(self._s.running)
        offered = self._candidates(self._capacity - len(running))
        floors = admission.protected(self._s, self._config, self._capacity, now)
        self._batch_kept = {}
        # only the candidates admission takes get a row: a long queue costs the DP nothing
        free = self._capacity - self._s.min_need(running) - admission.floor_need(self._s, floors)
        taken = self._fitting(offered, free)
        names = running + (taken if self.shortcuts else offered)
        self._need = self._s.min_need(running) + self._s.min_need(taken)
        self._priced = None
        admitted, objective = self._optimize(
            names, self._capacity, now, decisions, required=len(running), floors=floors
        )
        if self.note_keeps:
            self.keeps = applying.kept(
                self._s, self._config, self._capacity, decisions, floors,
                priced=self._priced, batch_kept=self._batch_kept,
            )  # fmt: skip
        decisions.extend(self._reject())
        self._clock.round_done(now, running=len(self._s.running))
        if floors:  # the round the protection held back comes when it ends
            self._clock.note_event(admission.protected_until(self._s, self._config, floors, now))
        candidates = len(running) + len(offered)
        self._stats(now, candidates, admitted, len(decisions), objective=objective, kind="round")
        return decisions

    def _fill(self, now: float) -> list[Decision]:
        """Start waiting jobs on the free GPUs; running jobs are left as they are."""
        free = self._capacity - self._s.in_use
        decisions: list[Decision] = []
        taken = self._fitting(self._s.arrived, free)
        names = taken if self.shortcuts else self._candidates(free)
        self._need = self._s.min_need(list(self._s.running)) + self._s.min_need(taken)
        admitted, objective = self._optimize(names, free, now, decisions, required=0)
        self._stats(now, len(names), admitted, len(decisions), objective=objective, kind="fill")
        return decisions

    def _optimize(
        self,
        names: list[str],
        capacity: int,
        now: float,
        decisions: list[Decision],
        *,
        required: int,
        floors: Mapping[str, int] | None = None,
    ) -> tuple[int, float]:
        """Admit and place ``names`` (the ``required`` running jobs first) on ``capacity``;
        a job in ``floors`` gets at least that many GPUs (:func:`.admission.protected`)."""
        self._squeezed = {}
        if not names:
            return 0, 0.0
        if self._s.charged:
            self._tables.goodput_rows(self._s, self._s.charged, names, now)
        pricing = self._pricing()
        if len(names) == 1 and not required and self.shortcuts:  # most fills
            lone = admission.solve_lone(pricing, names[0], self._s.rows[names[0]], capacity, now)
            if lone is None:
                return 0, 0.0
            decisions.extend(self._placed({names[0]: lone[0]}, now, fill=True))
            return 1, lone[1]
        gpus, values, objective, admitted = admission.solve(
            pricing, names, capacity, now, required=required, floors=floors, engines=self._engines
        )
        if self.note_keeps:
            self._priced = (names, values)
        decisions.extend(self._placed(gpus, now, fill=not required))
        return admitted, objective

    def _stats(self, now: float, *counts: int, objective: float, kind: str) -> None:
        """Note the step's :class:`RoundStats`: ``counts`` are its candidates, the jobs it
        admitted and its decisions."""
        candidates, admitted, decisions = counts
        self.last_round = RoundStats(now, candidates, admitted, objective, decisions, kind)

    def _candidates(self, slots: int) -> list[str]:
        return admission.candidates(self._s, self._capacity, slots, backfill=self._config.backfill)

    def _fitting(self, waiting: Sequence[str], free: int) -> list[str]:
        backfill = self._config.backfill
        return admission.fitting(self._s, waiting, free, self._capacity, backfill=backfill)

    def _halt_newest(self, now: float) -> list[Decision]:
        """Halt the newest running jobs until the rest fit in the capacity (at its drop)."""
        out = admission.halt_newest(self._s, self._capacity, now)
        if out:
            self._stats(now, len(out), 0, len(out), objective=0.0, kind="preempt")
        return out

    def _pricing(self) -> Pricing:
        """What this step prices rows with: nodes seen count in Bellows mode only."""
        nodes = self._nodes if self.goodput else None
        return Pricing(
            self._s, self._config, self._cluster, self._capacity, nodes,
            self._squeezed, self._ratios, self._need, every_exact=not self.shortcuts,
        )  # fmt: skip

    def _placed(self, gpus: Mapping[str, int], now: float, *, fill: bool) -> list[Decision]:
        """:meth:`_apply` with the migrations that pay (:meth:`Pricing.paying_migrations`);
        in a fill (``gpus``: the waiting jobs only) the running jobs keep their counts but
        may migrate too."""
        if self._nodes is None or not self.goodput:
            return self._apply(gpus, now=now)
        return self._apply(*self._pricing().with_migrations(gpus, now, fill=fill), now=now)

    def _apply(
        self, gpus: Mapping[str, int], moved: frozenset[str] = frozenset(), *, now: float
    ) -> list[Decision]:
        """The decisions that put the jobs on ``gpus`` (:func:`.applying.apply`)."""
        s, config, capacity, kept = self._s, self._config, self._capacity, self._batch_kept
        return applying.apply(s, config, capacity, gpus, now, moved=moved, batch_kept=kept)

    def _reject(self) -> list[Decision]:
        """No-queue mode: drop and forget every arrived job the round did not start."""
        dropped = admission.reject(self._s, self._config, self._capacity)
        for decision in dropped:
            self._forget(decision.job)
        return list(dropped)

    def _forget(self, name: str) -> None:
        """Drop everything kept by job ``name``, which neither runs nor waits any more (it
        finished or was rejected): its spec, its row, its progress and moves, its charge,
        what this round noted of it. Its name is then unknown, as if it never came."""
        self._s.forget(name)
        self._batch_kept.pop(name, None)
        self._squeezed.pop(name, None)

    # ------------------------------------------------------------------ bookkeeping
    def _advance(self, now: float) -> None:
        if now < self._now:
            raise ClockError(f"t={now!r} is before the last fact or step (t={self._now!r})")
        self._now = now

    def _may_fill(self, now: float) -> None:
        """Bellows mode: a fill is due now when jobs wait and some GPU is free."""
        if self._config.mode is not Mode.BELLOWS or self._fill_at is not None:
            return
        if self._s.arrived and self._s.in_use < self._capacity:
            self._fill_at = now

    def _check_fit(self, now: float) -> None:
        if self._s.in_use > self._capacity and self._preempt_at is None:
            self._preempt_at = now

    def tabulate(self, jobs: Iterable[JobSpec]) -> int:
        """Compute the rows of jobs expected to arrive, all at once, before they arrive (a
        caller that knows the jobs ahead: the simulator, a trace), in vectorized batches, the
        same values :meth:`arrive` would compute; returns how many new rows this computed
        (:meth:`~bellows.autoscaler.rows.Tables.tabulate`)."""
        return self._tables.tabulate(jobs)


def _check_capacity(gpus: int) -> int:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise SpecError("capacity", gpus, "an integer number of GPUs >= 0")
    return gpus
