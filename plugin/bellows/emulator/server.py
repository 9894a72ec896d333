"""The emulated Kubernetes API server: the REST and watch protocol over real HTTP (aiohttp).

It speaks what the ``kubernetes`` client sends: get, list (label and field selectors,
``limit``/``continue``), watch (from a resource version, with ``ADDED``/``MODIFIED``/
``DELETED`` events, a label selector's enter/leave as ``ADDED``/``DELETED``, 410 as an
``ERROR`` event), create (201), replace, patch (JSON merge patch and JSON patch; strategic
merge only for types where it equals a merge patch, else 415; server-side apply is not
emulated and answers 415), delete with preconditions (an object with finalizers is marked,
not deleted, and answered as it now is: ``store.py``), dry runs of every write, delete
included, and the ``status`` subresource. Errors are ``Status`` bodies with the real reasons
and codes. ``requests`` (when given) counts every request by method and path.

It is as strict as kube-apiserver with what it is sent: a body that is not UTF-8 JSON (or
nests deeper than the store allows) is a 400, one over 3 MiB a 413; a body whose fields do
not decode (``metadata.name`` a list) a 400, an object that decodes but is invalid a 422
whose ``details.causes`` name the fields. Query parameters are integers where the server
parses them as such (``limit``, ``timeoutSeconds``, ``resourceVersion``): anything else,
``nan`` included, is a 400. No request makes it answer 5xx (the fuzz tests hold it to that).

For ``kubectl`` it also serves discovery (``discovery.py``: ``/api``, ``/apis``, the group
versions' resource lists, aggregated discovery v2) and ``Table`` answers to a get, list or
watch that asks for them (``tables.py``: ``kubectl get``'s server-side printing).

Its access lines (:class:`AccessLog`, the runner's ``access_log_class``) are debug lines of
the ``bellows.emulator.access`` logger: a demo's plain logs are the stack's, not every
request of its clients (they were most of the lines).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from bellows.emulator.discovery import add_discovery_routes
from bellows.emulator.faults import Faults
from bellows.emulator.metadata import go_type
from bellows.emulator.patching import PatchError, check_json_patch, json_patch, merge_patch
from bellows.emulator.resources import ResourceType
from bellows.emulator.selectors import (
    EVENT_FIELDS,
    POD_FIELDS,
    SelectorError,
    field_selector,
    label_selector,
)
from bellows.emulator.store import MAX_DEPTH, ApiError, Change, Store
from bellows.emulator.tables import table, table_event, table_include
from bellows.inputs import SpecError, check_int, parse_int, parse_json

__all__ = ["ACCESS_LOGGER", "MAX_BODY_BYTES", "MAX_WATCH_TIMEOUT_S", "AccessLog", "build_app"]

_WATCH_TRUE = ("true", "1", "True")
_MERGE = "application/merge-patch+json"
_JSON_PATCH = "application/json-patch+json"
_STRATEGIC = "application/strategic-merge-patch+json"
MAX_BODY_BYTES = 3 * 1024 * 1024  # kube-apiserver's MaxRequestBodyBytes
_INT64_MAX = 2**63 - 1
# timeoutSeconds is an int64 there, turned into a time.Duration (int64 nanoseconds): above
# this it would overflow, so the emulator refuses it rather than guess what it becomes
MAX_WATCH_TIMEOUT_S = _INT64_MAX // 1_000_000_000
_DEFAULT_WATCH_S = 1800  # kube-apiserver's --min-request-timeout
_DELETE_OPTIONS = {
    "kind": str,
    "apiVersion": str,
    "propagationPolicy": str,
    "gracePeriodSeconds": int,
    "orphanDependents": bool,
    "dryRun": list,
    "preconditions": dict,
}


@dataclass(frozen=True)
class _Target:
    res: ResourceType
    namespace: str | None
    name: str | None
    subresource: str | None


def _parse(store: Store, path: str) -> _Target:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        api_version, rest = "v1", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        api_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    namespace: str | None = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource {path}")
    res = store.resource(f"{api_version}/{rest[0]}")
    if namespace is not None and not res.namespaced:
        raise ApiError(404, "NotFound", f"{res.plural} is not namespaced")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub not in (None, "status") or (sub == "status" and not res.status_subresource):
        raise ApiError(404, "NotFound", f"subresource {sub!r} of {res.qualified} is not served")
    return _Target(res, namespace, name, sub)


def _status(error: ApiError) -> web.Response:
    return web.json_response(error.status(), status=error.code)


async def _body(request: web.Request) -> Any:
    """The request's JSON body (``None`` when empty), parsed as strictly as the API server."""
    too_large = ApiError(
        413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY_BYTES}"
    )
    try:
        data = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_large from None
    if not data:
        return None
    if len(data) > MAX_BODY_BYTES:
        raise too_large
    try:
        value = parse_json("body", data, max_bytes=MAX_BODY_BYTES, max_depth=MAX_DEPTH)
    except SpecError as err:
        raise ApiError(400, "BadRequest", f"the request body is not valid: {err}") from None
    return _valid_unicode(value) if b"\\u" in data else value


