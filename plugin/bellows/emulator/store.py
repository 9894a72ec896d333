"""The emulated API server's object store: versions, optimistic concurrency, watch history.

Every write gets the next ``resourceVersion`` from one counter (as etcd's revision), so a
write computed from an older version is answered with 409, a watch can resume from any
version still in the history and one older than the history is answered with 410 Gone.
``uid`` and ``creationTimestamp`` are assigned on create and immutable; ``generation`` counts
changes outside ``metadata`` and ``status``; a write that changes nothing changes no version
and sends no event; deleting an owner deletes its dependents (``ownerReferences``), as the
garbage collector does. All of it runs on one event loop, without locks.

Finalizers as kube-apiserver's registry handles them (none of the emulated types deletes
gracefully, so every one is treated as a custom resource is): a delete of an object whose
``metadata.finalizers`` is not empty marks it instead (``deletionTimestamp`` now,
``deletionGracePeriodSeconds`` 0, ``generation`` + 1: a MODIFIED event) and answers it as it
now is; a second delete changes nothing. While it is being deleted no finalizer may be added
(422, Forbidden), ``deletionTimestamp`` and ``deletionGracePeriodSeconds`` stay what the
server set (a client setting either on a live object is a 422: immutable), and the update
that removes the last finalizer deletes it (one DELETED event, no MODIFIED before it), its
dependents collected then (a ``Background`` delete) or when it was marked (``Orphan``,
``Foreground``: the garbage collector works at once here).

A create or replace body whose type or object metadata does not decode (``metadata.name`` a
list) is a bad request (400), and a patch that yields one is invalid (422), as on the real
server. Objects nest at most :data:`MAX_DEPTH` levels: a deliberate limit of the emulator
(Go's decoder allows 10 000), so that no write can make a later one recurse too deep.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import copy
import json
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from bellows.emulator.errors import ApiError, rfc3339
from bellows.emulator.metadata import go_type, metadata_problems, type_problems
from bellows.emulator.resources import ResourceType
from bellows.emulator.schemas import FieldProblem
from bellows.emulator.selectors import Matcher
from bellows.inputs import json_depth

__all__ = ["MAX_DEPTH", "ApiError", "Change", "Deletion", "Store", "rfc3339"]

MAX_DEPTH = 64  # nesting of lists and objects in one object; real ones stay under 20
NAME_LABEL = "kubernetes.io/metadata.name"  # the label the API server gives every namespace

Admission = Callable[[ResourceType, Mapping[str, Any]], list[FieldProblem]]


@dataclass(frozen=True)
class Change:
    """One entry of the watch history: what happened to which object at which version."""

    rv: int
    resource: str
    kind: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass(frozen=True)
class Deletion:
    """What a delete did: ``gone`` (``obj`` its last version) or, with finalizers left,
    marked and still there (``obj`` as it is now, ``deletionTimestamp`` set)."""

    obj: dict[str, Any]
    gone: bool


def _outside_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class Store:
    """Objects of every served resource type, keyed by ``(resource, namespace, name)``."""

    def __init__(
        self,
        resources: Iterable[ResourceType],
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        admission: Admission | None = None,
        history: int = 10_000,
    ) -> None:
        self.resources = {r.key: r for r in resources}
        self._now = now
        self._admission = admission
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._history: deque[Change] = deque(maxlen=history)
        self._revision = 0
        self._dry = False  # inside dry_run(): writes are checked, not stored
        self._compacted = 0  # versions at or below this one are gone from the history
        # Each resource's (namespace, name) keys in order, as of a revision (a list pages
        # through it without sorting every object again), and each stored object's JSON,
        # valid while that very object is the stored one (a write stores a new object).
        # each resource's (namespace, name) in order; dropped when one is created or deleted
        self._sorted: dict[str, list[tuple[str, str]]] = {}
        self._encoded: dict[tuple[str, str, str], tuple[dict[str, Any], bytes]] = {}
        # Every subscriber's queue, and whether it serves an HTTP watch (close_watches ends those).
        self._subscribers: dict[asyncio.Queue[Change | None], bool] = {}
        # the propagation policy of each object being deleted (uid): applied when it goes
        self._policies: dict[str, str] = {}
        self.writes: list[
            tuple[str, str, str, str]
        ] = []  # (verb, resource, ns, name): create, update, update/status, terminate, delete
        self.create_namespace("default")

    # ----- reading -------------------------------------------------------------------------

    @property
    def revision(self) -> int:
        return self._revision

    def resource(self, key: str) -> ResourceType:
        if key not in self.resources:
            raise ApiError(404, "NotFound", f"the server could not find the resource {key}")
        return self.resources[key]

    def get(self, res: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self._objects.get((res.key, namespace, name))
        if obj is None:
            raise ApiError(
                404,
                "NotFound",
                f'{res.qualified} "{name}" not found',
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        return copy.deepcopy(obj)

    def list_objects(
        self, res: ResourceType, namespace: str | None, matchers: Iterable[Matcher] = ()
    ) -> tuple[list[dict[str, Any]], int]:
        checks = list(matchers)
        key = res.key
        found = (
            self._objects[(key, ns, name)]
            for ns, name in self._keys(key)
            if namespace is None or ns == namespace
        )
        items = [copy.deepcopy(obj) for obj in found if all(m(obj) for m in checks)]
        return items, self._revision

    def encoded(self, res: ResourceType, ns: str, name: str) -> bytes:
        """The stored object's JSON, encoded once per stored version (a list's items)."""
        key = res.key
        obj = self._objects[(key, ns, name)]
        hit = self._encoded.get((key, ns, name))
        if hit is not None and hit[0] is obj:
            return hit[1]
        try:
            raw = orjson.dumps(obj)
        except orjson.JSONEncodeError:  # an integer over 64 bits, a lone surrogate: as json
            raw = json.dumps(obj).encode()
        self._encoded[(key, ns, name)] = (obj, raw)
        return raw

    def _keys(self, key: str) -> list[tuple[str, str]]:
        cached = self._sorted.get(key)
        if cached is None:
            cached = self._sorted[key] = sorted((ns, n) for (k, ns, n) in self._objects if k == key)
        return cached

    def page_keys(
        self,
        res: ResourceType,
        namespace: str | None,
        matchers: Iterable[Matcher] = (),
        *,
        after: tuple[str, str] | None = None,
        limit: int = 0,
    ) -> tuple[list[tuple[str, str]], int]:
        """Up to ``limit`` (0: all) objects' (namespace, name) in that order after ``after``,
        and how many more match: a list's page (its items: :meth:`encoded`)."""
        checks = list(matchers)
        keys = self._keys(res.key)
        start = 0 if after is None else bisect.bisect_right(keys, after)
        if namespace is not None:
            start = max(start, bisect.bisect_left(keys, (namespace, "")))
            end = bisect.bisect_left(keys, (namespace + "\0", ""))
        else:
            end = len(keys)
        if not checks:
            page = keys[start:end][:limit] if limit > 0 else keys[start:end]
            return page, end - start - len(page)
        matching = [
            k for k in keys[start:end] if all(m(self._objects[(res.key, *k)]) for m in checks)
        ]
        page = matching[:limit] if limit > 0 else matching
        return page, len(matching) - len(page)

    def check_continue(self, rv: int) -> None:
        """410 when a list continued from version ``rv`` can no longer be consistent."""
        if rv < self._compacted or rv > self._revision:
            raise ApiError(
                410,
                "Expired",
                "The provided continue parameter is too old to display a consistent list "
                "result. You can start a new list without the continue parameter.",
            )

    def changes_since(self, res: ResourceType, rv: int) -> list[Change]:
        """History entries of ``res`` after version ``rv``; 410 when ``rv`` is compacted."""
        if rv < self._compacted or (self._history and rv < self._history[0].rv - 1):
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self._compacted})")
        return [c for c in self._history if c.rv > rv and c.resource == res.key]

    def compact(self) -> None:
        """Forget the watch history, as etcd compaction does (watches from older versions 410)."""
        self._history.clear()
        self._compacted = self._revision

    def subscribe(self, *, watch: bool = False) -> asyncio.Queue[Change | None]:
        """A queue of every later change; ``None`` in it means the server is stopping."""
        queue: asyncio.Queue[Change | None] = asyncio.Queue()
        self._subscribers[queue] = watch
        return queue

    def unsubscribe(self, queue: asyncio.Queue[Change | None]) -> None:
        self._subscribers.pop(queue, None)

    def close_watches(self) -> None:
        """End every open HTTP watch (the server stops, or a test cuts the streams)."""
        for queue, watch in list(self._subscribers.items()):
            if watch:
                queue.put_nowait(None)

    # ----- writing -------------------------------------------------------------------------

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> None:
        """Create namespace ``name`` (if missing) with ``labels`` and, as the API server
        adds it to every namespace, ``kubernetes.io/metadata.name: <name>``."""
        res = self.resources["v1/namespaces"]
        if (res.key, "", name) not in self._objects:
            meta = {"name": name, "labels": {**(labels or {}), NAME_LABEL: name}}
            self.create(res, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})

    def create(
        self, res: ResourceType, namespace: str | None, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        obj = _decoded(res, body)
        meta = obj.setdefault("metadata", {})
        ns = self._namespace(res, namespace, meta)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{secrets.token_hex(3)[:5]}"
        name = meta.get("name")
        if not name:
            raise ApiError(
                422,
                "Invalid",
                "name or generateName is required",
                causes=[FieldProblem("metadata.name", None, "a required field")],
            )
        if (res.key, ns, name) in self._objects:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{res.qualified} "{name}" already exists',
                details={"name": name, "group": res.group, "kind": res.plural},
            )
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=rfc3339(self._now()), generation=1)
        meta.pop("resourceVersion", None)
        meta.pop("deletionTimestamp", None)
        meta.pop("deletionGracePeriodSeconds", None)
        if res.status_subresource and not res.status_on_create:
            obj.pop("status", None)
        obj = self._admit(res, obj)
        return self._commit(res, ns, name, obj, None, verb="create")

    def replace(
        self,
        res: ResourceType,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        ns = namespace or ""
        current = self.get(res, ns, name)
        obj = _decoded(res, body)
        meta = obj.get("metadata")
        if meta is None:
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if meta.get("name", name) != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) "
                f"does not match the name on the URL ({name})",
            )
        expected = meta.get("resourceVersion")
        if expected in (None, "") and not res.unconditional_update and subresource is None:
            raise ApiError(
                422,
                "Invalid",
                f'{res.qualified} "{name}" is invalid',
                causes=[
                    FieldProblem(
                        "metadata.resourceVersion", None, "must be specified for an update"
                    )
                ],
            )
        return self._update(
            res, ns=ns, current=current, obj=obj, expected=expected, subresource=subresource
        )

    def update_with(
        self,
        res: ResourceType,
        namespace: str | None,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Apply ``change`` to the current object (a patch); the result's version is checked."""
        ns = namespace or ""
        current = self.get(res, ns, name)
        obj = change(copy.deepcopy(current))
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            raise ApiError(422, "Invalid", "the patched object must keep its metadata object")
        _within_depth(res, obj)
        if problems := type_problems(obj):
            raise _invalid(res, obj, problems)
        _drop_nulls(obj["metadata"])
        expected = obj["metadata"].get("resourceVersion")
        return self._update(
            res, ns=ns, current=current, obj=obj, expected=expected, subresource=subresource
        )

    def delete(
        self,
        res: ResourceType,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str = "Background",
    ) -> Deletion:
        """Delete the object (preconditions ``uid`` and ``resource_version`` checked), or,
        while it has finalizers, mark it as being deleted (see the module's docstring)."""
        ns = namespace or ""
        current = self.get(res, ns, name)
        meta = current["metadata"]
        if uid is not None and uid != meta["uid"]:
            raise ApiError(
                409,
                "Conflict",
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {meta['uid']}",
            )
        if resource_version is not None and resource_version != meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                "Precondition failed: ResourceVersion in precondition: "
                f"{resource_version}, ResourceVersion in object meta: "
                f"{meta['resourceVersion']}",
            )
        if propagation not in ("Background", "Foreground", "Orphan"):
            raise ApiError(
                400,
                "BadRequest",
                f"propagationPolicy {propagation!r} is invalid: "
                "expected Background, Foreground or Orphan",
            )
        if meta.get("finalizers"):
            return Deletion(self._mark_deleted(res, ns, current, propagation), gone=False)
        return Deletion(self._remove(res, ns, current, propagation), gone=True)

    def _mark_deleted(
        self, res: ResourceType, ns: str, current: dict[str, Any], propagation: str
    ) -> dict[str, Any]:
        """Mark ``current`` as being deleted (``markAsDeleting``); it stays until an update
        removes its last finalizer. Already marked: nothing changes (no version, no event)."""
        if current["metadata"].get("deletionTimestamp"):
            return current
        obj = copy.deepcopy(current)
        meta = obj["metadata"]
        meta["deletionTimestamp"] = rfc3339(self._now())
        meta["deletionGracePeriodSeconds"] = 0
        meta["generation"] = int(meta.get("generation", 1)) + 1
        marked = self._commit(res, ns, meta["name"], obj, current, verb="terminate")
        if not self._dry:
            self._policies[meta["uid"]] = propagation
            if propagation != "Background":  # the orphan/foregroundDeletion finalizers' work
                self._collect(meta["uid"], orphan=propagation == "Orphan")
        return marked

    def _remove(
        self, res: ResourceType, ns: str, current: dict[str, Any], propagation: str
    ) -> dict[str, Any]:
        """Delete ``current`` from the store (DELETED event), then its dependents."""
        meta = current["metadata"]
        name = meta["name"]
        gone = copy.deepcopy(current)
        if self._dry:
            return gone
        del self._objects[(res.key, ns, name)]
        self._sorted.pop(res.key, None)
        self._encoded.pop((res.key, ns, name), None)
        self._revision += 1
        gone["metadata"]["resourceVersion"] = str(self._revision)
        self._record(Change(self._revision, res.key, "DELETED", gone, current))
        self.writes.append(("delete", res.key, ns, name))
        policy = self._policies.pop(meta["uid"], propagation)
        self._collect(meta["uid"], orphan=policy == "Orphan")
        return copy.deepcopy(gone)

    # ----- internals -----------------------------------------------------------------------

    def _namespace(self, res: ResourceType, namespace: str | None, meta: dict[str, Any]) -> str:
        if not res.namespaced:
            meta.pop("namespace", None)
            return ""
        ns = namespace or meta.get("namespace") or ""
        if meta.get("namespace", ns) != ns:
            raise ApiError(
                400,
                "BadRequest",
                f"the namespace of the object ({meta['namespace']}) "
                f"does not match the namespace on the URL ({ns})",
            )
        if ("v1/namespaces", "", ns) not in self._objects:
            raise ApiError(
                404,
                "NotFound",
                f'namespaces "{ns}" not found',
                details={"name": ns, "kind": "namespaces"},
            )
        meta["namespace"] = ns
        return ns

    def _update(
        self,
        res: ResourceType,
        *,
        ns: str,
        current: dict[str, Any],
        obj: dict[str, Any],
        expected: object,
        subresource: str | None,
    ) -> dict[str, Any]:
        meta = current["metadata"]
        if expected not in (None, "") and str(expected) != meta["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {res.qualified} "{meta["name"]}": the object '
                "has been modified; please apply your changes to the latest version and try again",
                details={"name": meta["name"], "group": res.group, "kind": res.plural},
            )
        if subresource == "status":
            merged = copy.deepcopy(current)
            if "status" in obj:
                merged["status"] = obj["status"]
            else:
                merged.pop("status", None)
            obj = merged
        elif subresource is not None:
            raise ApiError(404, "NotFound", f"subresource {subresource!r} is not served")
        else:
            if res.status_subresource:
                obj.pop("status", None)
                if "status" in current:
                    obj["status"] = current["status"]
            new_meta = obj["metadata"]
            if new_meta.get("uid") not in (None, "", meta["uid"]):
                raise ApiError(
                    409,
                    "Conflict",
                    f"Precondition failed: UID in precondition: "
                    f"{new_meta['uid']}, UID in object meta: {meta['uid']}",
                )
            for key in ("uid", "creationTimestamp", "name", "namespace", "generation"):
                if key in meta:
                    new_meta[key] = meta[key]
                else:
                    new_meta.pop(key, None)
            _kept_deletion(res, meta, new_meta)
        obj = self._admit(res, obj, current)
        obj["metadata"]["resourceVersion"] = meta["resourceVersion"]
        if obj == current:
            return current  # a no-op write: no new version, no event (as the real server)
        if meta.get("deletionTimestamp") and not obj["metadata"].get("finalizers"):
            # the last finalizer removed: deleted, not written (deleteWithoutFinalizers)
            gone = self._remove(res, ns, current, "Background")
            obj["metadata"]["resourceVersion"] = gone["metadata"]["resourceVersion"]
            return obj
        if _outside_meta(obj) != _outside_meta(current):
            obj["metadata"]["generation"] = int(meta.get("generation", 1)) + 1
        name = meta["name"]
        verb = "update" if subresource is None else f"update/{subresource}"
        return self._commit(res, ns, name, obj, current, verb=verb)

    def _admit(
        self, res: ResourceType, obj: dict[str, Any], old: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        _within_depth(res, obj)
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        obj = res.defaulted(obj)
        label = res.key == "v1/namespaces"  # a namespace's name is a DNS label
        problems = metadata_problems(obj["metadata"], label_name=label) + res.problems(obj, old)
        if self._admission is not None and not problems:
            problems = self._admission(res, obj)
        if problems:
            raise _invalid(res, obj, problems)
        return obj

    @contextlib.contextmanager
    def dry_run(self, dry: bool = True) -> Iterator[None]:
        """Writes inside are checked in full (schema, CEL, admission, versions) and answered
        as if made, but nothing is stored, versioned or watched (``?dryRun=All``); a delete
        is answered as it would be made (preconditions checked) and deletes nothing.

        The flag is the store's: the scope must not await, or a write of another task in the
        same loop meanwhile is taken as dry too (answered, never stored)."""
        before, self._dry = self._dry, dry
        try:
            yield
        finally:
            self._dry = before

    def _commit(
        self,
        res: ResourceType,
        ns: str,
        name: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        *,
        verb: str,
    ) -> dict[str, Any]:
        if self._dry:
            return copy.deepcopy(obj)  # as the server answers a dry run: nothing persisted
        self._revision += 1
        obj["metadata"]["resourceVersion"] = str(self._revision)
        self._objects[(res.key, ns, name)] = obj
        if old is None:  # a new name: the resource's order changes (an update keeps it)
            self._sorted.pop(res.key, None)
        self._encoded.pop((res.key, ns, name), None)
        kind = "ADDED" if old is None else "MODIFIED"
        self._record(Change(self._revision, res.key, kind, copy.deepcopy(obj), old))
        self.writes.append((verb, res.key, ns, name))
        return copy.deepcopy(obj)

    def _record(self, change: Change) -> None:
        self._history.append(change)
        for queue in list(self._subscribers):
            queue.put_nowait(change)

    def _collect(self, owner_uid: str, *, orphan: bool) -> None:
        for (key, ns, name), obj in list(self._objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if not any(ref.get("uid") == owner_uid for ref in refs):
                continue
            if orphan:
                kept = [ref for ref in refs if ref.get("uid") != owner_uid]
                self.update_with(self.resources[key], ns, name, _with_owners(kept))
            elif (key, ns, name) in self._objects:
                self.delete(self.resources[key], ns, name)


def _kept_deletion(res: ResourceType, old: Mapping[str, Any], new: dict[str, Any]) -> None:
    """Keep the server's marks of a deletion in an update's metadata ``new``, as
    ``rest.BeforeUpdate`` and ``ValidateObjectMetaUpdate`` do: ``deletionTimestamp`` and
    ``deletionGracePeriodSeconds`` once set are restored when left out or changed (the
    timestamp) and immutable; set on a live object they are a 422; and no finalizer may be
    added to an object being deleted (422, Forbidden)."""
    problems: list[FieldProblem] = []
    if old.get("deletionTimestamp"):
        new["deletionTimestamp"] = old["deletionTimestamp"]
        added = sorted(set(new.get("finalizers") or []) - set(old.get("finalizers") or []))
        if added:
            listed = ", ".join(f'"{f}"' for f in added)
            message = (
                "no new finalizers can be added if the object is being deleted, "
                f"found new finalizers []string{{{listed}}}"
            )
            problems.append(
                FieldProblem("metadata.finalizers", added, message, "FieldValueForbidden")
            )
    elif new.get("deletionTimestamp"):
        problems.append(
            FieldProblem(
                "metadata.deletionTimestamp", new["deletionTimestamp"], "field is immutable"
            )
        )
    grace = "deletionGracePeriodSeconds"
    if grace in old and grace not in new:
        new[grace] = old[grace]
    if new.get(grace) != old.get(grace):
        problems.append(FieldProblem(f"metadata.{grace}", new.get(grace), "field is immutable"))
    if problems:
        raise _invalid(res, {"metadata": new}, problems)


def _invalid(res: ResourceType, obj: Mapping[str, Any], problems: list[FieldProblem]) -> ApiError:
    """The 422 ``Invalid`` Status: its details name each field (``causes``)."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    name = name if isinstance(name, str) else ""
    summary = "; ".join(p.message() for p in problems[:5])
    return ApiError(
        422,
        "Invalid",
        f'{res.kind}.{res.group or "core"} "{name}" is invalid: {summary}',
        causes=problems,
        details={"name": name, "group": res.group, "kind": res.kind},
    )


def _within_depth(res: ResourceType, obj: Mapping[str, Any]) -> None:
    depth = json_depth(obj)
    if depth > MAX_DEPTH:
        raise _invalid(
            res, obj, [FieldProblem("", f"nested {depth} deep", f"at most {MAX_DEPTH} levels")]
        )


def _drop_nulls(meta: dict[str, Any]) -> None:
    """Null metadata fields decode as absent (Go's zero values)."""
    for key in [k for k, v in meta.items() if v is None]:
        del meta[key]
    for field in ("labels", "annotations"):
        entries = meta.get(field)
        if isinstance(entries, dict):
            meta[field] = {k: v for k, v in entries.items() if v is not None}


def _decoded(res: ResourceType, body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a create or replace ``body``, or the 400 the server answers when its type
    or metadata does not decode (``metadata.name`` a list), or names another type."""
    _within_depth(res, body)
    obj = copy.deepcopy(dict(body))
    problems = type_problems(obj)
    if problems:
        first = problems[0]
        raise ApiError(
            400,
            "BadRequest",
            f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: json: '
            f"cannot unmarshal {go_type(first.value)} into Go struct field {first.field} "
            f"{first.expected}",
        )
    for key, want in (("apiVersion", res.api_version), ("kind", res.kind)):
        if obj.get(key) not in (None, "", want):
            raise ApiError(
                400,
                "BadRequest",
                f"the {key} in the data ({obj[key]}) does not match the expected {key} ({want})",
            )
    if isinstance(obj.get("metadata"), dict):
        _drop_nulls(obj["metadata"])
    elif obj.get("metadata", None) is None:
        obj.pop("metadata", None)
    return obj


def _with_owners(refs: list[dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["ownerReferences"] = refs
        return obj

    return change
