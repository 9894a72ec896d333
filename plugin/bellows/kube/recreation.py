"""Resizing a TrainJob whose ``spec.trainer`` is immutable: halt, record, delete, re-create.

Kubeflow Trainer v2.2+ forbids any change of ``spec.trainer`` (``numNodes``, the env), even
while the TrainJob is suspended (CEL ``self == oldSelf``, kubeflow/trainer PR #3157; issue
#3995 asks for ``numNodes`` mutable when suspended). So, to run a TrainJob on ``(k, b)``:

1. journal ``target``, phase ``suspending``, ``suspended-at`` and ``suspend: true`` (one
   patch; ``spec.suspend`` is mutable);
2. wait until the Trainer says ``Suspended=True`` and no child Job has an active pod;
3. probe the API server with a *dry-run* patch of ``spec.trainer`` (:class:`ProbeInPlace`):
   a server that accepts it (a future Trainer) gets the patch for real, phase ``patched``,
   and the resume of :func:`bellows.kube.journal.plan_scale`. The answer decides, not a
   version string;
4. otherwise write the **record** (``bellows.kube.records``): a ConfigMap in the records
   namespace, which only the controller writes, named after a hash of the job's namespace
   and name, holding the whole TrainJob to create (labels, annotations, owner references,
   runtime reference and the rest of its spec kept; ``numNodes`` and the batch env new;
   the journal at ``done`` with the allocation and the progress; ``bellows.io/recreated-from``
   naming the old uid and ``bellows.io/recreation`` the record's random token), the old
   job's kept fields, the old uid and the fingerprint of the object it was built from;
5. delete the TrainJob, preconditioned on its uid and ``resourceVersion``: only the object
   the record was built from is deleted (one whose delete does not complete, a finalizer
   holding it, is reported and left to finish: ``metadata.deletionTimestamp``);
6. create the TrainJob from the record, once: the record then keeps the copy's uid, and a
   record whose copy was created and is gone (its owner deleted it) is dropped, never
   created again;
7. delete the record.

:func:`plan_recreate` is pure, as ``plan_scale``: from the job as read (``None`` when
there is none) and the record (``None`` when there is none, or one that failed
:func:`bellows.kube.records.read_record`'s checks: never acted on) it returns the one next
step. A controller killed anywhere is followed by one that reads both and goes on: the old
job and a record built from it (fingerprint equal) → delete; no job and a record → create,
once (a create that meets ``AlreadyExists`` reads again); a job that carries the record's
token → it was created, delete the record (a ``recreated-from`` alone proves nothing: a
tenant can write one). A record whose fingerprint
no longer matches the old job (it changed since) is rewritten before any delete, so no
stale copy is ever created; a job of that name that is neither the old one nor its copy
(the owner made a new one) makes the record stale, and it is deleted untouched. So does
the old job found finished (``Complete`` or ``Failed`` between the record's write and the
delete, which is preconditioned on the ``resourceVersion`` a status write bumps): a
finished job is never deleted nor created again, and no record outlives it (one left
behind would re-create the job once its owner deleted it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from bellows.kube import keys
from bellows.kube.journal import (
    AwaitHalt,
    Journal,
    Nothing,
    Phase,
    SendPatch,
    _body,
    _spec_matches,
    _stamp,
    done_notes,
    reading,
)
from bellows.kube.kinds import KindAdapter, finished_state
from bellows.kube.placement import HOSTNAME, Ask, Placement
from bellows.kube.progress_env import defaults_of
from bellows.kube.records import (
    RECORD_LABEL,
    Record,
    fingerprint,
    new_token,
    record_body,
    record_name,
)

__all__ = [
    "RECORD_LABEL",
    "CreateJob",
    "DeleteJob",
    "DeleteRecord",
    "ProbeInPlace",
    "Record",
    "RecreateStep",
    "WriteRecord",
    "plan_recreate",
    "record_name",
]

_KUEUE_PATCHES: Final = "kueue.x-k8s.io/"  # runtimePatches Kueue writes (re-injected on admit)


@dataclass(frozen=True)
class ProbeInPlace:
    """Ask the API server, in a dry run, whether it accepts this patch of the suspended job."""

    body: dict[str, Any]


@dataclass(frozen=True)
class WriteRecord:
    """Create the record ConfigMap ``body`` (or replace it, at ``resource_version``)."""

    body: dict[str, Any]
    resource_version: str | None


@dataclass(frozen=True)
class DeleteJob:
    """Delete the TrainJob: only the one with ``uid``, still at ``resource_version``."""

    uid: str
    resource_version: str


@dataclass(frozen=True)
class CreateJob:
    """Create the TrainJob ``body`` (from the record)."""

    body: dict[str, Any]


@dataclass(frozen=True)
class DeleteRecord:
    """Delete the record ConfigMap ``name`` (at ``resource_version``); ``done``: the
    re-creation it recorded is complete (else the record was stale)."""

    name: str
    resource_version: str
    done: bool


RecreateStep = (
    SendPatch
    | AwaitHalt
    | ProbeInPlace
    | WriteRecord
    | DeleteJob
    | CreateJob
    | DeleteRecord
    | Nothing
)


def successor(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    *,
    target: tuple[int, int],
    env: Mapping[str, str],
    done: float | None,
    now: datetime,
    journal: Journal,
    reason: str = "",
    suspend: bool = False,
    placement: Ask = Placement.NONE,
    topology_key: str = HOSTNAME,
    token: str = "",
) -> dict[str, Any]:
    """The TrainJob that replaces ``obj`` on ``target``: its metadata kept (name, labels,
    annotations, owner references, finalizers), its spec kept but for ``spec.trainer``
    (``numNodes``, batch env) and ``suspend`` (false: it runs at once; true beside Kueue,
    which resumes it once it admits its new Workload), Kueue's runtime patches dropped
    (Kueue writes them again when it admits the new Workload), and the journal at ``done``
    as a resume in place writes it (``journal``, read from ``obj``: the first start's time,
    or one more restart; the decision's ``reason``). ``placement``: Bellows' entry of
    ``spec.runtimePatches`` asks it of the copy's training pods (``kind.placement_patch``).
    ``token``: its record's (``bellows.io/recreation``), which only the controller knows."""
    meta = obj["metadata"]
    spec = copy.deepcopy(dict(obj["spec"]))
    gpus, _ = target
    spec["trainer"] = kind.scale_patch(obj, gpus, env)["trainer"]
    spec["suspend"] = suspend
    patches = [
        p
        for p in spec.get("runtimePatches") or []
        if not str(p.get("manager", "")).startswith(_KUEUE_PATCHES)
    ]
    if patches:
        spec["runtimePatches"] = patches
    else:
        spec.pop("runtimePatches", None)
    spec.update(kind.placement_patch({"metadata": meta, "spec": spec}, placement, topology_key))
    notes = dict(meta.get("annotations") or {})
    ended = done_notes(target, done, now, journal=journal, reason=reason)
    notes.update({k: v for k, v in ended.items() if v is not None})
    notes[keys.TARGET] = keys.format_pair(*target)
    notes[keys.RECREATED_FROM] = meta["uid"]
    notes[keys.RECREATION] = token
    new_meta: dict[str, Any] = {"name": meta["name"], "namespace": meta["namespace"]}
    for field in ("labels", "ownerReferences", "finalizers"):
        if meta.get(field):
            new_meta[field] = copy.deepcopy(meta[field])
    new_meta["annotations"] = notes
    return {
        "apiVersion": obj.get("apiVersion", f"{kind.group}/{kind.version}"),
        "kind": kind.kind,
        "metadata": new_meta,
        "spec": spec,
    }


def new_record(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    record: Record | None,
    *,
    target: tuple[int, int],
    env: Mapping[str, str],
    **successor_args: Any,
) -> WriteRecord:
    """Write the record of the re-creation of ``obj`` on ``target`` (replacing ``record``,
    one built from an older state of the job or for another target): its successor
    (:func:`successor`, with a fresh token), in a ConfigMap the actuator writes in its
    records namespace."""
    token = new_token()
    new = successor(kind, obj, target=target, env=env, token=token, **successor_args)
    names = [*env, *defaults_of(env)]  # what the resize may write: batch, progress endpoint
    body = record_body(obj, new, target, records_namespace="", token=token, env_names=names)
    return WriteRecord(body, None if record is None else record.resource_version)


def plan_recreate(
    kind: KindAdapter,
    obj: Mapping[str, Any] | None,
    record: Record | None,
    *,
    target: tuple[int, int],
    env: Mapping[str, str],
    requested: tuple[int, int],
    now: datetime,
    in_place: bool | None,
    done: float | None = None,
    reason: str = "",
    placement: Ask = Placement.NONE,
    topology_key: str = HOSTNAME,
) -> RecreateStep:
    """The next step towards running the TrainJob on ``target = (gpus, batch)``.

    ``obj`` is the job as read (``None``: there is none), ``record`` its re-creation record
    (``None``: none). ``in_place`` is the answer of this call's dry-run probe (``None``: not
    asked yet): true when the server accepts the patch of a suspended job's ``spec.trainer``.
    ``reason``: the decision's, journaled with the resume (``bellows.io/reason``).
    ``placement``: asked of the pods (on ``topology_key``) through ``spec.runtimePatches``,
    written while the job is suspended: in the copy, or before the resume of a job sized
    in place.
    """
    if obj is None:
        if record is not None and record.created_uid:
            # created once, and gone since (its owner deleted the copy): never again
            return DeleteRecord(record.name, record.resource_version, False)
        if record is not None:
            return CreateJob(dict(record.body))  # deleted by the re-creation: create it
        return Nothing("deleted")
    meta = obj["metadata"]
    notes_now = meta.get("annotations") or {}
    if record is not None and meta.get("uid") == record.old_uid and finished_state(obj):
        # it finished before the delete: nothing to re-create, ever
        return DeleteRecord(record.name, record.resource_version, False)
    if record is not None and meta.get("uid") != record.old_uid:
        # the copy, created (it carries the record's token, which no tenant can know), or
        # someone's new job (whatever its recreated-from says)
        created = notes_now.get(keys.RECREATION) == record.token and (
            record.created_uid in ("", meta.get("uid"))
        )
        now_at = Journal.read(notes_now)
        # done only when the copy runs at this call's target as it was created (journal
        # done there, not halted since): else the call goes on from it
        at_target = now_at.phase is Phase.DONE and now_at.allocation == target
        return DeleteRecord(
            record.name, record.resource_version, created and record.target == target and at_target
        )
    view, journal, notes = reading(kind, obj, env, requested)
    gpus, batch = target
    pair = keys.format_pair(gpus, batch)
    matches = _spec_matches(kind, obj, gpus, env)
    if (
        journal.phase is Phase.DONE
        and journal.target == target == journal.allocation
        and not view.suspended
        and matches
    ):
        return Nothing("already running at the target")
    suspend = kind.suspend_spec(True)
    ongoing = journal.target == target and journal.phase in (Phase.SUSPENDING, Phase.PATCHED)
    if not ongoing or not view.suspended:
        notes |= {keys.TARGET: pair, keys.PHASE: Phase.SUSPENDING}
        if not view.suspended:
            notes[keys.SUSPENDED_AT] = _stamp(now)
        return SendPatch(_body(obj, notes, suspend), Phase.SUSPENDING)
    if not kind.halted(obj, journal.suspended_at):
        return AwaitHalt()
    placed = kind.placement_patch(obj, placement, topology_key)  # {} once asked
    if matches:  # patched in place (a future Trainer), or sized before its first start
        if placed:  # runtimePatches change only while suspended: before the resume
            notes |= {keys.PHASE: Phase.PATCHED}
            return SendPatch(_body(obj, notes, placed), Phase.PATCHED)
        notes |= done_notes(target, done, now, journal=journal, reason=reason)
        return SendPatch(_body(obj, notes, kind.suspend_spec(False)), Phase.DONE)
    if in_place is None:
        return ProbeInPlace(_body(obj, {}, kind.scale_patch(obj, gpus, env)))
    if in_place:
        notes |= {keys.PHASE: Phase.PATCHED}
        spec = kind.scale_patch(obj, gpus, env) | placed
        return SendPatch(_body(obj, notes, spec), Phase.PATCHED)
    if record is None or record.source != fingerprint(obj) or record.target != target:
        return new_record(
            kind, obj, record, target=target, env=env, done=done, now=now, journal=journal,
            reason=reason, placement=placement, topology_key=topology_key,
        )  # fmt: skip
    return DeleteJob(meta["uid"], meta["resourceVersion"])
