"""What Bellows reads back of what it wrote on a tenant's job, checked before anyone acts on it.

The journal annotations (``bellows.io/allocation``, ``target``, ``phase``, …) live on the
job, where its owner can write too. Bellows keeps them there because they must change in the
same write as the spec they describe (:mod:`bellows.kube.journal`). So whatever it reads back
is data, never an order: a value is taken only when it is one a correct journal of *this* job
could hold now. That is:

* an allocation or target the job's own bounds allow (``max-gpus``, the batch range, the
  per-GPU batch; for a rigid job, its own size), as the elastic policy or the fixed-batch one
  (a Kueue job taken at the size Kueue admitted) would give it;
* no more GPUs than the cluster has (``capacity``, when known);
* for a job found running, the GPUs its replicas really ask for now (the spec is the truth:
  an allocation that disagrees is stale or forged).

A value that fails is *distrusted*: it reads as absent, and the caller says so on the job
(a Warning Event, ``JournalDistrusted``) and counts it (``bellows_journal_distrusted``). The
worst a tenant gets by writing these annotations is what a correct annotation on its own job
could give it. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Final

from bellows.inputs import shown
from bellows.jobs import Allocation, JobSpec, is_feasible
from bellows.kube import keys
from bellows.kube.journal import Journal, Phase
from bellows.kube.kinds import JobView

__all__ = ["DISTRUSTED_EVENT", "Distrusted", "allowed", "checked_journal"]

DISTRUSTED_EVENT: Final = "JournalDistrusted"


@dataclass(frozen=True)
class Distrusted:
    """One journal value Bellows will not act on: the annotation, its value, and why."""

    key: str
    value: str
    why: str

    def message(self) -> str:
        return (
            f"{self.key}={shown(self.value)} is ignored: {self.why}; Bellows decides the job "
            "afresh (a value Bellows did not write, or one the job's settings no longer allow)"
        )


def allowed(spec: JobSpec, pair: tuple[int, int]) -> bool:
    """Whether ``(gpus, batch)`` is a size Bellows could have given ``spec`` (the elastic
    policy's, or the owner's batch on other GPUs as a Kueue admission is taken)."""
    allocation = Allocation(*pair)
    return is_feasible(spec, allocation) or is_feasible(spec, allocation, fixed_batch=True)


def checked_journal(
    journal: Journal,
    spec: JobSpec,
    view: JobView,
    *,
    capacity: int = 0,
) -> tuple[Journal, tuple[Distrusted, ...]]:
    """``journal`` with every value dropped that ``spec`` (the job's settings as read, sized
    for the cluster), ``capacity`` (GPUs, 0: unknown) or the job's own replicas (``view``)
    rule out; and what was dropped."""
    notes = view.annotations
    dropped: list[Distrusted] = []

    def check(key: str, pair: tuple[int, int] | None, *, replicas: bool) -> bool:
        problem = _problem(pair, spec, view, capacity, replicas=replicas)
        if problem is not None:
            dropped.append(Distrusted(key, notes.get(key, ""), problem))
        return problem is None

    running = journal.phase is Phase.DONE and not view.suspended
    if not check(keys.ALLOCATION, journal.allocation, replicas=running):
        journal = dataclasses.replace(journal, allocation=None)
    resuming = journal.phase in (Phase.SUSPENDING, Phase.PATCHED)
    if resuming and not check(keys.TARGET, journal.target, replicas=False):
        journal = dataclasses.replace(journal, target=None)
    return journal, tuple(dropped)


def _problem(
    pair: tuple[int, int] | None,
    spec: JobSpec,
    view: JobView,
    capacity: int,
    *,
    replicas: bool,
) -> str | None:
    if pair is None:
        return None
    gpus, batch = pair
    if capacity > 0 and gpus > capacity:
        return f"{gpus} GPUs is more than the cluster's {capacity}"
    if not allowed(spec, pair):
        return f"{gpus} GPUs at batch {batch} is outside the job's settings ({_bounds(spec)})"
    if replicas and gpus != view.gpus:
        return f"the job's replicas ask for {view.gpus} GPUs, not {gpus}"
    return None


def _bounds(spec: JobSpec) -> str:
    if not spec.elastic:
        return f"rigid at {spec.gpus} GPUs, batch {spec.batch_size}"
    return (
        f"at most {spec.k_max} GPUs, batch {spec.b_min}..{spec.b_max}, at most {spec.m_max} per GPU"
    )
