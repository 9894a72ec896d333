"""The controller's record of what it did to each job, in the simulator's metric terms.

Every decision applied and every completion seen is written here with the controller's
clock, so a live run yields the same :class:`bellows.sim.metrics.JobRecord` rows (and so the
same ``summary.json``) as a simulated one; that is what ``bellows demo`` compares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from bellows.autoscaler import Decision, Preempt, Reject, Rescale, Start
from bellows.jobs import JobSpec
from bellows.scaling import ClusterProfile, single_gpu_throughput
from bellows.service.observing import ControllerObserver
from bellows.sim.metrics import JobRecord, Segment

__all__ = ["Ledger"]


@dataclass
class _Entry:
    spec: JobSpec
    arrival_s: float
    start_s: float | None = None
    finish_s: float | None = None
    rejected: bool = False
    held: tuple[float, int, int] | None = None  # (since, gpus, batch) while running
    segments: list[Segment] = field(default_factory=list)
    rescales: int = 0
    preemptions: int = 0


class Ledger(ControllerObserver):
    """Job arrivals, decisions and completions over the controller's clock (seconds): the
    controller's observer (``observer=``) in ``bellows demo``."""

    def __init__(self, cluster: ClusterProfile) -> None:
        self._cluster = cluster
        self._jobs: dict[str, _Entry] = {}
        self._admitted_first: set[str] = set()
        # the core's efficiency of a job (set once the controller is made): which jobs a
        # decision that took effect was made by goodput for
        self.charged: Callable[[str], object] | None = None
        self._by_goodput: set[str] = set()

    @property
    def decided_by_goodput(self) -> int:
        """How many jobs had a decision take effect while the core decided them by goodput
        (an efficiency from their profile, or learned from their reports)."""
        return len(self._by_goodput)

    def arrived(self, spec: JobSpec, at: float) -> None:
        self._jobs.setdefault(spec.name, _Entry(spec, at))

    def kueue_admitted_first(self, job: str) -> None:
        """Kueue admitted ``job`` at its owner's size before Bellows held or sized it (Kueue
        admits within milliseconds of a job's creation or of freed quota). The simulator
        does not model these admissions, so ``bellows demo --kueue`` counts them."""
        self._admitted_first.add(job)

    @property
    def admitted_first(self) -> int:
        """How many jobs :meth:`kueue_admitted_first` noted."""
        return len(self._admitted_first)

    def took_effect(self, decision: Decision, at: float) -> None:
        entry = self._jobs.get(decision.job)
        if entry is None:
            return
        if self.charged is not None and self.charged(decision.job) is not None:
            self._by_goodput.add(decision.job)
        if isinstance(decision, Start | Rescale):
            self._release(entry, at)
            if entry.start_s is None:
                entry.start_s = at
            if isinstance(decision, Rescale):
                entry.rescales += 1
            entry.held = (at, decision.gpus, decision.batch)
        elif isinstance(decision, Preempt):
            self._release(entry, at)
            entry.preemptions += 1
        elif isinstance(decision, Reject):
            entry.rejected = True

    def finished(self, job: str, at: float) -> None:
        entry = self._jobs.get(job)
        if entry is None or entry.finish_s is not None:
            return
        self._release(entry, at)
        if entry.start_s is not None:
            entry.finish_s = at

    def records(self) -> list[JobRecord]:
        """One record per job seen, in arrival order (jobs still running have no finish)."""
        out: list[JobRecord] = []
        for name, e in sorted(self._jobs.items(), key=lambda item: item[1].arrival_s):
            x1 = single_gpu_throughput(e.spec, self._cluster)
            out.append(
                JobRecord(
                    name=name,
                    category=e.spec.category,
                    model="",
                    arrival_s=e.arrival_s,
                    single_gpu_s=e.spec.work / x1,
                    start_s=e.start_s,
                    finish_s=e.finish_s,
                    rejected=e.rejected,
                    segments=tuple(e.segments),
                    rescales=e.rescales,
                    preemptions=e.preemptions,
                )
            )
        return out

    @staticmethod
    def _release(entry: _Entry, at: float) -> None:
        if entry.held is not None:
            since, gpus, batch = entry.held
            entry.segments.append(Segment(since, max(at, since), gpus, batch))
            entry.held = None