def _valid_unicode(value: Any) -> Any:
    """``value`` with lone UTF-16 surrogates (``"\\ud800"`` escapes) replaced by U+FFFD, as
    Go's decoder does: no later encoding of the object may fail on them."""
    if isinstance(value, str):
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    if isinstance(value, list):
        return [_valid_unicode(v) for v in value]
    if isinstance(value, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in value.items()}
    return value


def _query_int(request: web.Request, name: str, *, default: int, maximum: int = _INT64_MAX) -> int:
    """An integer query parameter, as the API server's parameter codec parses it: anything
    but digits (``nan``, ``1.5``, ``-1``, ``²``) is a 400 that names it."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse_int(name, raw, minimum=0, maximum=maximum)
    except SpecError as err:
        raise ApiError(400, "BadRequest", str(err)) from None


ACCESS_LOGGER = "bellows.emulator.access"


class AccessLog(AbstractAccessLogger):
    """One debug line per request on :data:`ACCESS_LOGGER` (whatever logger aiohttp hands
    it): method, path and query, status, bytes and milliseconds; nothing is formatted while
    debug is off."""

    def __init__(self, logger: logging.Logger, log_format: str) -> None:
        super().__init__(logging.getLogger(ACCESS_LOGGER), log_format)

    @property
    def enabled(self) -> bool:
        return self.logger.isEnabledFor(logging.DEBUG)

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.debug(
            "%s %s %d %d B %.1f ms", request.method, request.path_qs, response.status,
            response.body_length, time * 1000.0,
        )  # fmt: skip


def _authenticator(tokens: Collection[str]) -> Any:
    """A middleware answering 401 (a ``Status``, as the API server) to a request without
    ``Authorization: Bearer T`` for a ``T`` of ``tokens``: the check a client's
    credentials (a static token, an ``exec`` plugin's) must pass."""
    accepted = frozenset(tokens)

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or token not in accepted:  # the scheme: any case
            return _status(ApiError(401, "Unauthorized", "Unauthorized"))
        response: web.StreamResponse = await handler(request)
        return response

    return authenticate


def build_app(
    store: Store,
    *,
    faults: Faults | None = None,
    requests: Counter[tuple[str, str]] | None = None,
    tokens: Collection[str] | None = None,
) -> web.Application:
    """The aiohttp application serving ``store``, failing what ``faults`` says (fault tests),
    counting each request in ``requests`` by ``(method, path)``. With ``tokens``, every
    request must carry one of them as a bearer token (else 401); without, none is asked."""
    # aiohttp's own limit (1 MiB) would answer a plain-text 413 before the handler runs
    middlewares = [] if tokens is None else [_authenticator(tokens)]
    app = web.Application(client_max_size=MAX_BODY_BYTES + 1, middlewares=middlewares)

    async def version(_: web.Request) -> web.Response:
        return web.json_response(
            {
                "major": "1",
                "minor": "31",
                "gitVersion": "v1.31.0-bellows",
                "platform": "linux/amd64",
            }
        )

    async def handle(request: web.Request) -> web.StreamResponse:
        if requests is not None:
            requests[(request.method, request.path)] += 1
        fault = faults.take(request.method, request.path) if faults is not None else None
        if fault is not None and not fault.after_commit:
            return _status(fault.error())
        try:
            dry = _dry_run(request.query.getall("dryRun", []))
            if dry and request.method not in ("POST", "PUT", "PATCH", "DELETE"):
                raise ApiError(400, "BadRequest", f"dryRun of {request.method} is not emulated")
            target = _parse(store, request.path)
            if request.method == "GET":
                include = table_include(request.headers.get("Accept", ""), request.query)
                if target.name is not None:
                    obj = store.get(target.res, target.namespace or "", target.name)
                    if include is not None:  # kubectl get's server-side printing
                        meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                        return web.json_response(table(target.res, [obj], meta, include=include))
                    return web.json_response(obj)
                if request.query.get("watch") in _WATCH_TRUE:
                    return await _watch(store, request, target, include)
                return _list(store, request, target, include)
            # the body is read before the dry-run scope: the scope must hold no await, or every
            # other write in the loop meanwhile (the emulated controllers', other requests')
            # would be answered as made and dropped, or a dry one stored
            given = await _body(request)
            if request.method == "DELETE" and target.name is not None:
                dry = dry or _dry_run(_delete_options(given).get("dryRun") or [])
            with store.dry_run(dry):
                body, code = _write(store, request, target, given)
            if fault is not None:  # the write landed; the answer is "lost"
                return _status(fault.error())
            return web.json_response(body, status=code)
        except ApiError as err:
            return _status(err)
        except SelectorError as err:
            return _status(ApiError(400, "BadRequest", str(err)))

    app.router.add_get("/version", version)
    add_discovery_routes(app, store)  # /api, /apis and the group versions (discovery.py)
    app.router.add_route("*", r"/{tail:[\s\S]*}", handle)  # any path, newlines too
    return app


def _write(store: Store, request: web.Request, t: _Target, body: Any) -> tuple[Any, int]:
    """The write ``request`` asks for, with its decoded ``body`` (synchronous: see ``handle``)."""
    if request.method == "POST" and t.name is None:
        if t.res.namespaced and t.namespace is None:
            raise ApiError(
                405, "MethodNotAllowed", "create a namespaced object under its namespace"
            )
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        return store.create(t.res, t.namespace, body), 201
    if t.name is None:
        raise ApiError(405, "MethodNotAllowed", f"{request.method} on a collection is not allowed")
    if request.method == "PUT":
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        return store.replace(t.res, t.namespace, t.name, body, subresource=t.subresource), 200
    if request.method == "PATCH":
        change = _patcher(t.res, request.content_type, body)
        return store.update_with(t.res, t.namespace, t.name, change, subresource=t.subresource), 200
    if request.method == "DELETE":
        options = _delete_options(body)
        pre = options.get("preconditions") or {}
        policy = request.query.get("propagationPolicy") or options.get("propagationPolicy")
        deletion = store.delete(
            t.res,
            t.namespace,
            t.name,
            uid=pre.get("uid"),
            resource_version=pre.get("resourceVersion"),
            propagation=policy or "Background",
        )
        if not deletion.gone:  # finalizers left: the object as it is now, being deleted
            # 202 only where the client asked for cascading by orphanDependents=false
            return deletion.obj, 202 if options.get("orphanDependents") is False else 200
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": {
                "name": t.name,
                "group": t.res.group,
                "kind": t.res.plural,
                "uid": deletion.obj["metadata"]["uid"],
            },
        }, 200
    raise ApiError(405, "MethodNotAllowed", f"{request.method} is not allowed")


