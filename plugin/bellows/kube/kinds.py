"""The interface every job kind implements, and the immutable view of one job it reads.

As Kueue's ``GenericJob``: one small interface (:class:`KindAdapter`), one module per kind
under ``bellows.kube.adapters``. A kind's adapter turns a raw object into a :class:`JobView`
(pure, no I/O) and builds the merge patches that scale it, as plain data; sending them is the
actuator's job. Fields shared by both Kubeflow kinds (``runPolicy.suspend``, conditions) are read by
the helpers at the bottom. Which job a view is about is a :class:`bellows.refs.JobRef`, its
kind a :class:`bellows.refs.JobKind`: the same types the bus's events carry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bellows import inputs
from bellows.inputs import check_int, parse_int
from bellows.jobs import MAX_GPUS, SpecError
from bellows.kube.placement import Ask
from bellows.kube.progress_env import defaults_of
from bellows.refs import JobKind, JobRef

__all__ = [
    "JobView",
    "KindAdapter",
    "conditions",
    "finished_state",
    "foreign_manager",
    "kueue_refusal",
    "parse_time",
    "pod_templates",
    "running_since",
    "suspend_set",
]

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"  # spec.runPolicy.managedBy of a job a worker cluster runs
GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class JobView:
    """What Bellows needs from one job object, read at one ``resource_version``.

    ``gpus`` counts the GPUs of the replicas that train, ``gpu_step`` the GPUs one more
    replica adds; ``batch_env`` holds the literal values of the batch env vars found on the
    training containers (``None`` where a container lacks one). ``blocker`` says why Bellows
    must not manage the job (another controller owns its size), else ``None``. ``queue`` is
    the Kueue LocalQueue the job names (``kueue.x-k8s.io/queue-name``), else ``None``: such
    a job is sized through its Workload, or refused while Kueue cooperation is off.
    """

    ref: JobRef
    uid: str
    resource_version: str
    annotations: Mapping[str, str]
    suspended: bool
    finished: str | None  # "Succeeded", "Failed" or None
    gpus: int
    gpu_step: int
    min_gpus: int
    env: Mapping[str, tuple[str | None, ...]] = field(default_factory=dict)
    blocker: str | None = None
    queue: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


class KindAdapter(Protocol):
    """One Kubeflow job kind: how to read it and how to scale it."""

    kind: JobKind
    group: str
    version: str
    plural: str
    manager: str  # the operator's own spec.runPolicy.managedBy value

    def view(self, obj: Mapping[str, Any], env_names: tuple[str, ...]) -> JobView:
        """The job's view; :class:`SpecError` names a spec field Bellows cannot work with."""
        ...

    def scale_patch(
        self, obj: Mapping[str, Any], gpus: int, env: Mapping[str, str]
    ) -> dict[str, Any]:
        """The ``spec`` part of a merge patch giving the job ``gpus`` GPUs and ``env`` values."""
        ...

    def halted(self, obj: Mapping[str, Any], since: datetime | None) -> bool:
        """Whether the operator has stopped the job's pods after a suspend at ``since``."""
        ...

    def suspend_spec(self, suspend: bool) -> dict[str, Any]:
        """The ``spec`` part of a merge patch that sets the job's suspend flag."""
        ...

    def launcher(self, obj: Mapping[str, Any]) -> str | None:
        """Name of the batch Job to delete while suspended so that a new spec applies."""
        ...

    def pod_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        """Replicas per replica type, keyed as Kueue names the Workload's podSets (the type
        in lower case: ``master``, ``worker``, ``launcher``)."""
        ...

    def placement_patch(
        self, obj: Mapping[str, Any], placement: Ask, topology_key: str
    ) -> dict[str, Any]:
        """The ``spec`` part of a merge patch asking for ``placement`` on every pod template
        of the job (``bellows.kube.placement``); ``{}`` when nothing needs to change."""
        ...


