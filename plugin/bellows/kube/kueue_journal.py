"""The pure planners of a Kueue-managed job: sized through its Workload, never by ``suspend``.

Kueue owns ``spec.runPolicy.suspend`` of a job that names a LocalQueue: it un-suspends the
job when its Workload is admitted and suspends it when it is not. Writing ``suspend``
would start a fight that Kueue wins at once. So Bellows halts such a job by setting its
Workload's ``spec.active: false`` (Kueue evicts it: suspends the job and, once the
operator has stopped the pods, releases the quota), and resizes it only while it is
suspended and its Workload holds no ``QuotaReserved`` (Kueue then updates the Workload to
match the job). To start or rescale to ``(k, b)``:

1. journal on the job: ``target``, phase ``suspending`` (and ``suspended-at`` when it runs);
2. the Workload, when active: ``spec.active: false``;
3. wait until the job is suspended and halted and the Workload holds no reservation (a
   queued job, suspended and never admitted, is there already);
4. patch replicas and the batch env on the job, phase ``patched`` (never ``suspend``);
5. an MPIJob: delete its stale launcher, as :func:`bellows.kube.journal.plan_scale` does;
6. once Kueue has updated the Workload's podSets to the job's replicas (and any eviction
   of it has ended): ``spec.active: true``;
7. journal: phase ``done``, the allocation, the status line and the progress.

A hold, rejection or preemption writes the journal (phase ``queued``, ``rejected`` or
``preempted``) and then sets the Workload inactive.

As :mod:`bellows.kube.journal`, :func:`plan_kueue_scale` and :func:`plan_kueue_halt` take
the objects as read (the job and its Workload) and return the one next step; every write
carries the ``resourceVersion`` of the object it was computed from. The journal lives on
the job, so a controller killed between any two steps is followed by one that re-plans
from what it reads and reaches the same end. A Workload may be missing (Kueue has not
created it yet, or is recreating it after a deletion): the plan then waits
(:class:`AwaitWorkload`), except that a suspended, halted job may still be patched (step
4). A recreated Workload is active by default: while the journal says ``suspending``, or
``patched`` with work left before step 6, the planner deactivates it again.

Journal ``done`` at the target is the end, whatever Kueue does next: the job counts as
running at its allocation while it waits for Kueue to admit it, and a Workload someone
else deactivated afterwards is left so. Step 6 waits for the podSets' counts only: Kueue
updates a pod template changed with them (the batch env) in the same pass, and a Workload
admitted before that would be evicted, updated and admitted again
(``ensureOneWorkload``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bellows.kube import keys
from bellows.kube.journal import (
    Blocked,
    DeleteLauncher,
    Journal,
    Nothing,
    Phase,
    SendPatch,
    _body,
    _launcher_stale,
    _spec_matches,
    _stamp,
    done_notes,
    foreign_launcher,
    halt_notes,
    reading,
    scaled_spec,
)
from bellows.kube.kinds import JobView, KindAdapter
from bellows.kube.kueue import WorkloadView
from bellows.kube.placement import HOSTNAME, Ask, Placement

__all__ = [
    "AwaitEviction",
    "AwaitWorkload",
    "KueueStep",
    "PatchWorkload",
    "plan_kueue_halt",
    "plan_kueue_scale",
    "workload_patch",
]


@dataclass(frozen=True)
class PatchWorkload:
    """Send this JSON merge patch to the Workload ``name`` (it carries the Workload's
    ``resourceVersion``); ``active`` is the ``spec.active`` it sets."""

    name: str
    body: dict[str, Any]
    active: bool


@dataclass(frozen=True)
class AwaitEviction:
    """Wait until Kueue has suspended the job, the operator has stopped its pods and the
    Workload holds no quota reservation."""


@dataclass(frozen=True)
class AwaitWorkload:
    """Wait for Kueue: ``reason`` says what for (a Workload created or recreated, or its
    podSets updated to match the job)."""

    reason: str


KueueStep = (
    SendPatch | PatchWorkload | AwaitEviction | AwaitWorkload | DeleteLauncher | Blocked | Nothing
)


def workload_patch(workload: WorkloadView, *, active: bool) -> PatchWorkload:
    """The step that sets ``workload``'s ``spec.active``, conditional on the version read."""
    body = {"metadata": {"resourceVersion": workload.resource_version}, "spec": {"active": active}}
    return PatchWorkload(workload.name, body, active)


def _journal_only(obj: Mapping[str, Any], notes: Mapping[str, str | None]) -> dict[str, Any]:
    """A patch of the job's annotations alone (a Kueue job's spec is not touched here)."""
    body = _body(obj, notes, {})
    del body["spec"]
    return body


def _evicted(kind: KindAdapter, obj: Mapping[str, Any], workload: WorkloadView | None) -> bool:
    """Suspended by Kueue, halted by the operator, and no quota held: the job may be edited."""
    journal = Journal.read((obj.get("metadata") or {}).get("annotations") or {})
    if workload is not None and workload.quota_reserved:
        return False
    return kind.halted(obj, journal.suspended_at)


def _announce(
    obj: Mapping[str, Any],
    view: JobView,
    journal: Journal,
    notes: dict[str, str | None],
    *,
    target: tuple[int, int],
    now: datetime,
) -> SendPatch | None:
    """Step 1, unless under way: journal the target, phase ``suspending``, before anything
    else changes (``None``: journaled already)."""
    if journal.target == target and journal.phase in (Phase.SUSPENDING, Phase.PATCHED):
        return None
    notes |= {keys.TARGET: keys.format_pair(*target), keys.PHASE: Phase.SUSPENDING}
    if not view.suspended:
        notes[keys.SUSPENDED_AT] = _stamp(now)
    return SendPatch(_journal_only(obj, notes), Phase.SUSPENDING)


