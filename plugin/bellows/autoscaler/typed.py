"""Bellows mode over several GPU types (issue 39 item 2): one core per type, and a round that
gives each job its type by goodput, exactly.

:class:`TypedAutoscaler` keeps one :class:`~bellows.autoscaler.Autoscaler` per GPU type (its
GPUs, its Allreduce model); every job lives in one of them, as the one-type job
:meth:`bellows.jobs.JobSpec.on` makes of it there, and that core sizes it as it sizes any
job (admission, objective, restarts priced). Every ``delta_s`` while jobs run (with none
running, at the next fact; ``delta_s`` 0: at facts only) the typed round looks at every job
on every type whose GPUs hold one of its batches:

* per type, the job's row there (its goodput rows where it is charged efficiency, at its
  progress), as rates in samples per second (reference samples when charged), made
  comparable across types by dividing by the job's best one-GPU rate on any type;
* a running job's move (to another count or another type) priced as the core prices a
  restart (:func:`~bellows.autoscaler.pricing.priced`, hysteresis and ``restart_growth``
  included: a change of type is a restart, and counts as one);
* weighted by the configured objective (:func:`~bellows.autoscaler.objectives.
  objective_values`: ``remaining`` by the job's remaining time on its best GPU);
* on an exact grid, each running job's current (type, count) kept on a tie, as the core
  keeps its count (:func:`~bellows.autoscaler.typed_round.graded`);

(these values: :mod:`bellows.autoscaler.typed_round`) and
:func:`bellows.optimizer.typed.allocate_typed` solves the whole (type, count) problem
exactly: running jobs keep a type (they are not preempted by it), waiting ones may get none.
A job whose type changes leaves its core (a :class:`Preempt` if it ran; its GPUs free in
that type's node view) and arrives in the new type's core whole, with its charge and the
progress it made carried, as a core carries a job a capacity drop halted: it resumes there
from that progress after the restart it pays, as the cluster and the simulator run it; the
cores then step, and their starts and rescales carry the type (``Start.gpu_type``). Between
typed rounds an arriving job goes to the type where it runs fastest on one GPU, and the
cores fill free GPUs as they do.

``blind=True`` is the type-blind comparison (``bellows simulate --one-pool``): the same
cores, but no type is chosen for speed. A job goes to the type with the most free GPUs when
it arrives, and every ``delta_s`` the waiting jobs (in arrival order) go where the most GPUs
are free, less those already claimed by the waiting jobs before them at their smallest
count: a job runs wherever GPUs free up, as on one pool; a running job stays where it is.
Not one core over the 64 GPUs: a job cannot span types, so one pool's counts would not place.
``assigned=True`` is a Kueue ClusterQueue's pool, whose flavors Kueue assigns: no type is
chosen either, but a waiting job goes where Kueue would admit it, the first type in the
cluster's order (the queue's flavors') with room for its smallest count, and a running job
Kueue put elsewhere is moved there in the cores without a restart (:meth:`relocate`).

**The live controller** drives it as it drives a core: the same facts, queries and properties
(summed or merged over the types, :attr:`TypedAutoscaler.capacities` per type). A job it finds
running is adopted on the type its pods run on (:meth:`TypedAutoscaler.adopt`'s
``gpu_type``); :meth:`TypedAutoscaler.gpu_type` says which type's core holds a job now. A job
that changed type is the whole job in its new core, which counts its progress; one Kueue
relocated (:meth:`relocate`) is, in its new core, the job with the work it had left, and
what it did before is added to that core's estimate and taken off what a revision
reports: the caller only ever speaks of the job as a whole.

Paper mode and the baseline keep one pool (the paper's premise): this class is Bellows
mode's. Sans I/O, as the core: facts in, decisions out.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from bellows.autoscaler.applying import check_adoptable
from bellows.autoscaler.config import AutoscalerConfig, Mode
from bellows.autoscaler.core import Autoscaler
from bellows.autoscaler.decisions import Decision, Keep, Preempt, Reject, Rescale
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.rows import Tables
from bellows.autoscaler.state import RoundStats
from bellows.autoscaler.straddle import FreeNodes
from bellows.autoscaler.typed_queries import TypedQueries
from bellows.autoscaler.typed_round import (
    fastest,
    first_with_room,
    fits_on,
    left_after,
    most_free,
    released,
    round_values,
    type_rates,
    with_type,
)
from bellows.jobs import Allocation, JobSpec, SpecError, least_gpus
from bellows.optimizer.typed import allocate_typed
from bellows.scaling import EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.placement_memory import ObservedStep

__all__ = ["TypedAutoscaler"]


class TypedAutoscaler(TypedQueries):
    """One core per GPU type and the typed round (module docstring; what it answers:
    :class:`~bellows.autoscaler.typed_queries.TypedQueries`)."""

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        cluster: TypedCluster,
        engines: Engines | None = None,
        blind: bool = False,
        assigned: bool = False,
    ) -> None:
        if config.mode is not Mode.BELLOWS:
            raise SpecError("mode", config.mode.value, "bellows: paper mode keeps one pool")
        self._config = config
        self._cluster = cluster
        self._blind = blind
        self.assigned = assigned  # the types are Kueue's to assign (module docstring)
        self._homing = first_with_room if assigned else most_free  # a waiting job's type
        self._engines = Engines() if engines is None else engines
        self._cores = {
            t.name: Autoscaler(config, capacity=t.gpus, cluster=t.cluster, engines=self._engines)
            for t in cluster.types
        }
        self._tables = {t.name: Tables(config, t.cluster, self._engines) for t in cluster.types}
        self._specs: dict[str, JobSpec] = {}  # every job as it arrived (all its sections)
        self._fit: dict[str, dict[str, JobSpec]] = {}  # job -> its one-type spec per type
        self._home: dict[str, str] = {}  # job -> the type whose core holds it
        self._done: dict[str, float] = {}  # work its core does not count (relocated before)
        self._restarts: dict[str, int] = {}  # job -> its rescales and changes of type
        self._order: dict[str, int] = {}  # job -> its rank in arrival order (queued)
        self._arrivals = 0  # jobs taken so far: the next one's rank
        self._charged: dict[str, EfficiencyProfile] = {}
        self._next_round: float | None = None
        self._nodes: dict[str, FreeNodes] = {}  # per type, for the next step (see_nodes)
        self._rejects: list[Reject] = []  # jobs no type holds, said at the next step
        self._note_keeps = False
        self._last_round: RoundStats | None = None
        # the cores' keeps of the latest step in which one ran a round (note_keeps; as
        # Autoscaler.keeps, the caller may clear it once it has read it)
        self.keeps: tuple[Keep, ...] = ()
        self.moves = 0  # running jobs the typed rounds moved to another type (restarts)

    def fork(self) -> TypedAutoscaler:
        """An independent typed core in this one's state (:meth:`Autoscaler.fork`: a what-if,
        the controller's start-up rehearsal): each core forked, the containers copied, the
        immutable specs shared."""
        twin = copy.copy(self)
        twin._cores = {name: core.fork() for name, core in self._cores.items()}
        twin._tables = {name: tables.fork() for name, tables in self._tables.items()}
        twin._specs = dict(self._specs)
        twin._fit = {name: dict(fits) for name, fits in self._fit.items()}
        twin._home = dict(self._home)
        twin._done = dict(self._done)
        twin._restarts = dict(self._restarts)
        twin._order = dict(self._order)
        twin._charged = dict(self._charged)
        twin._nodes = dict(self._nodes)
        twin._rejects = list(self._rejects)
        return twin

    # ------------------------------------------------------------------ facts in
    def charge(self, name: str, profile: EfficiencyProfile | None) -> None:
        """As :meth:`Autoscaler.charge`, for whichever core holds the job."""
        if profile is None:
            self._charged.pop(name, None)
        else:
            self._charged[name] = profile
        for core in self._cores.values():
            core.charge(name, profile)

    def tabulate(self, jobs: Iterable[JobSpec]) -> int:
        """Nothing up front: each type's rows are made as jobs arrive there."""
        return 0

    def arrive(self, job: JobSpec, now: float) -> bool:
        """Job ``job`` (with its sections per type) arrived; it goes to one type's core."""
        if job.name in self._specs:
            return False
        fits = fits_on(self._cluster, job)
        if not fits:  # refused by name, as the core refuses a job it cannot hold
            names = ", ".join(self._cluster.names)
            reason = (f"no GPU type of the cluster ({names}) holds one of its batches: its "
                      f"sections are for {', '.join(job.type_names) or 'no type'}")  # fmt: skip
            self._rejects.append(Reject(job.name, reason))
            self._forget(job.name)  # its charge, if it was given one
            self._next_round = now
            return True
        home = (self._homing(self._free(), fits) if self._blind or self.assigned
                else fastest(self._tables, self._charged, job.name, fits))  # fmt: skip
        self._cores[home].arrive(fits[home], now)
        self._took(job, fits, home, now)
        return True

    def adopt(
        self,
        job: JobSpec,
        allocation: Allocation,
        now: float,
        *,
        done: float = 0.0,
        since: float | None = None,
        gpu_type: str,
    ) -> bool:
        """Take over a job found running at ``allocation`` on GPUs of type ``gpu_type`` (the
        type of the nodes its pods run on): :meth:`Autoscaler.adopt` by that type's core, of
        the job as a one-type job there (``done`` samples as of ``since``). The next typed
        round may move it, as any running job. Returns ``False`` if the job was already
        known. :class:`SpecError` (nothing changed) for a type the cluster has not, one the
        job has no section for, or an allocation its bounds there rule out."""
        if gpu_type not in self._cores:
            raise SpecError("gpu_type", gpu_type, f"one of {', '.join(self._cores)}: the type "
                            f"job {job.name} runs on")  # fmt: skip
        fits = fits_on(self._cluster, job, keep=gpu_type)
        if gpu_type not in fits:
            sections = ", ".join(job.type_names) or "no type"
            raise SpecError("gpu_type", gpu_type, f"a type job {job.name} runs on: it has "
                            f"sections for {sections}")  # fmt: skip
        if job.name in self._specs:
            return False
        if not self._cores[gpu_type].adopt(fits[gpu_type], allocation, now, done=done,
                                           since=since):  # fmt: skip
            return False
        self._took(job, fits, gpu_type, now)
        return True

    def revise(
        self, job: JobSpec, now: float, *, done: float | None = None, since: float | None = None
    ) -> bool:
        """As :meth:`Autoscaler.revise`, for the core that holds the job, which keeps it: its
        one-type spec there, its work less what it did before its last change of type, and
        ``done`` (its samples reported, as of ``since``) less that too. The next typed round
        decides with the revised spec on every type. Returns ``False`` when the job is
        unknown. :class:`SpecError` (nothing changed) for a spec with no section for the
        type it is on, or one the JSA cannot tabulate."""
        home = self._home.get(job.name)
        if home is None:
            return False
        fits = fits_on(self._cluster, job, keep=home)
        if home not in fits:
            sections = ", ".join(job.type_names) or "no type"
            raise SpecError("types", sections, f"a section for {home}, the GPU type job "
                            f"{job.name} is on")  # fmt: skip
        before = self._done[job.name]
        there = left_after(fits[home], before)
        reported = None if done is None else max(0.0, done - before)
        if not self._cores[home].revise(there, now, done=reported, since=since):
            return False
        self._specs[job.name] = job
        self._fit[job.name] = fits
        if self._next_round is None:
            self._next_round = now + self._config.delta_s
        return True

    def observe_step(self, name: str, now: float, step: ObservedStep) -> bool:
        """:meth:`Autoscaler.observe_step` of the core that holds job ``name`` (``False``
        for a job unknown)."""
        home = self._home.get(name)
        return False if home is None else self._cores[home].observe_step(name, now, step)

    def finish(self, name: str, now: float) -> bool:
        """As :meth:`Autoscaler.finish`: the job leaves its core, and is forgotten."""
        home = self._home.get(name)
        if home is None:
            return False
        self._cores[home].finish(name, now)
        self._forget(name)
        if self._next_round is None:
            self._next_round = now + self._config.delta_s
        return True

    def see_nodes(self, nodes: Mapping[str, FreeNodes] | None) -> None:
        """Where each type's GPUs sit now, for the next :meth:`step` only (as
        :meth:`Autoscaler.see_nodes`, per type; a type left out, or ``None``: every count
        there priced on the fewest nodes)."""
        self._nodes = {} if nodes is None else dict(nodes)

    def set_capacity(self, gpus: int, now: float, gpu_type: str = "") -> None:
        """Type ``gpu_type`` now has ``gpus`` GPUs (nodes of it lost or added): its core
        halts its newest jobs to fit, or fills the GPUs added, as the one-type core does;
        the typed rounds count the type's GPUs from here on (a job may move off a type that
        shrank at the next one)."""
        if gpu_type not in self._cores:
            raise SpecError("gpu_type", gpu_type, f"one of {', '.join(self._cores)}: whose "
                            "GPUs changed, on a cluster of several GPU types")  # fmt: skip
        self._cores[gpu_type].set_capacity(gpus, now)

    # ------------------------------------------------------------------ the step
    def step(self, now: float) -> list[Decision]:
        """Do what is due at ``now``: the typed round (its moves), then each core's step on
        its type; decisions taken as applied, a core's carrying its type."""
        decisions: list[Decision] = list(self._rejects)
        self._rejects.clear()
        if self._next_round is not None and self._next_round <= now:
            spread = self._blind or self.assigned  # no type chosen for speed
            moved = self._spread(now) if spread else self._route(now)  # Preempts
            decisions.extend(moved)
            self._next_round = None
            self._nodes = {t: released(v, [d.job for d in moved]) for t, v in self._nodes.items()}
        ran: list[RoundStats] = []
        keeps: list[Keep] = []
        for name, core in self._cores.items():
            due = core.next_round_at()
            if due is not None and due <= now:
                before, core.keeps = core.last_round, ()
                core.see_nodes(self._nodes.get(name))
                stepped = core.step(now)
                decisions.extend(with_type(d, name) for d in stepped)
                for d in stepped:
                    if isinstance(d, Rescale):  # a restart, as the core counts them
                        self._restarts[d.job] += 1
                    elif isinstance(d, Reject):
                        self._forget(d.job)  # no-queue mode: the core forgot it
                if core.last_round is not before and core.last_round is not None:
                    ran.append(core.last_round)
                keeps.extend(core.keeps)
        if ran:
            rounds = [r for r in ran if r.kind == "round"]
            self._last_round = (rounds or ran)[-1]
            if rounds:
                self.keeps = tuple(keeps)
        self._nodes = {}
        # every delta_s while jobs run (their progress moves what a type is worth), those the
        # cores started just now included; with none running, the next fact asks again
        # (nothing else changes); delta_s 0: at facts only, as the core's rounds
        if self._next_round is None and self._config.delta_s > 0 and self.allocations:
            self._next_round = now + self._config.delta_s
        return decisions

    def _took(self, job: JobSpec, fits: dict[str, JobSpec], home: str, now: float) -> None:
        """Job ``job``, now in ``home``'s core, known: its one-type specs, its rank."""
        self._specs[job.name] = job
        self._fit[job.name] = fits
        self._home[job.name] = home
        self._done[job.name] = 0.0
        self._restarts[job.name] = 0
        self._order[job.name] = self._arrivals
        self._arrivals += 1
        if self._next_round is None:
            self._next_round = now + self._config.delta_s

    def _forget(self, name: str) -> None:
        """Job ``name`` neither runs nor waits any more: everything kept by its name goes,
        its charge on every core too (only its home's core forgets it by itself)."""
        self._specs.pop(name, None)
        self._fit.pop(name, None)
        self._home.pop(name, None)
        self._done.pop(name, None)
        self._restarts.pop(name, None)
        self._order.pop(name, None)
        if self._charged.pop(name, None) is not None:
            for core in self._cores.values():
                core.charge(name, None)

    def _free(self) -> dict[str, int]:
        """Each type's GPUs no running job holds."""
        return {n: c.capacity - c.in_use for n, c in self._cores.items()}

    def relocate(self, name: str, gpu_type: str, now: float) -> bool:
        """Running job ``name`` is found on ``gpu_type`` (Kueue admitted it to another
        flavor than its core expected): it moves to that type's core at its allocation,
        with the work it has done, without a restart (it did not move). Whether it moved
        (``False``: unknown, not running, already there, or no section for the type)."""
        home = self._home.get(name)
        fits = self._fit.get(name, {})
        if home is None or home == gpu_type or gpu_type not in fits:
            return False
        allocation = self._cores[home].allocations.get(name)
        if allocation is None:
            return False
        done = self._done_at(name, now)
        there = left_after(fits[gpu_type], done)
        check_adoptable(there, allocation)  # SpecError, nothing changed
        self._cores[home].finish(name, now)
        if name in self._charged:
            self._cores[gpu_type].charge(name, self._charged[name])
        self._cores[gpu_type].adopt(there, allocation, now)  # nothing done there: no pause
        self._done[name], self._home[name] = done, gpu_type
        return True

    def _route(self, now: float) -> list[Decision]:
        """The typed round: every job's type by goodput, exactly (:mod:`.typed_round`);
        moves applied."""
        held = self.allocations
        names = sorted(self._specs, key=lambda n: (n not in held, n))
        if not names:
            return []
        width = max(s.k_max for s in self._specs.values())
        done = {n: self._done_at(n, now) for n in names}
        fits = [self._fit[n] for n in names]
        rates, allowed = type_rates(self._tables, self._charged, fits, names, done=done,
                                    width=width)  # fmt: skip
        values = round_values(
            self._config, self._cluster.names, jobs=[self._specs[n] for n in names],
            homes=[self._home[n] for n in names], rates=rates, allowed=allowed,
            held=[held[n].gpus if n in held else 0 for n in names],
            done=[done[n] for n in names], restarts=[self._restarts[n] for n in names],
        )  # fmt: skip
        solved = allocate_typed(values, [self._cores[n].capacity for n in self._cluster.names])
        return self._rehome(names, solved.types.tolist(), done, held, now)

    def _rehome(
        self, names: list[str], types: list[int], done: Mapping[str, float],
        held: Mapping[str, Allocation], now: float,
    ) -> list[Decision]:  # fmt: skip
        """Move each job the typed round put on another type; the moves as decisions."""
        decisions: list[Decision] = []
        for name, t in zip(names, types, strict=True):
            source = self._home[name]
            target = source if t < 0 else self._cluster.names[t]  # <0: left waiting there
            if target == source:
                continue
            if name in held:
                decisions.append(Preempt(name, f"moved from {source} to {target} GPUs"))
                self.moves += 1
                self._restarts[name] += 1
            self._move(name, target, done[name], now)
        return decisions

    def _spread(self, now: float) -> list[Decision]:
        """The round that chooses no type: waiting jobs, first come first, where the most
        GPUs are free (type-blind), or the first type with room (``assigned``)."""
        held = self.allocations
        free = self._free()
        for name in [n for n in self._specs if n not in held]:  # waiting, first come first
            fits = self._fit[name]
            target = self._homing(free, fits)
            free[target] -= least_gpus(fits[target]) or 1
            if target != self._home[name]:
                self._move(name, target, self._done_at(name, now), now)
        return []

    def _move(self, name: str, target: str, done: float, now: float) -> None:
        """Job ``name`` leaves its core for ``target``'s, whole, with its charge (the core it
        leaves forgets it: one it left before had too) and the progress ``done`` it made,
        carried there as a core carries a job a capacity drop halted: that core resumes it
        from ``done``, after the restart it pays (the halt and the start on the new type are
        one restart, as the cluster and the simulator charge it), at the efficiency of that
        progress. Not a fresh job there with the work it had left: that core would count it
        progressing from the start, restart unpaid, and price its goodput at no progress;
        only its reports (the live controller's) would tell it otherwise."""
        self._cores[self._home[name]].finish(name, now)
        core = self._cores[target]
        if name in self._charged:
            core.charge(name, self._charged[name])
        whole = self._fit[name][target]
        core.arrive(whole, now)
        carried = whole.work - float(left_after(whole, done).work)
        if carried > 0.0:
            core.carry(name, carried)
        self._done[name] = 0.0  # its core counts all of it from here
        self._home[name] = target

    def _done_at(self, name: str, now: float) -> float:
        """Work job ``name`` has done by ``now``, as the cores estimate it (a waiting job's:
        what its core carries for it)."""
        core = self._cores[self._home[name]]
        ran = core.estimated_done(name, now) if name in core.allocations else core.carried(name)
        return self._done[name] + ran