def _delete_options(body: Any) -> Mapping[str, Any]:
    """The ``DeleteOptions`` body (may be absent), its fields of the types Go decodes."""
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise ApiError(400, "BadRequest", "the DeleteOptions body must be a JSON object")
    for key, kind in _DELETE_OPTIONS.items():
        value = body.get(key)
        if value is None:
            continue
        # bool is an int in Python, never in Go
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ApiError(
                400,
                "BadRequest",
                f"DeleteOptions.{key}: cannot unmarshal {go_type(value)} into a "
                f"{'string' if kind is str else kind.__name__}",
            )
    if not all(isinstance(value, str) for value in body.get("dryRun") or []):
        raise ApiError(400, "BadRequest", "DeleteOptions.dryRun: expected a list of strings")
    pre = body.get("preconditions") or {}
    for key in ("uid", "resourceVersion"):
        if pre.get(key) is not None and not isinstance(pre[key], str):
            raise ApiError(
                400, "BadRequest", f"DeleteOptions.preconditions.{key}: expected a string"
            )
    return body


def _dry_run(values: list[str]) -> bool:
    """Whether a request's ``dryRun`` values (query or ``DeleteOptions``) ask for one; any
    value but ``All`` is a 400, as on the real server."""
    if any(value != "All" for value in values):
        raise ApiError(400, "BadRequest", f"unsupported dryRun {values}: only All is valid")
    return bool(values)