def pod_templates(kind: KindAdapter, obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod templates of ``obj``'s replica specs, for a kind whose replicas carry them
    (PyTorchJob, MPIJob); ``[]`` for one whose pods its runtime renders (TrainJob).
    :class:`SpecError` for replica specs Bellows cannot read."""
    specs = getattr(kind, "specs", None)  # the replicated kinds' replica specs
    if specs is None:
        return []
    return [spec.get("template") or {} for spec in specs(obj).values()]


def conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The job's status conditions by type."""
    found = (obj.get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in found if isinstance(c, Mapping) and "type" in c}


def running_since(obj: Mapping[str, Any]) -> datetime | None:
    """When the operator last saw the job's pods start running (its ``Running`` condition
    turning ``True``), or ``None`` when it is not running."""
    running = conditions(obj).get("Running", {})
    if running.get("status") != "True":
        return None
    return parse_time(running.get("lastTransitionTime"))


def finished_state(obj: Mapping[str, Any]) -> str | None:
    """``Succeeded`` (a TrainJob's ``Complete``) or ``Failed`` when that condition is
    ``True``, else ``None``."""
    by_type = conditions(obj)
    for state, named in (
        ("Succeeded", "Succeeded"),
        ("Complete", "Succeeded"),
        ("Failed", "Failed"),
    ):
        if by_type.get(state, {}).get("status") == "True":
            return named  # a TrainJob says Complete where Kubeflow v1 says Succeeded
    return None


def parse_time(text: object) -> datetime | None:
    """An RFC 3339 timestamp with a zone (in UTC), or ``None`` when absent or malformed."""
    if text is None:
        return None
    try:
        return inputs.parse_time("time", text)
    except SpecError:
        return None


def suspend_set(obj: Mapping[str, Any]) -> bool:
    """Whether the job's ``spec.runPolicy.suspend`` is set (as written; whether the operator
    has stopped its pods is :func:`halted_by_conditions`'s question)."""
    spec = obj.get("spec") or {}
    if "runPolicy" not in spec and "suspend" in spec:
        return bool(spec["suspend"])  # a TrainJob's spec.suspend
    return bool((spec.get("runPolicy") or {}).get("suspend", False))


def halted_by_conditions(obj: Mapping[str, Any], since: datetime | None) -> bool:
    """Suspended in spec, and the operator has confirmed it (or never started the job).

    The operator confirms with ``Suspended=True``; ``since`` (when Bellows set suspend)
    rules out a stale confirmation from an earlier suspension. A job that has never run
    (no ``startTime``, no ``Running`` condition) has no pods to stop.
    """
    if not suspend_set(obj):
        return False
    by_type = conditions(obj)
    suspended = by_type.get("Suspended", {})
    if suspended.get("status") == "True":
        moment = parse_time(suspended.get("lastTransitionTime"))
        if since is None or (moment is not None and moment >= since.replace(microsecond=0)):
            return True
    return "Running" not in by_type and not (obj.get("status") or {}).get("startTime")


def gpu_limit(container: Mapping[str, Any], where: str) -> int:
    """The container's ``nvidia.com/gpu`` limit (0 when absent)."""
    limits = (container.get("resources") or {}).get("limits") or {}
    value = limits.get(GPU, 0)
    path = f"{where}.resources.limits.{GPU}"
    if isinstance(value, int) and not isinstance(value, bool):
        return check_int(path, value, minimum=0, maximum=MAX_GPUS)
    return parse_int(path, value, minimum=0, maximum=MAX_GPUS)


def env_values(containers: list[Mapping[str, Any]], name: str, where: str) -> list[str | None]:
    """The literal value of env var ``name`` in each container (``None`` where absent)."""
    values: list[str | None] = []
    for i, container in enumerate(containers):
        found: str | None = None
        for entry in container.get("env") or []:
            if entry.get("name") == name:
                if "valueFrom" in entry:
                    raise SpecError(
                        f"{where}.containers[{i}].env.{name}",
                        "valueFrom",
                        "a literal value that Bellows can patch",
                    )
                found = str(entry.get("value", ""))
        values.append(found)
    return values


def with_env(container: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """A copy of ``container`` whose env sets each of ``env`` (replaced in place or
    appended), and each of its defaults (:class:`~bellows.kube.progress_env.TargetEnv`) that
    it has no entry of (appended)."""
    out = dict(container)
    entries = [dict(e) for e in container.get("env") or []]
    for name, value in env.items():
        for entry in entries:
            if entry.get("name") == name:
                entry.clear()
                entry.update(name=name, value=value)
                break
        else:
            entries.append({"name": name, "value": value})
    present = {entry.get("name") for entry in entries}
    for name, fields in defaults_of(env).items():
        if name not in present:
            entries.append({"name": name, **fields})
    out["env"] = entries
    return out


def kueue_refusal(queue: str) -> str:
    """Why a job in Kueue's LocalQueue ``queue`` is refused while Kueue cooperation is off."""
    return (
        f"managed by Kueue ({KUEUE_QUEUE}={queue}) and Kueue cooperation is off: set "
        "controller.kueue.enabled (chart value kueue.enabled) so that Bellows sizes it through "
        "its Workload, or remove the queue name or the bellows.io/ annotations"
    )


def foreign_manager(obj: Mapping[str, Any], own: str) -> str | None:
    """The controller named in ``spec.runPolicy.managedBy`` when it is not ``own`` (the
    kind's operator), else ``None``: such a job (a MultiKueue manager cluster's copy, whose
    worker cluster runs it) is Kueue's, and Bellows must never write to it."""
    spec = obj.get("spec") or {}
    field = "spec.runPolicy.managedBy"
    if obj.get("kind") == "TrainJob" or ("managedBy" in spec and "runPolicy" not in spec):
        run_policy, field = spec, "spec.managedBy"  # Trainer v2 keeps it in spec
    else:
        run_policy = spec.get("runPolicy") or {}
    if not isinstance(run_policy, Mapping):
        raise SpecError("spec.runPolicy", run_policy, "an object")
    managed_by = run_policy.get("managedBy")
    if managed_by is None or managed_by in ("", own):
        return None
    if not isinstance(managed_by, str):
        raise SpecError(field, managed_by, "a string")
    return managed_by
