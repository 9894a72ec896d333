"""What Bellows decided for each opted-in job, and why: the rows of ``bellows status``.

Read-only, from what is on the cluster: the jobs' own ``bellows.io/`` journal (phase,
target, allocation, reason, restarts, first start) and, for the jobs whose journal says
nothing yet (skipped, clamped, refused before any decision), the newest Event Bellows
recorded on them. One list per job kind (paged) and one list of Bellows' Events: no read
per job (``benchmarks/status.py``). Only a running job's spec is parsed (its GPUs, batch and
speeds); a waiting one's state and reason are its journal's, so that a job whose settings
are wrong shows as invalid once the controller has said so (``bellows.io/status``).

:func:`job_status` is pure (one raw object in, one :class:`JobStatus` out); :func:`read_status`
does the lists. Speeds are the JSA's ``X(b, k)`` at the job's allocation: predicted from the
owner's profile (``bellows.io/profile``, a ConfigMap's, read once per ConfigMap, or the
default prior), learned from the controller's refit (``bellows.io/fit``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from bellows.inputs import DATA_ERRORS, brief
from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.adapters import ALL_KINDS as KINDS
from bellows.kube.errors import NotFoundError
from bellows.kube.journal import Journal, Phase
from bellows.kube.kinds import (
    KUEUE_QUEUE,
    KindAdapter,
    finished_state,
    foreign_manager,
    parse_time,
    pod_templates,
    suspend_set,
)
from bellows.kube.placement import template_type
from bellows.kube.specs import build_spec
from bellows.scaling import ClusterProfile, JobProfile, throughput

__all__ = [
    "ClusterLine",
    "CrdMissingError",
    "JobStatus",
    "Reads",
    "State",
    "Status",
    "bellows_event",
    "cluster_line",
    "controller_mode",
    "job_status",
    "latest_events",
    "read_status",
]

UNKNOWN = "unknown"  # the mode when no controller holds its Lease, or it says none


class CrdMissingError(LookupError):
    """A kind asked for by name whose CRD the cluster does not serve."""

    def __init__(self, kind: KindAdapter) -> None:
        crd = f"{kind.plural}.{kind.group}"
        super().__init__(
            f"the {kind.kind} CRD ({crd}, {kind.group}/{kind.version}) is not installed on "
            f"this cluster: no {kind.kind} can exist here (kubectl get crd {crd})"
        )
        self.kind = kind


class Reads(Protocol):
    """The reads ``bellows status`` makes, as :class:`bellows.kube.client.KubeApi` (the
    official client, the controller's) makes them; tests pass fakes."""

    def list_job_pages(
        self,
        kind: KindAdapter,
        namespace: str | None = None,
        *,
        limit: int = ...,
        selector: str | None = ...,
    ) -> AsyncIterator[tuple[list[dict[str, Any]], str]]: ...

    async def list_events(
        self, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[dict[str, Any]]: ...

    async def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None: ...


class State(StrEnum):
    WAITING = "waiting"  # suspended until Bellows starts it (queued, preempted, just arrived)
    RUNNING = "running"
    HALTED = "halted"  # suspended by Bellows: a rescale under way, or rejected (no queue)
    FINISHED = "finished"
    INVALID = "invalid"  # left alone: its settings or spec are wrong, or it was refused
    SKIPPED = "skipped"  # another controller runs it (spec.runPolicy.managedBy): never written


@dataclass(frozen=True)
class JobStatus:
    """One opted-in job as ``bellows status`` shows it (``None``: not known or not applicable).

    ``gpus`` and ``batch`` are what it runs with now (0 and ``None`` while suspended),
    ``target`` the GPUs of the last decision's target; ``predicted`` and ``learned`` its
    samples/s at its allocation by the owner's profile and by the controller's refit;
    ``waited_s`` from creation to its first start (to now while it has never started).
    """

    kind: str
    namespace: str
    name: str
    state: State
    gpus: int
    target: int | None
    batch: int | None
    predicted: float | None
    learned: float | None
    restarts: int
    waited_s: float | None
    reason: str
    phase: str | None = None
    queue: str | None = None
    event: str | None = None  # the newest Bellows Event on the job: "Reason: message"
    gpu_type: str | None = None  # the GPU type Bellows gave it (several types), else None

    @property
    def job(self) -> str:
        return f"{self.namespace}/{self.name}"

    def as_dict(self) -> dict[str, Any]:
        """The row as plain data (``-o json|yaml``), keys in camelCase as kubectl prints."""
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "state": str(self.state),
            "gpus": self.gpus,
            "targetGpus": self.target,
            "batch": self.batch,
            "predictedSamplesPerSecond": self.predicted,
            "learnedSamplesPerSecond": self.learned,
            "restarts": self.restarts,
            "waitedSeconds": self.waited_s,
            "reason": self.reason,
            "phase": self.phase,
            "queue": self.queue,
            "event": self.event,
            "gpuType": self.gpu_type,
        }


@dataclass(frozen=True)
class ClusterLine:
    """The cluster as a whole: GPUs (``None`` when the nodes cannot be read), in use by the
    running jobs, how many jobs are in each state, and the controller's mode (``paper``,
    ``bellows``, or ``unknown`` when no controller leads: :func:`controller_mode`)."""

    capacity: int | None
    in_use: int
    states: Mapping[str, int]
    mode: str = UNKNOWN
    by_type: Mapping[str, int] = field(default_factory=dict)  # GPUs per node GPU type

    def as_dict(self) -> dict[str, Any]:
        out = {
            "capacity": self.capacity,
            "inUse": self.in_use,
            "mode": self.mode,
            "jobs": dict(self.states),
        }
        if self.by_type:
            out["capacityByType"] = dict(self.by_type)
        return out


@dataclass(frozen=True)
class Status:
    cluster: ClusterLine
    jobs: tuple[JobStatus, ...]


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max(0.0, (later - earlier).total_seconds())


def _speed(
    view: Any,
    settings: keys.Settings,
    profile: JobProfile | None,
    allocation: tuple[int, int] | None,
    cluster: ClusterProfile,
) -> float | None:
    if profile is None or allocation is None:
        return None
    try:
        spec = build_spec(view, settings, profile)
        gpus, batch = allocation
        return throughput(dataclasses.replace(spec, batch_size=batch), gpus, batch, cluster)
    except (SpecError, *DATA_ERRORS):
        return None


def _fit(annotations: Mapping[str, str]) -> JobProfile | None:
    text = annotations.get(keys.FIT)
    if text is None:
        return None
    try:
        return keys.parse_profile_text(keys.FIT, text)
    except SpecError:
        return None


def _profile(
    settings: keys.Settings, namespace: str, configmaps: Mapping[tuple[str, str, str], JobProfile]
) -> JobProfile | None:
    if isinstance(settings.profile, keys.ConfigMapRef):
        ref = settings.profile
        return configmaps.get((namespace, ref.name, ref.key))
    return settings.profile


def _state(
    journal: Journal, suspended: bool, running: bool, annotations: Mapping[str, str]
) -> tuple[State, str]:
    """The state and the reason the journal gives (``""``: it gives none)."""
    reason = annotations.get(keys.REASON) or ""
    status = annotations.get(keys.STATUS) or ""
    if status.startswith("not managed: "):
        return State.INVALID, "invalid: " + status.removeprefix("not managed: ")
    phase = journal.phase
    if phase in (Phase.SUSPENDING, Phase.PATCHED):
        gpus = journal.target[0] if journal.target else "?"
        return State.HALTED, f"halted to resume on {gpus} GPUs: {reason or 'a rescale'}"
    if phase is Phase.REJECTED:
        return State.HALTED, reason or status
    if phase is Phase.DONE and not suspended:
        return State.RUNNING, reason or status
    if phase is Phase.DONE:  # a Kueue job journaled at its target, until Kueue admits it
        return State.WAITING, f"waiting for Kueue to admit it: {reason or status}"
    if status.startswith("waiting: "):  # a scaling blocked (an MPIJob launcher not its own)
        return (State.RUNNING if running else State.WAITING), status
    if phase in (Phase.QUEUED, Phase.PREEMPTED):
        return State.WAITING, reason or status
    if suspended:
        return State.WAITING, ""
    return State.RUNNING, ""


def job_status(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    *,
    now: datetime,
    cluster: ClusterProfile,
    configmaps: Mapping[tuple[str, str, str], JobProfile] = {},
    event: str | None = None,
) -> JobStatus | None:
    """The row of one job (``None`` for a job that did not opt in: never read further)."""
    meta = obj.get("metadata") or {}
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    if not keys.opted_in(annotations):
        return None
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    journal = Journal.read(annotations)
    created = parse_time(meta.get("creationTimestamp"))
    gpu_type = _gpu_type(kind, obj)

    def row(state: State, reason: str, queue: str | None = None, **running: Any) -> JobStatus:
        # one constructor call per job (dataclasses.replace costs as much again, 10 000 times)
        return JobStatus(
            kind=kind.kind.value, namespace=namespace, name=name, state=state,
            gpus=running.get("gpus", 0), target=journal.target[0] if journal.target else None,
            batch=running.get("batch"), predicted=running.get("predicted"),
            learned=running.get("learned"), restarts=journal.restarts,
            waited_s=_seconds(journal.started_at or now, created), reason=reason,
            phase=None if journal.phase is None else str(journal.phase), queue=queue,
            event=event, gpu_type=gpu_type,
        )  # fmt: skip

    finished = finished_state(obj)
    try:
        manager = foreign_manager(obj, kind.manager)
    except SpecError as err:
        return row(State.INVALID, f"invalid: {err}")
    if manager is not None:
        return row(
            State.SKIPPED, f"skipped: spec.runPolicy.managedBy={manager} runs it; never written to"
        )
    suspended = suspend_set(obj)
    running = not suspended and finished is None
    state, reason = _state(journal, suspended, running, annotations)
    if finished is not None:
        state, reason = State.FINISHED, f"{finished.lower()}" + (f" ({reason})" if reason else "")
    if not reason:
        reason = event or (
            "arrived; not seen by the controller yet" if suspended else "not sized by Bellows"
        )
    labels = meta.get("labels") or {}
    queue = labels.get(KUEUE_QUEUE) or annotations.get(KUEUE_QUEUE)
    if not running or state is State.INVALID:
        return row(state, reason, queue)  # only a running job's spec is read: GPUs, batch, speeds
    try:
        settings = keys.parse_settings(annotations)
        view = kind.view(obj, settings.env_names)
    except SpecError as err:
        return row(State.INVALID, f"invalid: {err}", queue)
    except DATA_ERRORS as err:
        return row(State.INVALID, f"invalid: {brief(err)}", queue)
    allocation = journal.allocation
    if allocation is None or allocation[0] != view.gpus:
        allocation = None  # running at a size Bellows did not journal: its owner's
    profile = _profile(settings, namespace, configmaps)
    return row(
        state,
        reason,
        view.queue,
        gpus=view.gpus,
        batch=allocation[1] if allocation else None,
        predicted=_speed(view, settings, profile, allocation, cluster),
        learned=_speed(view, settings, _fit(annotations), allocation, cluster),
    )


def _gpu_type(kind: KindAdapter, obj: Mapping[str, Any]) -> str | None:
    """The GPU type Bellows gave the job's pods (:func:`~bellows.kube.placement.
    template_type`, the same on every pod template of a replicated kind), else ``None``."""
    try:
        found = {template_type(template) for template in pod_templates(kind, obj)}
    except DATA_ERRORS:
        return None
    found.discard(None)
    return found.pop() if len(found) == 1 else None


# The Events Bellows' own recorder writes (bellows.kube.recording): both fields its name, and
# the list asks the server for those only (the fields its event strategy selects on)
EVENT_SELECTOR = f"source={keys.COMPONENT},reportingComponent={keys.COMPONENT}"


def bellows_event(event: Mapping[str, Any]) -> bool:
    """Whether ``event`` is one Bellows' recorder wrote, as far as an Event can say: its
    ``source.component`` and its ``reportingComponent`` (``reportingController`` in
    events.k8s.io/v1) both ``bellows``, and it lies in the namespace of the object it is
    about. A tenant's Event without both (``reason: Started``, ``message: granted by
    admin``) is not Bellows', whatever it says. Kubernetes records no author on an Event:
    one who may create Events in a namespace can still write both fields, so ``bellows
    status`` shows an Event only on the job it names (by uid) and escaped, never as a row
    of its own (docs/security.md)."""
    source = (event.get("source") or {}).get("component")
    if source != keys.COMPONENT or event.get("reportingComponent") != keys.COMPONENT:
        return False
    namespace = (event.get("metadata") or {}).get("namespace")
    return namespace is None or (event.get("involvedObject") or {}).get("namespace") == namespace


def latest_events(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The newest Bellows Event (:func:`bellows_event`) on each object, by its uid:
    ``"Reason: message"``, as written (``bellows status`` escapes it as it prints)."""
    newest: dict[str, tuple[tuple[str, int], str]] = {}
    for event in events:
        uid = (event.get("involvedObject") or {}).get("uid")
        if not uid or not isinstance(uid, str) or not bellows_event(event):
            continue
        # timestamps have whole seconds: within one, the later write (resourceVersion) wins
        version = str((event.get("metadata") or {}).get("resourceVersion", ""))
        order = (
            str(event.get("lastTimestamp") or event.get("eventTime") or ""),
            int(version) if version.isdecimal() and len(version) < 20 else 0,
        )
        text = f"{event.get('reason', '')}: {event.get('message', '')}"
        if uid not in newest or order >= newest[uid][0]:
            newest[uid] = (order, text)
    return {uid: text for uid, (_, text) in newest.items()}


def cluster_line(
    capacity: int | None,
    jobs: Sequence[JobStatus],
    mode: str = UNKNOWN,
    by_type: Mapping[str, int] | None = None,
) -> ClusterLine:
    states = {str(s): 0 for s in State}
    for job in jobs:
        states[str(job.state)] += 1
    in_use = sum(job.gpus for job in jobs if job.state is State.RUNNING)
    return ClusterLine(capacity, in_use, states, mode, dict(by_type or {}))


def controller_mode(lease: Mapping[str, Any] | None, *, now: datetime) -> str:
    """The mode the controller leading through ``lease`` runs in (its ``bellows.io/mode``,
    written with each renewal), or ``unknown``: no Lease, nobody holds it, its holder has
    not renewed it within its duration (no controller runs), or it says no mode."""
    if not lease:
        return UNKNOWN
    spec = lease.get("spec") or {}
    renewed = parse_time(spec.get("renewTime")) if spec.get("renewTime") else None
    duration = spec.get("leaseDurationSeconds")
    if not spec.get("holderIdentity") or renewed is None or not isinstance(duration, int):
        return UNKNOWN
    if renewed + timedelta(seconds=duration) < now:
        return UNKNOWN
    mode = ((lease.get("metadata") or {}).get("annotations") or {}).get(keys.MODE)
    return mode if mode in ("paper", "bellows") else UNKNOWN


async def _configmap_profiles(
    api: Reads, refs: Iterable[tuple[str, str, str]]
) -> dict[tuple[str, str, str], JobProfile]:
    """The profiles the jobs name in ConfigMaps: each ConfigMap read once."""
    out: dict[tuple[str, str, str], JobProfile] = {}
    read: dict[tuple[str, str], Mapping[str, Any] | None] = {}
    for namespace, name, key in sorted(set(refs)):
        if (namespace, name) not in read:
            try:
                read[namespace, name] = await api.get_configmap(namespace, name)
            except Exception:  # forbidden, gone: the job's predicted speed stays unknown
                read[namespace, name] = None
        found = read[namespace, name]
        text = ((found or {}).get("data") or {}).get(key)
        if isinstance(text, str):
            try:
                out[namespace, name, key] = keys.parse_profile_text(key, text)
            except SpecError:
                continue
    return out


def _configmap_ref(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    meta = obj.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(keys.PROFILE_CONFIGMAP)
    if not isinstance(text, str):
        return None
    name, _, key = text.partition("/")
    return str(meta.get("namespace", "")), name, key or keys.DEFAULT_PROFILE_KEY


async def read_status(
    api: Reads,
    *,
    now: datetime,
    cluster: ClusterProfile,
    namespace: str | None = None,
    kinds: Sequence[KindAdapter] = KINDS,
    events: bool = True,
    selector: str | None = None,
    strict: bool = False,
) -> list[JobStatus]:
    """Every opted-in job of ``kinds`` (in ``namespace``, or all; matching the label
    ``selector``): one list per kind and, with ``events``, one list of the Events Bellows
    recorded, all at once (each kind's pages in turn), so that one answer is decoded while
    the server prepares the next. A kind whose CRD the cluster does not serve has no jobs;
    with ``strict`` (the kinds were asked for by name) it raises :class:`CrdMissingError`."""

    async def opted_of(kind: KindAdapter) -> list[tuple[KindAdapter, dict[str, Any]]]:
        found = []
        try:
            async for page, _ in api.list_job_pages(kind, namespace, selector=selector):
                for obj in page:
                    if keys.opted_in((obj.get("metadata") or {}).get("annotations")):
                        found.append((kind, obj))
        except NotFoundError:  # the kind's CRD is not installed here
            if strict:
                raise CrdMissingError(kind) from None
        return found

    async def newest_events() -> dict[str, str]:
        if not events:
            return {}
        return latest_events(await api.list_events(namespace, field_selector=EVENT_SELECTOR))

    events_listed = asyncio.create_task(newest_events())
    try:
        per_kind = await asyncio.gather(*map(opted_of, kinds))
    except BaseException:
        events_listed.cancel()
        raise
    newest = await events_listed
    opted = [found for listed in per_kind for found in listed]
    refs = [ref for _, obj in opted if (ref := _configmap_ref(obj)) is not None]
    configmaps = await _configmap_profiles(api, refs) if refs else {}
    rows = []
    for kind, obj in opted:
        uid = str((obj.get("metadata") or {}).get("uid", ""))
        row = job_status(
            kind, obj, now=now, cluster=cluster, configmaps=configmaps, event=newest.get(uid)
        )
        if row is not None:
            rows.append(row)
    return rows
