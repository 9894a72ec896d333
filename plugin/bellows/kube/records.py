"""The re-creation record of a TrainJob: where it lives, what it holds, and how it is checked.

A resize that deletes a TrainJob to create it again (``bellows.kube.recreation``) first
writes what it will create in a ConfigMap, its **record**. The record decides what the
controller creates, so no tenant may write it: it lives in the **records namespace**
(``controller.trainer.recordsNamespace``, by default the namespace of the controller's
leader-election Lease, the release namespace), which only the controller writes. Records
found anywhere else (a tenant's namespace: the old layout, or forged) are never read nor
deleted; a tenant's ConfigMap is the tenant's.

One namespace holds the records of every namespace's TrainJobs, so a record's name is a
hash of the job's namespace and name (:func:`record_name`: unique per job, at most 57
characters whatever the names), and the record says both in its data and its labels.

What the location cannot promise (a record half written, edited by hand, or written by an
older controller with another layout) is checked on read (:func:`read_record`): the record
must be named after the job it names, and its body must be that job and only that job:
a ``TrainJob`` of that name and namespace (no ``generateName``), carrying the record's
``recreated-from`` (the old uid) and its random token, the digest of its text as recorded,
and the *successor* of the job the record was built from: the old job's kept fields
(``source.json``, whose fingerprint the record keeps too) with only the fields a resize
changes changed (``spec.trainer.numNodes``, the batch env Bellows sets, ``spec.suspend``,
the runtime patches of Kueue and of Bellows' placement, and the ``bellows.io/`` journal),
sized at the record's target. A record that fails any check is a :class:`BadRecord`: the
controller reports it and never acts on it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.kinds import KindAdapter

__all__ = [
    "DEFAULT_RECORDS_NAMESPACE",
    "RECORD_LABEL",
    "RECORD_NAMESPACE_LABEL",
    "BadRecord",
    "Record",
    "fingerprint",
    "kept_fields",
    "new_token",
    "read_record",
    "record_body",
    "record_name",
]

DEFAULT_RECORDS_NAMESPACE: Final = "bellows-system"  # leaderElection.namespace's default
RECORD_LABEL: Final = keys.PREFIX + "recreates"  # on the record: the TrainJob's name
RECORD_NAMESPACE_LABEL: Final = keys.PREFIX + "recreates-namespace"  # and its namespace
_MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "bellows"}
_KUEUE_PATCHES: Final = "kueue.x-k8s.io/"  # runtimePatches Kueue writes (re-injected on admit)
_PLACEMENT_MANAGER: Final = "bellows.io/placement"  # Bellows' entry of spec.runtimePatches
_RESIZED_SPEC: Final = ("trainer", "suspend", "runtimePatches")
_RESIZED_TRAINER: Final = ("numNodes", "env")


def record_name(namespace: str, job: str) -> str:
    """The record ConfigMap of TrainJob ``namespace/job`` in the records namespace."""
    digest = hashlib.sha256(f"{namespace}/{job}".encode()).hexdigest()[:40]
    return f"bellows-recreate-{digest}"


def new_token() -> str:
    """A record's token: random, so that no tenant can guess the one its copy will carry."""
    return secrets.token_hex(16)