def _hold(
    kind: KindAdapter, obj: Mapping[str, Any], view: JobView, workload: WorkloadView | None
) -> KueueStep | None:
    """Steps 2 and 3: the Workload inactive, then the wait until Kueue has suspended the job,
    the operator halted it and no quota is held (``None``: the job may be edited now)."""
    if workload is not None and workload.active:
        return workload_patch(workload, active=False)
    if workload is None and not (view.suspended and _evicted(kind, obj, None)):
        return AwaitWorkload("Kueue to create the job's Workload")
    if not (view.suspended and _evicted(kind, obj, workload)):
        return AwaitEviction()
    return None


def _synced(kind: KindAdapter, obj: Mapping[str, Any], workload: WorkloadView) -> bool:
    """Whether Kueue has updated the Workload's podSets to the job's pod counts. A TrainJob's
    Workload also has a podSet per initializer Job of its runtime, which the adapter does
    not read: only the trainer's are compared."""
    want, have = kind.pod_counts(obj), dict(workload.pod_counts)
    if getattr(kind, "recreates", False):
        return all(have.get(name) == count for name, count in want.items())
    return have == want


def plan_kueue_scale(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    workload: WorkloadView | None,
    *,
    target: tuple[int, int],
    env: Mapping[str, str],
    requested: tuple[int, int],
    launcher: Mapping[str, Any] | None,
    now: datetime,
    done: float | None = None,
    reason: str = "",
    placement: Ask = Placement.NONE,
    topology_key: str = HOSTNAME,
) -> KueueStep:
    """The next step towards running the Kueue job ``obj`` on ``target = (gpus, batch)``.

    ``workload`` is the job's Workload as read with it (``None``: there is none now). The
    job counts as running at the target once the journal says ``done``, even while it is
    suspended waiting for Kueue to admit it. ``done`` (samples processed) is journaled with
    the last step, as by :func:`bellows.kube.journal.plan_scale`; ``placement`` too.
    """
    view, journal, notes = reading(kind, obj, env, requested)
    gpus, _ = target
    if launcher is not None and (problem := foreign_launcher(obj, launcher)) is not None:
        return Blocked("LauncherNotOwned", problem)
    matches = _spec_matches(kind, obj, gpus, env)
    if journal.phase is Phase.DONE and journal.target == target == journal.allocation and matches:
        return Nothing("already running at the target")
    stale = launcher is not None and _launcher_stale(launcher, env)
    synced = workload is not None and _synced(kind, obj, workload)
    if (
        matches
        and not view.suspended
        and workload is not None
        and workload.active
        and workload.admitted
        and synced
        and not stale
    ):
        # Kueue already runs it at the target (admitted at its owner's size before Bellows
        # held it, or resumed on a recreated Workload): journal it, restart nothing
        return _done(obj, notes, target, done, now, journal=journal, reason=reason)
    if (first := _announce(obj, view, journal, notes, target=target, now=now)) is not None:
        return first  # step 1
    if journal.phase is Phase.SUSPENDING or not matches:
        # Steps 2 to 4 (again, for a job whose spec changed since it was patched).
        if (hold := _hold(kind, obj, view, workload)) is not None:
            return hold
        notes |= {keys.PHASE: Phase.PATCHED}
        spec = scaled_spec(kind, obj, gpus, env, placement=placement, topology_key=topology_key)
        return SendPatch(_body(obj, notes, spec), Phase.PATCHED)
    if workload is not None and workload.active and (stale or not synced):
        return workload_patch(workload, active=False)  # a recreated one, or a stale launcher
    if stale and launcher is not None:
        if not (view.suspended and _evicted(kind, obj, workload)):
            return AwaitEviction()
        meta = launcher["metadata"]
        return DeleteLauncher(meta["name"], meta["uid"], meta["resourceVersion"])
    if workload is None:
        return AwaitWorkload("Kueue to create the job's Workload")
    if not workload.active and workload.quota_reserved:
        return AwaitEviction()  # an eviction still running: let it end before requeueing
    if not synced:
        return AwaitWorkload("Kueue to update the Workload's podSets to the job's replicas")
    if not workload.active:
        return workload_patch(workload, active=True)
    return _done(obj, notes, target, done, now, journal=journal, reason=reason)


def _done(
    obj: Mapping[str, Any],
    notes: dict[str, str | None],
    target: tuple[int, int],
    done: float | None,
    now: datetime,
    *,
    journal: Journal,
    reason: str,
) -> SendPatch:
    """The last step: the journal says the job runs at ``target`` (with its progress); the
    target is written too, for a job Kueue ran at it before Bellows journaled any."""
    done_now = done_notes(target, done, now, journal=journal, reason=reason)
    notes = notes | done_now | {keys.TARGET: keys.format_pair(*target)}
    return SendPatch(_journal_only(obj, notes), Phase.DONE)


def plan_kueue_halt(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    workload: WorkloadView | None,
    *,
    phase: Phase,
    message: str,
    requested: tuple[int, int] | None,
    now: datetime,
) -> KueueStep:
    """The next step towards leaving the Kueue job ``obj`` in ``phase`` (queued, rejected or
    preempted): the journal first, then its Workload inactive (Kueue then suspends the job
    and releases its quota)."""
    view = kind.view(obj, ())
    journal = Journal.read(view.annotations)
    if journal.phase is not phase:
        notes = halt_notes(phase, message, journal, requested)
        if not view.suspended:
            notes[keys.SUSPENDED_AT] = _stamp(now)
        return SendPatch(_journal_only(obj, notes), phase)
    if workload is None:
        return AwaitWorkload("Kueue to create the job's Workload, to deactivate it")
    if workload.active:
        return workload_patch(workload, active=False)
    return Nothing(f"already {phase}")
