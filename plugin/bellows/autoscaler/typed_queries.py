"""What a :class:`~bellows.autoscaler.typed.TypedAutoscaler` answers (issue 39): its queries
and properties, over its cores (one per GPU type), as the live controller reads a core's.

Summed or merged over the types (:attr:`TypedQueries.capacities` per type); a job is spoken
of as a whole: its core counts the progress of a job that moved there, and the work a job
Kueue relocated did before is added to its core's estimate. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from bellows.autoscaler.config import AutoscalerConfig, restart_s
from bellows.autoscaler.core import Autoscaler
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.state import RoundStats
from bellows.jobs import Allocation, JobSpec
from bellows.scaling import EfficiencyProfile
from bellows.scaling.gpu_types import TypedCluster

__all__ = ["TypedQueries"]


class TypedQueries:
    """The queries of a typed core; its state is :class:`~bellows.autoscaler.typed.
    TypedAutoscaler`'s, set there."""

    _config: AutoscalerConfig
    _cluster: TypedCluster
    _engines: Engines
    _cores: dict[str, Autoscaler]
    _specs: dict[str, JobSpec]
    _home: dict[str, str]
    _done: dict[str, float]
    _order: dict[str, int]
    _charged: dict[str, EfficiencyProfile]
    _next_round: float | None
    _note_keeps: bool
    _last_round: RoundStats | None

    def next_round_at(self) -> float | None:
        due = [c.next_round_at() for c in self._cores.values()]
        due.append(self._next_round if self._specs else None)
        known = [d for d in due if d is not None]
        return min(known) if known else None

    def restart_s(self, name: str) -> float:
        return restart_s(self._specs[name], self._config)

    @property
    def config(self) -> AutoscalerConfig:
        return self._config

    @property
    def engines(self) -> Engines:
        """The engines every core runs on (a fork shares them)."""
        return self._engines

    @property
    def cluster(self) -> TypedCluster:
        """The GPU types, as the cluster was made (:attr:`capacities`: their GPUs now)."""
        return self._cluster

    @property
    def goodput(self) -> bool:
        """Whether :meth:`charge` takes effect (:attr:`Autoscaler.goodput`: the cores')."""
        return next(iter(self._cores.values())).goodput

    @property
    def note_keeps(self) -> bool:
        """Whether each core's rounds list the running jobs they kept, and why (``keeps``;
        :attr:`Autoscaler.note_keeps`): set on every core, and so on a fork's."""
        return self._note_keeps

    @note_keeps.setter
    def note_keeps(self, on: bool) -> None:
        self._note_keeps = on
        for core in self._cores.values():
            core.note_keeps = on

    @property
    def last_round(self) -> RoundStats | None:
        """What the cores ran in the latest step in which one ran something
        (:attr:`Autoscaler.last_round`): the last round of them in type order, else the last
        fill or halt; ``None`` before any. The same object until a core runs another."""
        return self._last_round

    @property
    def capacity(self) -> int:
        """GPUs of every type."""
        return sum(core.capacity for core in self._cores.values())

    @property
    def capacities(self) -> Mapping[str, int]:
        """GPUs per type now (its core's capacity), in the cluster's order."""
        return MappingProxyType({name: core.capacity for name, core in self._cores.items()})

    @property
    def in_use(self) -> int:
        """GPUs the running jobs hold, on every type."""
        return sum(core.in_use for core in self._cores.values())

    @property
    def allocations(self) -> Mapping[str, Allocation]:
        """Running jobs and their allocations, type by type (:meth:`gpu_type`: which)."""
        out: dict[str, Allocation] = {}
        for core in self._cores.values():
            out.update(core.allocations)
        return MappingProxyType(out)

    @property
    def queued(self) -> tuple[str, ...]:
        """Jobs waiting for GPUs on any type, in arrival order (adoption counts as one)."""
        waiting = [name for core in self._cores.values() for name in core.queued]
        return tuple(sorted(waiting, key=self._order.__getitem__))

    def gpu_type(self, name: str) -> str:
        """The type whose core holds job ``name`` (it runs or waits there); ``KeyError`` for
        a job unknown."""
        return self._home[name]

    def job(self, name: str) -> JobSpec:
        """Job ``name`` as it arrived or was last revised: every type's section."""
        return self._specs[name]

    def charged(self, name: str) -> EfficiencyProfile | None:
        """The efficiency job ``name`` is decided by (``None``: by throughput)."""
        home = self._home.get(name)
        if home is not None:
            return self._cores[home].charged(name)
        return self._charged.get(name) if self.goodput else None

    def estimated_done(self, name: str, now: float) -> float:
        """Samples running job ``name`` has processed by ``now``, as the core it runs on
        estimates (with, for a job Kueue relocated, what it did before)."""
        return self._done[name] + self._cores[self._home[name]].estimated_done(name, now)