def kept_fields(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a record is built from: the job's uid, labels, annotations, owner references,
    finalizers and spec (not its status nor its resourceVersion, which the Trainer bumps)."""
    meta = obj.get("metadata") or {}
    return {
        "uid": meta.get("uid"),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "ownerReferences": meta.get("ownerReferences") or [],
        "finalizers": meta.get("finalizers") or [],
        "spec": obj.get("spec") or {},
    }


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def fingerprint(obj: Mapping[str, Any]) -> str:
    """The fingerprint of :func:`kept_fields`: a record built from ``obj`` keeps it."""
    return _digest(kept_fields(obj))


@dataclass(frozen=True)
class Record:
    """A re-creation under way, as read from its ConfigMap (every check passed)."""

    name: str
    resource_version: str
    namespace: str  # the TrainJob's
    job: str
    old_uid: str
    source: str  # fingerprint of the TrainJob it was built from
    target: tuple[int, int] | None
    body: Mapping[str, Any]  # the TrainJob to create
    token: str = ""
    created_uid: str = ""  # the copy's uid, once this record's create succeeded


@dataclass(frozen=True)
class BadRecord:
    """A ConfigMap of the records namespace that is no record Bellows acts on, and why."""

    name: str
    namespace: str  # the TrainJob's, as the record says ("" when it says none)
    job: str  # its name, as the record says ("" when it says none)
    problem: str


def record_body(
    obj: Mapping[str, Any],
    new: Mapping[str, Any],
    target: tuple[int, int],
    *,
    records_namespace: str,
    token: str,
    env_names: Sequence[str] = (),
) -> dict[str, Any]:
    """The record ConfigMap of the re-creation of ``obj`` as ``new`` (which carries
    ``token``); ``env_names``: the batch env variables the resize sets. An empty
    ``records_namespace`` leaves it to the namespace the ConfigMap is written in."""
    meta = obj["metadata"]
    text = json.dumps(new, sort_keys=True)
    record_meta: dict[str, Any] = {
        "name": record_name(meta["namespace"], meta["name"]),
        "labels": {
            **_MANAGED_BY,
            RECORD_LABEL: meta["name"],
            RECORD_NAMESPACE_LABEL: meta["namespace"],
        },
    }
    if records_namespace:
        record_meta["namespace"] = records_namespace
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": record_meta,
        "data": {
            "namespace": meta["namespace"],
            "job": meta["name"],
            "trainjob.json": text,
            "digest": hashlib.sha256(text.encode()).hexdigest(),
            "source.json": json.dumps(kept_fields(obj), sort_keys=True),
            "old-uid": meta["uid"],
            "source": fingerprint(obj),
            "target": keys.format_pair(*target),
            "token": token,
            "resized-env": json.dumps(sorted(env_names)),
        },
    }


def read_record(
    kind: KindAdapter, obj: Mapping[str, Any], *, records_namespace: str
) -> Record | BadRecord:
    """The record in ConfigMap ``obj`` of the records namespace, or why it is none."""
    meta = obj.get("metadata") or {}
    data = obj.get("data") or {}
    name = str(meta.get("name", ""))
    namespace, job = str(data.get("namespace", "")), str(data.get("job", ""))
    try:
        record = _parsed(kind, meta, data, records_namespace)
    except (KeyError, ValueError, TypeError, AttributeError, SpecError) as err:
        refused = isinstance(err, _RefusedError)
        problem = str(err) if refused else f"unreadable ({type(err).__name__})"
        return BadRecord(name, namespace, job, problem)
    return record


class _RefusedError(ValueError):
    """One check of a record failed (its message says which)."""


def _require(ok: bool, problem: str) -> None:
    if not ok:
        raise _RefusedError(problem)


def _parsed(
    kind: KindAdapter, meta: Mapping[str, Any], data: Mapping[str, Any], records_namespace: str
) -> Record:
    """The record, every check passed (else :class:`_RefusedError` or a parse error)."""
    namespace, job, old_uid = str(data["namespace"]), str(data["job"]), str(data["old-uid"])
    _require(bool(namespace and job and old_uid), "names no job (namespace, job, old-uid)")
    _require(meta.get("namespace") == records_namespace, "not in the records namespace")
    _require(meta.get("name") == record_name(namespace, job), f"not {namespace}/{job}'s name")
    labels = meta.get("labels") or {}
    _require(
        labels.get(RECORD_LABEL) == job and labels.get(RECORD_NAMESPACE_LABEL) == namespace,
        "its labels name another job",
    )
    text = str(data["trainjob.json"])
    _require(hashlib.sha256(text.encode()).hexdigest() == data.get("digest"), "digest differs")
    body = json.loads(text)
    source = json.loads(str(data["source.json"]))
    _require(isinstance(body, dict) and isinstance(source, dict), "body or source not objects")
    target = keys.parse_pair(keys.TARGET, data.get("target"))
    _require(target is not None, "no target")
    assert target is not None
    token = str(data.get("token", ""))
    _check_body(kind, body, namespace=namespace, job=job, old_uid=old_uid, token=token)
    _require(source.get("uid") == old_uid, "its source is not the job it deleted")
    _require(_digest(source) == data.get("source"), "its source's fingerprint differs")
    resized = json.loads(str(data.get("resized-env", "[]")))
    _require(isinstance(resized, list), "resized-env not a list")
    _check_successor(kind, source, body, target, {str(n) for n in resized})
    return Record(
        name=str(meta["name"]),
        resource_version=str(meta.get("resourceVersion", "")),
        namespace=namespace,
        job=job,
        old_uid=old_uid,
        source=str(data["source"]),
        target=target,
        body=body,
        token=token,
        created_uid=str(data.get("created-uid", "")),
    )


def _check_body(
    kind: KindAdapter,
    body: Mapping[str, Any],
    *,
    namespace: str,
    job: str,
    old_uid: str,
    token: str,
) -> None:
    """The body is that one TrainJob, the copy of ``old_uid`` this record made."""
    meta = body.get("metadata") or {}
    _require(body.get("kind") == kind.kind, f"its body is not a {kind.kind}")
    _require(str(body.get("apiVersion", "")).startswith(f"{kind.group}/"), "its body's apiVersion")
    _require("generateName" not in meta, "its body has a generateName")
    _require(
        meta.get("name") == job and meta.get("namespace") == namespace,
        f"its body is not {namespace}/{job}",
    )
    notes = meta.get("annotations") or {}
    _require(notes.get(keys.RECREATED_FROM) == old_uid, "its body re-creates another uid")
    _require(bool(token) and notes.get(keys.RECREATION) == token, "its body lacks its token")
    _require(set(meta) <= {"name", "namespace", "labels", "annotations", "ownerReferences",
                           "finalizers"}, "its body's metadata has more")  # fmt: skip


def _check_successor(
    kind: KindAdapter,
    source: Mapping[str, Any],
    body: Mapping[str, Any],
    target: tuple[int, int],
    resized_env: set[str],
) -> None:
    """``body`` is ``source`` with only what a resize to ``target`` changes changed."""
    meta = body.get("metadata") or {}
    for field in ("labels", "ownerReferences", "finalizers"):
        _require((meta.get(field) or _empty(field)) == source[field], f"its {field} differ")
    ours = keys.PREFIX
    theirs = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(ours)}
    was = {k: v for k, v in source["annotations"].items() if not k.startswith(ours)}
    _require(theirs == was, "its owner's annotations differ")
    spec, old = body.get("spec") or {}, source["spec"]
    _require(
        {k: v for k, v in spec.items() if k not in _RESIZED_SPEC}
        == {k: v for k, v in old.items() if k not in _RESIZED_SPEC},
        "its spec differs beyond a resize",
    )
    _require(isinstance(spec.get("suspend", False), bool), "spec.suspend not a boolean")
    trainer, was_trainer = spec.get("trainer") or {}, old.get("trainer") or {}
    _require(
        {k: v for k, v in trainer.items() if k not in _RESIZED_TRAINER}
        == {k: v for k, v in was_trainer.items() if k not in _RESIZED_TRAINER},
        "its spec.trainer differs beyond a resize",
    )

    def kept_env(entries: Any) -> list[Any]:
        return [e for e in entries or [] if e.get("name") not in resized_env]

    _require(
        kept_env(trainer.get("env")) == kept_env(was_trainer.get("env")),
        "its env differs beyond the batch",
    )
    _require(kind.view(body, ()).gpus == target[0], "not sized at its target")

    def others(patches: Any) -> list[Any]:
        return [
            p
            for p in patches or []
            if p.get("manager") != _PLACEMENT_MANAGER
            and not str(p.get("manager", "")).startswith(_KUEUE_PATCHES)
        ]

    _require(
        others(spec.get("runtimePatches")) == others(old.get("runtimePatches")),
        "its runtime patches differ beyond Bellows' and Kueue's",
    )


def _empty(field: str) -> Any:
    return {} if field == "labels" else []
