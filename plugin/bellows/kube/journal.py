"""The step journal on each job and the pure planner that picks the next step from it.

Applying ``(k, b)`` to a running job takes several writes (suspend, wait for the operator
to stop the pods, patch replicas and env, refresh the MPIJob launcher, resume). The
journal (annotations ``bellows.io/target`` and ``bellows.io/phase``) records how far it
got *on the job itself*, so whichever controller reads the job next, restarted or not,
finishes the work. :func:`plan_scale` and :func:`plan_halt` are pure, as h11's state
machine: given the object as read, they return the one next step, which the actuator
performs and then plans again from a fresh read. Every ``SendPatch`` carries the
``resourceVersion`` it was computed from, so a write over a concurrent change fails (409)
instead of undoing it.

Phases: ``queued`` (held by Bellows before its start), ``suspending`` (suspend written,
waiting for the operator), ``patched`` (replicas and env rewritten while suspended),
``done`` (resumed at the target), ``rejected``, ``preempted``.

An MPIJob's launcher is found by name (``<mpijob>-launcher``), and anyone who may create a
batch Job in the namespace may create one of that name. So the planner deletes a launcher
only when the MPIJob controls it (an ``ownerReferences`` entry with ``controller: true`` and
the MPIJob's uid, as mpi-operator checks with ``metav1.IsControlledBy``), and the delete
carries that Job's uid as a precondition. A launcher the MPIJob does not control stops the
scaling (:class:`Blocked`): mpi-operator will not run the MPIJob beside it either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from bellows.inputs import shown
from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.kinds import JobView, KindAdapter, parse_time
from bellows.kube.placement import HOSTNAME, Ask, Placement

__all__ = [
    "AwaitHalt",
    "Blocked",
    "DeleteLauncher",
    "Journal",
    "Nothing",
    "Phase",
    "SendPatch",
    "Step",
    "done_notes",
    "foreign_launcher",
    "halt_notes",
    "plan_halt",
    "plan_scale",
    "reading",
    "scaled_spec",
    "target_env",
]


class Phase(StrEnum):
    QUEUED = "queued"
    SUSPENDING = "suspending"
    PATCHED = "patched"
    DONE = "done"
    REJECTED = "rejected"
    PREEMPTED = "preempted"


_PHASES = {str(p): p for p in Phase}  # built once: a set(Phase) per job cost 10 µs


@dataclass(frozen=True)
class Journal:
    """What Bellows last wrote on the job (a malformed entry reads as absent)."""

    phase: Phase | None = None
    target: tuple[int, int] | None = None
    allocation: tuple[int, int] | None = None
    requested: tuple[int, int] | None = None
    suspended_at: datetime | None = None
    progress: tuple[float, datetime] | None = None  # samples done when it last resumed, when
    restarts: int = 0  # resumes after a halt (bellows.io/restarts)
    started_at: datetime | None = None  # first start (bellows.io/started-at)

    @classmethod
    def read(cls, annotations: Mapping[str, str]) -> Journal:
        def pair(key: str) -> tuple[int, int] | None:
            try:
                return keys.parse_pair(key, annotations.get(key))
            except SpecError:
                return None

        def progress() -> tuple[float, datetime] | None:
            try:
                return keys.parse_progress(annotations.get(keys.PROGRESS))
            except SpecError:
                return None

        restarts = annotations.get(keys.RESTARTS, "0")
        phase_text = annotations.get(keys.PHASE)
        phase = _PHASES.get(phase_text) if phase_text else None
        return cls(
            phase=phase,
            target=pair(keys.TARGET),
            allocation=pair(keys.ALLOCATION),
            requested=pair(keys.REQUESTED),
            suspended_at=parse_time(annotations.get(keys.SUSPENDED_AT)),
            progress=progress(),
            restarts=int(restarts) if restarts.isdecimal() and len(restarts) < 10 else 0,
            started_at=parse_time(annotations.get(keys.STARTED_AT)),
        )


@dataclass(frozen=True)
class SendPatch:
    """Send this JSON merge patch to the job (it carries its ``resourceVersion``)."""

    body: dict[str, Any]
    phase: Phase


@dataclass(frozen=True)
class AwaitHalt:
    """Wait until the operator confirms the suspension (its pods are gone)."""


@dataclass(frozen=True)
class DeleteLauncher:
    """Delete the MPIJob's launcher batch Job, so that it is recreated from the new spec.

    Only the Job read (``uid`` and ``resource_version`` are the delete's preconditions): one
    replaced or edited since, its ownership perhaps with it, is read and checked again.
    """

    name: str
    uid: str
    resource_version: str


@dataclass(frozen=True)
class Blocked:
    """The job cannot be driven to the target now; the Event ``reason`` and ``problem`` tell
    its owner why."""

    reason: str
    problem: str


@dataclass(frozen=True)
class Nothing:
    """The job is already in the wanted state."""

    reason: str = field(default="")


Step = SendPatch | AwaitHalt | DeleteLauncher | Blocked | Nothing


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def target_env(settings: keys.Settings, gpus: int, batch: int) -> dict[str, str]:
    """Env values that give the training script global batch ``batch`` on ``gpus`` GPUs."""
    env: dict[str, str] = {}
    if settings.batch_env:
        env[settings.batch_env] = str(batch)
    if settings.local_batch_env:
        env[settings.local_batch_env] = str(-(-batch // gpus))  # the slowest GPU's share
    return env


def _body(
    obj: Mapping[str, Any], notes: Mapping[str, str | None], spec: Mapping[str, Any]
) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "metadata": {"resourceVersion": meta["resourceVersion"], "annotations": dict(notes)},
        "spec": dict(spec),
    }


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = (
            _merge(out[key], value)
            if isinstance(out.get(key), Mapping) and isinstance(value, Mapping)
            else value
        )
    return out


def scaled_spec(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    gpus: int,
    env: Mapping[str, str],
    *,
    placement: Ask,
    topology_key: str,
) -> dict[str, Any]:
    """The ``spec`` of the patch that sizes a suspended job: replicas and env, and the
    placement its prices assume (merged into the same pod templates)."""
    return _merge(
        kind.scale_patch(obj, gpus, env), kind.placement_patch(obj, placement, topology_key)
    )


def _spec_matches(
    kind: KindAdapter, obj: Mapping[str, Any], gpus: int, env: Mapping[str, str]
) -> bool:
    view = kind.view(obj, tuple(env))
    return view.gpus == gpus and all(
        values and all(v == env[name] for v in values) for name, values in view.env.items()
    )


def _launcher_stale(launcher: Mapping[str, Any], env: Mapping[str, str]) -> bool:
    pod = ((launcher.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod.get("containers") or []:
        found = {e.get("name"): e.get("value") for e in container.get("env") or []}
        if any(found.get(name) != value for name, value in env.items()):
            return True
    return False


def foreign_launcher(obj: Mapping[str, Any], launcher: Mapping[str, Any]) -> str | None:
    """Why ``launcher`` is not the MPIJob ``obj``'s own (``None`` when ``obj`` controls it)."""
    uid = (obj.get("metadata") or {}).get("uid")
    meta = launcher.get("metadata") or {}
    refs = [r for r in meta.get("ownerReferences") or [] if isinstance(r, Mapping)]
    controllers = [r for r in refs if r.get("controller") is True]
    if uid and any(r.get("uid") == uid for r in controllers):
        return None
    owner = (
        f"{shown(controllers[0].get('kind'))} {shown(controllers[0].get('name'))}"
        if controllers
        else "none"
    )
    return (
        f"batch Job {shown(meta.get('name'))} exists and is not controlled by this MPIJob "
        f"(its controller: {owner}); Bellows never deletes it, and the MPI operator does not "
        "run the MPIJob beside it: delete or rename that Job, and the scaling goes on"
    )


def reading(
    kind: KindAdapter, obj: Mapping[str, Any], env: Mapping[str, str], requested: tuple[int, int]
) -> tuple[JobView, Journal, dict[str, str | None]]:
    """What every scaling planner reads first: the job's view (with the ``env`` names),
    its journal, and the notes to write (the owner's ``requested`` ask, saved once)."""
    view = kind.view(obj, tuple(env))
    journal = Journal.read(view.annotations)
    notes: dict[str, str | None] = {}
    if journal.requested is None:
        notes[keys.REQUESTED] = keys.format_pair(*requested)
    return view, journal, notes


def plan_scale(
    kind: KindAdapter,
    obj: Mapping[str, Any],
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
) -> Step:
    """The next step towards running ``obj`` on ``target = (gpus, batch)`` with ``env``.

    ``done`` (samples the job has processed, as the caller estimates them) is written with
    the resume, so that a restarted controller knows the job's progress (``progress``);
    ``reason``, the decision's, with it (``bellows.io/reason``). ``placement``: what the
    patch of replicas and env also asks of the scheduler (:mod:`bellows.kube.placement`).
    """
    view, journal, notes = reading(kind, obj, env, requested)
    gpus, batch = target
    pair = keys.format_pair(gpus, batch)
    suspend = kind.suspend_spec(True)
    if launcher is not None and (problem := foreign_launcher(obj, launcher)) is not None:
        return Blocked(
            "LauncherNotOwned", problem
        )  # checked first: no step of a scaling that cannot finish
    if (
        journal.phase is Phase.DONE
        and journal.target == target == journal.allocation
        and not view.suspended
        and _spec_matches(kind, obj, gpus, env)
    ):
        return Nothing("already running at the target")
    ongoing = journal.target == target and journal.phase in (Phase.SUSPENDING, Phase.PATCHED)
    if not ongoing or not view.suspended:
        # Begin (again): someone may have resumed the job between our steps.
        if view.suspended and kind.halted(obj, journal.suspended_at):
            spec = _merge(
                suspend,
                scaled_spec(kind, obj, gpus, env, placement=placement, topology_key=topology_key),
            )
            notes |= {keys.TARGET: pair, keys.PHASE: Phase.PATCHED}
            return SendPatch(_body(obj, notes, spec), Phase.PATCHED)
        notes |= {keys.TARGET: pair, keys.PHASE: Phase.SUSPENDING}
        if not view.suspended:
            notes[keys.SUSPENDED_AT] = _stamp(now)
        return SendPatch(_body(obj, notes, suspend), Phase.SUSPENDING)
    if journal.phase is Phase.SUSPENDING or not _spec_matches(kind, obj, gpus, env):
        if not kind.halted(obj, journal.suspended_at):
            return AwaitHalt()
        notes |= {keys.PHASE: Phase.PATCHED}
        spec = scaled_spec(kind, obj, gpus, env, placement=placement, topology_key=topology_key)
        return SendPatch(_body(obj, notes, spec), Phase.PATCHED)
    if launcher is not None and _launcher_stale(launcher, env):
        meta = launcher["metadata"]
        return DeleteLauncher(meta["name"], meta["uid"], meta["resourceVersion"])
    notes |= done_notes(target, done, now, journal=journal, reason=reason)
    return SendPatch(_body(obj, notes, kind.suspend_spec(False)), Phase.DONE)


def done_notes(
    target: tuple[int, int],
    done: float | None,
    now: datetime,
    *,
    journal: Journal | None = None,
    reason: str = "",
) -> dict[str, str | None]:
    """The journal of a scaling's last step: phase ``done``, the allocation, the status
    line, the decision's ``reason`` and, when known, the samples ``done`` by ``now``
    (``progress``). With the ``journal`` read before: the first start's time, or one more
    restart when the job had run before (an allocation journaled)."""
    gpus, batch = target
    notes: dict[str, str | None] = {
        keys.PHASE: Phase.DONE,
        keys.ALLOCATION: keys.format_pair(gpus, batch),
        keys.STATUS: f"running on {gpus} GPUs with global batch {batch}",
    }
    if reason:
        notes[keys.REASON] = reason
    if done is not None:
        notes[keys.PROGRESS] = keys.format_progress(done, now)
    if journal is not None:
        if journal.started_at is None:
            notes[keys.STARTED_AT] = _stamp(now)
        if journal.allocation is not None:
            notes[keys.RESTARTS] = str(journal.restarts + 1)
    return notes


def plan_halt(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    *,
    phase: Phase,
    message: str,
    requested: tuple[int, int] | None,
    now: datetime,
) -> Step:
    """The next step towards leaving ``obj`` suspended in ``phase`` (queued/rejected/preempted)."""
    view = kind.view(obj, ())
    journal = Journal.read(view.annotations)
    if view.suspended and journal.phase is phase:
        return Nothing(f"already {phase}")
    notes = halt_notes(phase, message, journal, requested)
    if not view.suspended:
        notes[keys.SUSPENDED_AT] = _stamp(now)
    return SendPatch(_body(obj, notes, kind.suspend_spec(True)), phase)


def halt_notes(
    phase: Phase, message: str, journal: Journal, requested: tuple[int, int] | None
) -> dict[str, str | None]:
    """The journal of a halt into ``phase``: no target, ``message`` as the status line and
    the reason, and the owner's ask when not saved yet."""
    notes: dict[str, str | None] = {
        keys.PHASE: phase,
        keys.TARGET: None,
        keys.STATUS: message,
        keys.REASON: message,
    }
    if journal.requested is None and requested is not None:
        notes[keys.REQUESTED] = keys.format_pair(*requested)
    return notes
