"""Bellows mode over several GPU types (issue 39 item 2): one core per type, and a round that
gives each job its type by goodput, exactly.

:class:`TypedAutoscaler` keeps one :class:`~bellows.autoscaler.Autoscaler` per GPU type (its
GPUs, its Allreduce model); every job lives in one of them, as the one-type job
:meth:`bellows.jobs.JobSpec.on` makes of it there, and that core sizes it as it sizes any
job (admission, objective, restarts priced). Every ``delta_s`` while jobs run (with none
running, at the next arrival or finish) the typed round looks at every job on every type
whose GPUs hold one of its batches:

* per type, the job's row there (its goodput rows where it is charged efficiency, at its
  progress), as rates in samples per second (reference samples when charged), made
  comparable across types by dividing by the job's best one-GPU rate on any type;
* a running job's move (to another count or another type) priced as the core prices a
  restart (:func:`~bellows.autoscaler.pricing.priced`), a change of type being a restart;
* weighted by the configured objective (:func:`~bellows.autoscaler.objectives.
  objective_values`: ``remaining`` by the job's remaining time on its best GPU);

and :func:`bellows.optimizer.typed.allocate_typed` solves the whole (type, count) problem
exactly: running jobs keep a type (they are not preempted by it), waiting ones may get none.
A job whose type changes leaves its core (a :class:`Preempt` if it ran) and arrives in the
new type's core with the work it has left; the cores then step, and their starts and
rescales carry the type (``Start.gpu_type``). Between typed rounds an arriving job goes to
the type where it runs fastest on one GPU, and the cores fill free GPUs as they do.

``blind=True`` is the type-blind comparison (``bellows simulate --one-pool``): the same
cores, but no type is chosen for speed. A job goes to the type with the most free GPUs when
it arrives, and every ``delta_s`` the waiting jobs (in arrival order) go where the most GPUs
are free, less those already claimed by the waiting jobs before them at their smallest
count: a job runs wherever GPUs free up, as on one pool; a running job stays where it is.
Not one core over the 64 GPUs: a job cannot span types, so one pool's counts would not place.

Paper mode and the baseline keep one pool (the paper's premise): this class is Bellows
mode's. Sans I/O, as the core: facts in, decisions out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, Mode, restart_s
from bellows.autoscaler.core import Autoscaler
from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.objectives import objective_values
from bellows.autoscaler.pricing import priced
from bellows.autoscaler.progress import work_left
from bellows.autoscaler.rows import Tables
from bellows.autoscaler.straddle import FreeNodes
from bellows.jobs import Allocation, JobSpec, SpecError, least_gpus
from bellows.optimizer.typed import allocate_typed
from bellows.scaling import EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster

__all__ = ["TypedAutoscaler"]


class TypedAutoscaler:
    """One core per GPU type and the typed round (module docstring)."""

    def __init__(
        self,
        config: AutoscalerConfig,
        *,
        cluster: TypedCluster,
        engines: Engines | None = None,
        blind: bool = False,
    ) -> None:
        if config.mode is not Mode.BELLOWS:
            raise SpecError("mode", config.mode.value, "bellows: paper mode keeps one pool")
        self._config = config
        self._cluster = cluster
        self._blind = blind
        engines = Engines() if engines is None else engines
        self._cores = {
            t.name: Autoscaler(config, capacity=t.gpus, cluster=t.cluster, engines=engines)
            for t in cluster.types
        }
        self._tables = {t.name: Tables(config, t.cluster, engines) for t in cluster.types}
        self._specs: dict[str, JobSpec] = {}  # every job as it arrived (all its sections)
        self._fit: dict[str, dict[str, JobSpec]] = {}  # job -> its one-type spec per type
        self._home: dict[str, str] = {}  # job -> the type whose core holds it
        self._done: dict[str, float] = {}  # work a job did before it last changed type
        self._charged: dict[str, EfficiencyProfile] = {}
        self._next_round: float | None = None
        self._nodes: dict[str, FreeNodes] = {}  # per type, for the next step (see_nodes)
        self._rejects: list[Reject] = []  # jobs no type holds, said at the next step
        self.moves = 0  # running jobs the typed rounds moved to another type (restarts)

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
        fits = self._fits(job)
        if not fits:  # refused by name, as the core refuses a job it cannot hold
            names = ", ".join(self._cluster.names)
            reason = (f"no GPU type of the cluster ({names}) holds one of its batches: its "
                      f"sections are for {', '.join(job.type_names) or 'no type'}")  # fmt: skip
            self._rejects.append(Reject(job.name, reason))
            self._next_round = now
            return True
        home = self._blind_home(fits) if self._blind else self._fastest(job, fits)
        self._specs[job.name] = job
        self._fit[job.name] = fits
        self._home[job.name] = home
        self._done[job.name] = 0.0
        self._cores[home].arrive(fits[home], now)
        if self._next_round is None:
            self._next_round = now + self._config.delta_s
        return True

    def finish(self, name: str, now: float) -> bool:
        home = self._home.pop(name, None)
        if home is None:
            return False
        if self._next_round is None:
            self._next_round = now + self._config.delta_s
        self._specs.pop(name, None)
        self._fit.pop(name, None)
        self._done.pop(name, None)
        self._charged.pop(name, None)
        return self._cores[home].finish(name, now)

    def see_nodes(self, nodes: Mapping[str, FreeNodes]) -> None:
        """Where each type's GPUs sit now, for the next :meth:`step` only (as
        :meth:`Autoscaler.see_nodes`, per type)."""
        self._nodes = dict(nodes)

    def set_capacity(self, gpus: int, now: float, gpu_type: str = "") -> None:
        """Type ``gpu_type`` now has ``gpus`` GPUs (nodes of it lost or added): its core
        halts its newest jobs to fit, or fills the GPUs added, as the one-type core does;
        the typed rounds count the type's GPUs from here on (a job may move off a type that
        shrank at the next one)."""
        if gpu_type not in self._cores:
            raise SpecError("gpu_type", gpu_type, f"one of {', '.join(self._cores)}: whose "
                            "GPUs changed, on a cluster of several GPU types")  # fmt: skip
        self._cores[gpu_type].set_capacity(gpus, now)

    # ------------------------------------------------------------------ queries
    def next_round_at(self) -> float | None:
        due = [c.next_round_at() for c in self._cores.values()]
        due.append(self._next_round if self._specs else None)
        known = [d for d in due if d is not None]
        return min(known) if known else None

    def restart_s(self, name: str) -> float:
        return restart_s(self._specs[name], self._config)

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        out: dict[str, Allocation] = {}
        for core in self._cores.values():
            out.update(core.allocations)
        return out

    # ------------------------------------------------------------------ the step
    def step(self, now: float) -> list[Decision]:
        decisions: list[Decision] = list(self._rejects)
        self._rejects.clear()
        if self._next_round is not None and self._next_round <= now:
            decisions.extend(self._spread(now) if self._blind else self._route(now))
            # every delta_s while jobs run (their progress moves what a type is worth); with
            # none running, the next arrival or finish asks again (nothing else changes)
            self._next_round = now + self._config.delta_s if self.allocations else None
        for name, core in self._cores.items():
            due = core.next_round_at()
            if due is not None and due <= now:
                core.see_nodes(self._nodes.get(name))
                decisions.extend(_typed(d, name) for d in core.step(now))
        self._nodes = {}
        return decisions

    def _fits(self, job: JobSpec) -> dict[str, JobSpec]:
        """The job as a one-type job on each type whose GPUs hold one of its batches (every
        type, for a job without sections: the same spec everywhere)."""
        out = {}
        for gpu in self._cluster.types:
            on = job.on(gpu.name)
            least = None if on is None else least_gpus(on)
            if on is not None and least is not None and least <= gpu.gpus:
                out[gpu.name] = on
        return out

    def _fastest(self, job: JobSpec, fits: Mapping[str, JobSpec]) -> str:
        """The type where ``job`` runs fastest per GPU (goodput at its start; a rigid job at
        its one count)."""
        rates = {}
        for name, spec in fits.items():
            rate = self._rows(name, [spec], [job.name], {})[0]
            rates[name] = float((rate[1:] / np.arange(1, rate.size)).max(initial=0.0))
        return max(rates, key=lambda n: rates[n])

    def _blind_home(self, fits: Mapping[str, JobSpec]) -> str:
        """The type with the most free GPUs (the first on a tie), as a type-blind placement
        finds room."""
        free = {n: self._cores[n].capacity - self._cores[n].in_use for n in fits}
        return max(free, key=lambda n: free[n])

    def _rows(
        self, type_name: str, specs: list[JobSpec], names: list[str], done: Mapping[str, float]
    ) -> list[np.ndarray]:
        """Per job its rates on ``type_name`` by GPU count (reference samples per second
        where charged, at its progress; 0 where not allowed)."""
        profiles = [self._charged.get(n) for n in names]
        if any(p is not None for p in profiles):
            goodput = [(p if p is not None else _NEUTRAL, done.get(n, 0.0))
                       for p, n in zip(profiles, names, strict=True)]  # fmt: skip
            rows = self._tables[type_name].compute(specs, goodput)
        else:
            rows = self._tables[type_name].compute(specs)
        return [np.where(np.isfinite(r.values), r.rate, 0.0) for r in rows]

    def _route(self, now: float) -> list[Decision]:
        """The typed round: every job's type by goodput, exactly; moves applied."""
        held = self.allocations
        names = sorted(self._specs, key=lambda n: (n not in held, n))
        if not names:
            return []
        types = self._cluster.names
        width = max(s.k_max for s in self._specs.values())
        rates = np.zeros((len(names), len(types), width + 1))
        allowed = np.zeros(rates.shape, dtype=bool)
        done = {n: self._done_at(n, now) for n in names}
        for t, type_name in enumerate(types):
            fitting = [(i, self._fit[n].get(type_name)) for i, n in enumerate(names)]
            here = [(i, s) for i, s in fitting if s is not None]
            if not here:
                continue
            rows = self._rows(type_name, [s for _, s in here], [names[i] for i, _ in here], done)
            for (i, _), rate in zip(here, rows, strict=True):
                rates[i, t, : rate.size] = rate
                allowed[i, t, 1 : rate.size] = rate[1:] > 0
        values = self._values(names, rates, allowed, done, held)
        solved = allocate_typed(values, [self._cores[n].capacity for n in self._cluster.names])
        return self._rehome(names, solved.types, done, held, now)

    def _values(
        self,
        names: list[str],
        rates: np.ndarray,
        allowed: np.ndarray,
        done: Mapping[str, float],
        held: Mapping[str, Allocation],
    ) -> np.ndarray:
        """``[jobs, types, width+1]``: each (type, count) as the objective's term of its
        speedup over the job's best one-GPU rate, moves priced as restarts."""
        width = rates.shape[2]
        per_gpu = rates[:, :, 1:] / np.arange(1, width, dtype=np.float64)
        best_one = np.maximum(per_gpu.max(axis=(1, 2)), 1e-12)  # the best one GPU does
        left = work_left([self._specs[m].work for m in names], [done[m] for m in names])
        speed = np.where(allowed, rates / best_one[:, None, None], -np.inf)
        restart = np.array([restart_s(self._specs[m], self._config) for m in names])
        out = np.empty_like(speed)
        for t, type_name in enumerate(self._cluster.names):
            current = np.array([
                held[m].gpus if m in held and self._home[m] == type_name else -1 for m in names
            ])  # fmt: skip
            running = np.array([m in held for m in names])
            rows = speed[:, t, :].copy()
            if running.any():
                at = np.flatnonzero(running)
                rows[at] = priced(rows[at], rates[at, t, :], current=current[at],
                                  remaining=left[at], restart_s=restart[at],
                                  x1=best_one[at])  # fmt: skip
            out[:, t, :] = objective_values(rows, self._config.objective, left / best_one,
                                            exponent=self._config.remaining_exponent)  # fmt: skip
        waiting = np.array([m not in held for m in names])
        out[:, :, 0] = np.where(waiting, 0.0, -np.inf)[:, None]  # running jobs keep a type
        return out

    def _rehome(
        self,
        names: list[str],
        types: np.ndarray,
        done: Mapping[str, float],
        held: Mapping[str, Allocation],
        now: float,
    ) -> list[Decision]:
        """Move each job the typed round put on another type; the moves as decisions."""
        decisions: list[Decision] = []
        for name, t in zip(names, types.tolist(), strict=True):
            if t < 0:
                continue  # a waiting job the round left waiting: it waits where it is
            target = self._cluster.names[t]
            source = self._home[name]
            if target == source:
                continue
            if name in held:
                decisions.append(Preempt(name, f"moved from {source} to {target} GPUs"))
                self.moves += 1
            self._move(name, target, done[name], now)
        return decisions

    def _spread(self, now: float) -> list[Decision]:
        """The type-blind round: waiting jobs, first come first, to the most free GPUs."""
        held = self.allocations
        free = {n: c.capacity - c.in_use for n, c in self._cores.items()}
        waiting = [n for n in self._specs if n not in held]
        for name in waiting:
            fits = self._fit[name]
            target = max(fits, key=lambda n: free[n])
            free[target] -= least_gpus(fits[target]) or 1
            if target != self._home[name]:
                self._move(name, target, 0.0, now)
        return []

    def _move(self, name: str, target: str, done: float, now: float) -> None:
        """Job ``name`` leaves its core for ``target``'s with the work it has left."""
        spec = self._fit[name][target]
        self._done[name] = done
        self._cores[self._home[name]].finish(name, now)
        left = float(work_left(spec.work, done))
        self._cores[target].arrive(dataclasses.replace(spec, work=left), now)
        self._home[name] = target

    def _done_at(self, name: str, now: float) -> float:
        """Work job ``name`` has done by ``now``, as the cores estimate it."""
        core = self._cores[self._home[name]]
        before = self._done[name]
        return before + (core.estimated_done(name, now) if name in core.allocations else 0.0)


_NEUTRAL = EfficiencyProfile(1, 1e12, 0.0, 0.0)  # E = 1 everywhere: a row by throughput


def _typed(decision: Decision, type_name: str) -> Decision:
    """``decision`` carrying the GPU type of the core that took it."""
    if isinstance(decision, Start | Rescale):
        return dataclasses.replace(decision, gpu_type=type_name)
    return decision