def _patcher(res: ResourceType, content_type: str, body: Any) -> Any:
    if content_type == _STRATEGIC and not res.strategic_merge:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {_JSON_PATCH}, {_MERGE}"
            + ("" if res.group != "batch" else " (strategic merge of batch/v1 is not emulated)"),
        )
    if content_type in (_MERGE, _STRATEGIC):
        if not isinstance(body, Mapping):
            raise ApiError(400, "BadRequest", "a merge patch must be a JSON object")
        return lambda obj: merge_patch(obj, body)
    if content_type == _JSON_PATCH:
        try:
            check_json_patch(body)
        except PatchError as err:
            code, reason = (413, "RequestEntityTooLarge") if err.too_large else (400, "BadRequest")
            raise ApiError(code, reason, str(err)) from None

        def apply(obj: dict[str, Any]) -> Any:
            try:
                return json_patch(obj, body)
            except PatchError as err:
                raise ApiError(422, "Invalid", f"the JSON patch does not apply: {err}") from err

        return apply
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type}) - accepted "
        f"media types include: {_JSON_PATCH}, {_MERGE}",
    )


def _encode_continue(revision: int, after: tuple[str, str]) -> str:
    raw = json.dumps({"rv": revision, "after": list(after)}).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        raw = base64.urlsafe_b64decode(token.encode("utf-8", "surrogatepass"))
        data = parse_json("continue", raw, max_bytes=4096, max_depth=2)
        ns, name = data["after"]
        if not isinstance(ns, str) or not isinstance(name, str):
            raise TypeError("after")
        return check_int("rv", data["rv"], maximum=_INT64_MAX), (ns, name)
    except (ValueError, KeyError, TypeError):  # SpecError and binascii.Error among them
        raise ApiError(400, "BadRequest", "the continue token is invalid") from None


def _selectable(t: _Target) -> Mapping[str, tuple[str, ...]] | None:
    """The fields beyond ``metadata.name``/``namespace`` a list or watch of ``t`` selects on."""
    if t.res.api_version == "v1" and t.res.plural in ("events", "pods"):
        return EVENT_FIELDS if t.res.plural == "events" else POD_FIELDS
    return None


