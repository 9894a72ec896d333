"""What the pools report and answer together: each pool's counts added up for the one
cluster-wide observer (:class:`Totals`, through each pool's :class:`PoolObserver`), and the
pools' cores read as one (:class:`Cores`: what the progress loop reads; each job is in
one)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from bellows.autoscaler import AnyAutoscaler, Decision, TypedAutoscaler
from bellows.jobs import Allocation, JobSpec
from bellows.kube import Outcome
from bellows.scaling import EfficiencyProfile
from bellows.service.controller import Controller
from bellows.service.observing import ControllerObserver

__all__ = ["Cores", "Pool", "PoolObserver", "Totals", "gpu_type_of"]

Pool = str | None  # a ClusterQueue's name; None: the default pool


class Totals:
    """Adds up what each pool's controller reports, for the one cluster-wide observer."""

    def __init__(self, observer: ControllerObserver) -> None:
        self.observer = observer
        self._rounds: dict[Pool, tuple[int, int, int, int]] = {}
        self._invalid: dict[Pool, int] = {}
        self._skipped: dict[tuple[Pool, str], int] = {}

    def round_done(
        self, pool: Pool, seconds: float, decisions: Sequence[Decision], state: tuple[int, ...]
    ) -> None:
        running, queued, allocated, capacity = state
        self._rounds[pool] = (running, queued, allocated, capacity)
        totals = [sum(row[i] for row in self._rounds.values()) for i in range(4)]
        self.observer.round_done(
            seconds,
            decisions,
            running=totals[0],
            queued=totals[1],
            gpus_allocated=totals[2],
            capacity=totals[3],
        )

    def invalid(self, pool: Pool, count: int) -> None:
        self._invalid[pool] = count
        self.observer.invalid_jobs(sum(self._invalid.values()))

    def skipped(self, pool: Pool, reason: str, count: int) -> None:
        self._skipped[pool, reason] = count
        total = sum(n for (_, r), n in self._skipped.items() if r == reason)
        self.observer.skipped_jobs(reason, total)

    def drop(self, pool: Pool) -> None:
        """A pool is gone: its jobs no longer count."""
        self._rounds.pop(pool, None)
        if self._invalid.pop(pool, None):
            self.observer.invalid_jobs(sum(self._invalid.values()))
        for key in [k for k in self._skipped if k[0] == pool]:
            if self._skipped.pop(key):
                reason = key[1]
                total = sum(n for (_, r), n in self._skipped.items() if r == reason)
                self.observer.skipped_jobs(reason, total)


class PoolObserver(ControllerObserver):
    def __init__(self, totals: Totals, pool: Pool) -> None:
        self._totals = totals
        self._pool = pool

    def round_done(
        self,
        seconds: float,
        decisions: Sequence[Decision],
        *,
        running: int,
        queued: int,
        gpus_allocated: int,
        capacity: int,
    ) -> None:
        state = (running, queued, gpus_allocated, capacity)
        self._totals.round_done(self._pool, seconds, decisions, state)

    def applied(self, decision: Decision, outcome: Outcome) -> None:
        self._totals.observer.applied(decision, outcome)

    def invalid_jobs(self, count: int) -> None:
        self._totals.invalid(self._pool, count)

    def skipped_jobs(self, reason: str, count: int) -> None:
        self._totals.skipped(self._pool, reason, count)

    def started(self, step: str, seconds: float) -> None:
        self._totals.observer.started(step, seconds)

    def arrived(self, spec: JobSpec, at: float) -> None:
        self._totals.observer.arrived(spec, at)

    def took_effect(self, decision: Decision, at: float) -> None:
        self._totals.observer.took_effect(decision, at)

    def finished(self, job: str, at: float) -> None:
        self._totals.observer.finished(job, at)

    def kueue_admitted_first(self, job: str) -> None:
        self._totals.observer.kueue_admitted_first(job)


class Cores:
    """The pools' cores read as one (what the progress loop reads: each job is in one)."""

    def __init__(self, controllers: Callable[[], Sequence[Controller]]) -> None:
        self._controllers = controllers

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        out: dict[str, Allocation] = {}
        for controller in self._controllers():
            out.update(controller.autoscaler.allocations)
        return out

    @property
    def queued(self) -> tuple[str, ...]:
        return tuple(n for c in self._controllers() for n in c.autoscaler.queued)

    def _core(self, name: str) -> AnyAutoscaler:
        for controller in self._controllers():
            core = controller.autoscaler
            if name in core.allocations or name in core.queued:
                return core
        raise KeyError(name)

    def job(self, name: str) -> JobSpec:
        return self._core(name).job(name)

    def gpu_type(self, name: str) -> str:
        """The GPU type job ``name`` is on ("": its pool has one type)."""
        return gpu_type_of(self._core(name), name)

    def estimated_done(self, name: str, now: float) -> float:
        return self._core(name).estimated_done(name, now)

    @property
    def goodput(self) -> bool:
        """Whether the pools decide jobs by goodput (they share the controller's mode)."""
        return all(c.autoscaler.goodput for c in self._controllers())

    def charged(self, name: str) -> EfficiencyProfile | None:
        return self._core(name).charged(name)


def gpu_type_of(core: object, name: str) -> str:
    """The GPU type job ``name`` of ``core`` is on, where its core holds several types
    (a :class:`~bellows.autoscaler.TypedAutoscaler`, or the pools' cores); "" otherwise."""
    if isinstance(core, TypedAutoscaler | Cores):
        return core.gpu_type(name)
    return ""