def _list(
    store: Store, request: web.Request, t: _Target, include: str | None = None
) -> web.Response:
    """A list, paged as the API server pages it: every page carries the first page's
    resourceVersion (a watch from it misses nothing changed while paging), the continue
    token names where the next page starts, and one older than a compaction is 410. The
    items are spliced in as the store encoded them (each object once per version)."""
    matchers = [
        label_selector(request.query.get("labelSelector")),
        field_selector(request.query.get("fieldSelector"), _selectable(t)),
    ]
    token = request.query.get("continue")
    after: tuple[str, str] | None = None
    if token:
        revision, after = _decode_continue(token)
        store.check_continue(revision)
    else:
        revision = store.revision
    limit = _query_int(request, "limit", default=0)
    page, remaining = store.page_keys(t.res, t.namespace, matchers, after=after, limit=limit)
    items = [store.encoded(t.res, ns, name) for ns, name in page]
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if remaining and page:
        meta["continue"] = _encode_continue(revision, page[-1])
        meta["remainingItemCount"] = remaining
    if include is not None:  # a Table (tables.py) of the page
        objects = [json.loads(item) for item in items]
        return web.json_response(table(t.res, objects, meta, include=include))
    head = {"apiVersion": t.res.api_version, "kind": f"{t.res.kind}List", "metadata": meta}
    body = b"".join((json.dumps(head).encode()[:-1], b', "items": [', b",".join(items), b"]}"))
    return web.Response(body=body, content_type="application/json", charset="utf-8")


def _visible(t: _Target, obj: Mapping[str, Any] | None, matchers: list[Any]) -> bool:
    if obj is None:
        return False
    if t.namespace is not None and obj["metadata"].get("namespace") != t.namespace:
        return False
    return all(m(obj) for m in matchers)


def _event(t: _Target, change: Change, matchers: list[Any]) -> dict[str, Any] | None:
    now = _visible(t, change.obj, matchers)
    before = _visible(t, change.old, matchers)
    if change.kind == "MODIFIED" and now != before:
        # The object entered or left the selected set: the watch cache reports it so.
        return {"type": "ADDED" if now else "DELETED", "object": change.obj}
    if now if change.kind != "DELETED" else before:
        return {"type": change.kind, "object": change.obj}
    return None


async def _watch(
    store: Store, request: web.Request, t: _Target, include: str | None = None
) -> web.StreamResponse:
    matchers = [
        label_selector(request.query.get("labelSelector")),
        field_selector(request.query.get("fieldSelector"), _selectable(t)),
    ]
    since = _query_int(request, "resourceVersion", default=0)
    # 0 (or none) means the server's default: kube-apiserver's minimum request timeout
    timeout = (
        _query_int(request, "timeoutSeconds", default=0, maximum=MAX_WATCH_TIMEOUT_S)
        or _DEFAULT_WATCH_S
    )
    initial: list[dict[str, Any]] = []
    error: ApiError | None = None
    if since == 0:
        items, _ = store.list_objects(t.res, t.namespace, matchers)
        initial = [{"type": "ADDED", "object": obj} for obj in items]
    else:
        try:
            changes = store.changes_since(t.res, since)
        except ApiError as err:
            error = err
            changes = []
        initial = [e for c in changes if (e := _event(t, c, matchers)) is not None]
    queue = store.subscribe(watch=True)  # no await since the snapshot: no change can slip between
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    try:
        await response.prepare(request)
        if error is not None:
            await response.write(
                json.dumps({"type": "ERROR", "object": error.status()}).encode() + b"\n"
            )
            return response
        for event in initial:
            await response.write(json.dumps(_shown(t, event, include)).encode() + b"\n")
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            try:
                change = await asyncio.wait_for(queue.get(), remaining)
            except TimeoutError:
                break
            if change is None:
                break
            if change.resource != t.res.key:
                continue
            line = _event(t, change, matchers)
            if line is not None:
                await response.write(json.dumps(_shown(t, line, include)).encode() + b"\n")
    except ConnectionResetError:
        pass  # the client went away
    finally:
        store.unsubscribe(queue)
    return response


def _shown(t: _Target, event: dict[str, Any], include: str | None) -> dict[str, Any]:
    """A watch event as the request asked for it: its object plain, or a Table's row."""
    return event if include is None else table_event(t.res, event, include)
