"""Asynchronous access to the Kubernetes API through the official ``kubernetes`` client.

The client is synchronous; every call runs in a worker thread (``asyncio.to_thread``) so
the controller's event loop never blocks, and a watch streams from a thread into an
``asyncio.Queue``. API errors become three typed exceptions (:class:`NotFoundError`,
:class:`ConflictError`, :class:`ExpiredError`); objects travel as plain dicts (``TypedDict`` would
add nothing here: every field is read through an adapter that validates it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import orjson
import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from bellows.inputs import brief
from bellows.kube import kueue
from bellows.kube.deletion import Terminating, deletion_of
from bellows.kube.errors import ConflictError, ExpiredError, NotFoundError
from bellows.kube.kinds import KindAdapter
from bellows.kube.kubeconfig import KubeconfigError, load_configuration

__all__ = [
    "ConflictError",
    "ExpiredError",
    "KubeApi",
    "NotFoundError",
    "client_from_config",
    "described",
    "unavailable",
]

T = TypeVar("T")
Obj = dict[str, Any]
PAGE = 500  # jobs per list request: about 1.5 MB of JSON
NODE_PAGE = 100  # nodes per list request: a node's status lists its images, often 20+ kB


def _translate(err: ApiException) -> Exception:
    error: Exception = err
    if err.status == 404:
        return NotFoundError(str(err.reason))
    if err.status == 409:
        return ConflictError(str(err.reason))
    if err.status == 410:
        return ExpiredError(str(err.reason))
    return error


def described(err: BaseException) -> str:
    """One line for a person on why a call failed, as kubectl words it: ``(403) Forbidden:
    <the server's message>``, ``could not connect to 127.0.0.1:6443 (ConnectionRefusedError:
    ...)``, a kubeconfig's trouble in its own words; else ``Type: first line``."""
    if isinstance(err, ApiException) and err.status:
        message = ""
        with contextlib.suppress(ValueError, AttributeError, TypeError):
            message = str(orjson.loads(err.body or b"{}").get("message") or "")
        reason = f"({err.status}) {err.reason}"
        return f"{reason}: {message}" if message else reason
    if isinstance(err, urllib3.exceptions.MaxRetryError):
        pool = err.pool
        cause = err.reason.__context__ or err.reason if err.reason is not None else err
        where = f"{pool.host}:{pool.port}" if pool is not None else str(err.url)
        return f"could not connect to {where} ({brief(cause)})"
    if isinstance(err, KubeconfigError):
        return str(err)
    return brief(err)


_UNAVAILABLE_STATUS = frozenset({0, 429, 502, 503, 504})


def unavailable(err: BaseException) -> bool:
    """Whether ``err`` says the API server could not be asked or could not answer now (no
    connection, a timeout, too many requests, a gateway or the server unavailable): the
    cluster's trouble, to be retried, never one object's. Any other error of a call about
    one job (a 4xx, a 500, a value no check foresaw) is that job's problem."""
    if isinstance(err, ApiException):
        return err.status is None or err.status in _UNAVAILABLE_STATUS
    cause = err.__cause__
    if isinstance(cause, ApiException):
        return unavailable(cause)
    return isinstance(err, OSError | urllib3.exceptions.HTTPError)


async def _call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return await asyncio.to_thread(fn, *args, **kwargs)
    except ApiException as err:
        raise _translate(err) from err


def client_from_config(
    kubeconfig: Path | None = None, context: str | None = None, *, in_cluster: bool | None = None
) -> k8s.ApiClient:
    """A client from the service account (``in_cluster``; by default in a pod when neither
    ``kubeconfig`` nor ``context`` is named) or from a kubeconfig (default ``$KUBECONFIG``
    or ``~/.kube/config``) and its ``context`` (default: the current one), loaded by
    :func:`bellows.kube.kubeconfig.load_configuration` (:class:`KubeconfigError`: one line)."""
    return k8s.ApiClient(load_configuration(kubeconfig, context, in_cluster=in_cluster))


class KubeApi:
    """The calls Bellows makes, as coroutines over one ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client
        self._custom = k8s.CustomObjectsApi(api_client)
        self._core = k8s.CoreV1Api(api_client)
        self._batch = k8s.BatchV1Api(api_client)

    def _plain(self, model: object) -> Obj:
        out: Obj = self.api_client.sanitize_for_serialization(model)
        return out

    # ----- jobs (custom resources) -----------------------------------------------------------

    async def get_job(self, kind: KindAdapter, namespace: str, name: str) -> Obj | None:
        """The job, or ``None`` when it does not exist."""
        try:
            obj: Obj = await _call(
                self._custom.get_namespaced_custom_object,
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                name,
            )
        except NotFoundError:
            return None
        return obj

    async def list_job_pages(
        self,
        kind: KindAdapter,
        namespace: str | None = None,
        *,
        limit: int = PAGE,
        selector: str | None = None,
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        """The jobs of ``kind`` (in ``namespace``, or all), ``limit`` per page, each with the
        list's resourceVersion (the last page's is the one to watch from).

        The API server's ``limit`` and ``continue`` hand a large collection over in pieces,
        so a caller that drops each page once examined never holds 10 000 raw jobs (tens of
        megabytes of JSON, several times that as Python objects) at once. A continue token
        the server no longer keeps raises :class:`ExpiredError`: list again. ``selector``:
        only the jobs matching that label selector.
        """
        token: str | None = None
        while True:
            options: dict[str, Any] = {"limit": limit, "_preload_content": False}
            if selector:
                options["label_selector"] = selector
            if token:
                options["_continue"] = token
            listed = await _call(self._list_job_json, kind, namespace, **options)
            meta = listed.get("metadata") or {}
            yield list(listed.get("items") or []), str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return

    def _list_job_json(self, kind: KindAdapter, namespace: str | None, **options: Any) -> Obj:
        """One page of jobs, read and decoded (``orjson``: a page is megabytes) in the
        calling (worker) thread; the client's own decoding would parse it with ``json``."""
        if namespace is None:
            response = self._custom.list_cluster_custom_object(
                kind.group, kind.version, kind.plural, **options
            )
        else:
            response = self._custom.list_namespaced_custom_object(
                kind.group, kind.version, namespace, kind.plural, **options
            )
        try:
            data = response.data
        finally:
            response.release_conn()
        try:
            listed: Obj = orjson.loads(data)
        except orjson.JSONDecodeError:  # an integer over 64 bits, a lone surrogate: as json
            listed = json.loads(data)
        return listed

    async def patch_job(
        self, kind: KindAdapter, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> Obj:
        """Apply a JSON merge patch; a ``metadata.resourceVersion`` in it is a precondition."""
        obj: Obj = await _call(
            self._custom.patch_namespaced_custom_object,
            kind.group,
            kind.version,
            namespace,
            kind.plural,
            name,
            dict(patch),
        )
        return obj

    async def dry_run_patch_job(
        self, kind: KindAdapter, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> bool | None:
        """Whether the server would accept this merge patch (``dryRun=All``: checked in
        full, nothing stored): True, False when it is refused as invalid (422), ``None``
        when the job changed since (409). Another answer raises, as every call."""
        try:
            await _call(
                self._custom.patch_namespaced_custom_object,
                kind.group, kind.version, namespace, kind.plural, name, dict(patch),
                dry_run="All",
            )  # fmt: skip
        except ConflictError:
            return None
        except ApiException as err:
            if err.status == 422:
                return False
            raise
        return True

    async def create_job(self, kind: KindAdapter, namespace: str, body: Mapping[str, Any]) -> Obj:
        """Create a job; :class:`ConflictError` when one of that name exists (409)."""
        obj: Obj = await _call(
            self._custom.create_namespaced_custom_object,
            kind.group, kind.version, namespace, kind.plural, dict(body),
        )  # fmt: skip
        return obj

    async def delete_job(
        self, kind: KindAdapter, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool | Terminating:
        """Delete the job: only the one with ``uid``, still at ``resource_version``. True when
        it is gone; :class:`~bellows.kube.deletion.Terminating` (truthy) when the server
        accepted the delete but the job stays until its finalizers are removed (a second
        delete changes nothing); False when it is gone or no longer that one (404 / 409)."""
        body = k8s.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=k8s.V1Preconditions(uid=uid, resource_version=resource_version),
        )
        try:
            return deletion_of(await _call(
                self._answer_json, self._custom.delete_namespaced_custom_object,
                kind.group, kind.version, namespace, kind.plural, name, body=body,
            ))  # fmt: skip
        except (NotFoundError, ConflictError):
            return False

    @staticmethod
    def _answer_json(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> object:
        """The JSON answer of ``fn`` as the server sent it (in the worker thread): the
        client's models would read a delete's answer as a ``V1Status`` even when it is the
        object, its ``deletionTimestamp`` lost."""
        response = fn(*args, _preload_content=False, **kwargs)
        try:
            data = response.data
        finally:
            response.release_conn()
        return json.loads(data) if data else None

    async def watch_jobs(
        self,
        kind: KindAdapter,
        namespace: str | None,
        resource_version: str,
        *,
        name: str | None = None,
        timeout_s: int = 300,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, object)`` events after ``resource_version`` until the server ends the watch.

        Raises :class:`ExpiredError` when that version is too old (list again, then watch).
        """
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        if name is not None:
            kwargs["field_selector"] = f"metadata.name={name}"
        if namespace is None:
            fn: Callable[..., Any] = self._custom.list_cluster_custom_object
            args: tuple[Any, ...] = (kind.group, kind.version, kind.plural)
        else:
            fn = self._custom.list_namespaced_custom_object
            args = (kind.group, kind.version, namespace, kind.plural)
        async for event in _stream(fn, args, kwargs):
            yield event

    # ----- Kueue (kueue.x-k8s.io) ------------------------------------------------------------

    async def get_workload(self, namespace: str, name: str) -> Obj | None:
        """The Workload, or ``None`` when it does not exist."""
        return await self.get_kueue(kueue.WORKLOADS, namespace, name)

    async def list_workloads(self, namespace: str, label_selector: str | None = None) -> list[Obj]:
        """The Workloads in ``namespace`` matching ``label_selector`` (``None``: all)."""
        options: dict[str, Any] = {}
        if label_selector:
            options["label_selector"] = label_selector
        listed: Obj = await _call(
            self._custom.list_namespaced_custom_object,
            kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, **options,
        )  # fmt: skip
        return list(listed.get("items") or [])

    async def patch_workload(self, namespace: str, name: str, patch: Mapping[str, Any]) -> Obj:
        """Apply a JSON merge patch to a Workload; a ``metadata.resourceVersion`` in it is a
        precondition (:class:`ConflictError`); a Workload gone raises :class:`NotFoundError`."""
        obj: Obj = await _call(
            self._custom.patch_namespaced_custom_object,
            kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS, name, dict(patch),
        )  # fmt: skip
        return obj

    async def watch_workloads(
        self,
        namespace: str,
        resource_version: str,
        *,
        name: str | None = None,
        timeout_s: int = 300,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, Workload)`` events in ``namespace`` after ``resource_version`` (only
        ``name``'s when given) until the server ends the watch; :class:`ExpiredError` when
        that version is too old."""
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        if name is not None:
            kwargs["field_selector"] = f"metadata.name={name}"
        args = (kueue.GROUP, kueue.VERSION, namespace, kueue.WORKLOADS)
        async for event in _stream(self._custom.list_namespaced_custom_object, args, kwargs):
            yield event

    async def list_kueue(self, plural: str, namespace: str | None = None) -> tuple[list[Obj], str]:
        """Every Kueue object of ``plural`` (in ``namespace``, or all; ``None`` for the
        cluster-scoped ClusterQueues) and the list's resourceVersion (watch from it)."""
        if namespace is None:
            listed: Obj = await _call(
                self._custom.list_cluster_custom_object, kueue.GROUP, kueue.VERSION, plural
            )
        else:
            listed = await _call(
                self._custom.list_namespaced_custom_object,
                kueue.GROUP, kueue.VERSION, namespace, plural,
            )  # fmt: skip
        meta = listed.get("metadata") or {}
        return list(listed.get("items") or []), str(meta.get("resourceVersion", ""))

    async def watch_kueue(
        self, plural: str, namespace: str | None, resource_version: str, *, timeout_s: int = 300
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, object)`` events of Kueue's ``plural`` after ``resource_version`` until
        the server ends the watch; :class:`ExpiredError` when that version is too old."""
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        if namespace is None:
            fn: Callable[..., Any] = self._custom.list_cluster_custom_object
            args: tuple[Any, ...] = (kueue.GROUP, kueue.VERSION, plural)
        else:
            fn = self._custom.list_namespaced_custom_object
            args = (kueue.GROUP, kueue.VERSION, namespace, plural)
        async for event in _stream(fn, args, kwargs):
            yield event

    async def get_kueue(self, plural: str, namespace: str | None, name: str) -> Obj | None:
        """One Kueue object (``namespace`` ``None`` for a cluster-scoped kind), or ``None``
        when it does not exist."""
        try:
            if namespace is None:
                obj: Obj = await _call(
                    self._custom.get_cluster_custom_object,
                    kueue.GROUP, kueue.VERSION, plural, name,
                )  # fmt: skip
            else:
                obj = await _call(
                    self._custom.get_namespaced_custom_object,
                    kueue.GROUP, kueue.VERSION, namespace, plural, name,
                )  # fmt: skip
        except NotFoundError:
            return None
        return obj

    # ----- other resources -------------------------------------------------------------------

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._plain(await _call(self._core.read_namespaced_config_map, name, namespace))
        except NotFoundError:
            return None

    async def list_configmaps(self, namespace: str | None, label_selector: str) -> list[Obj]:
        """The ConfigMaps matching ``label_selector`` (in ``namespace``, or all)."""
        if namespace is None:
            listed = await _call(
                self._core.list_config_map_for_all_namespaces, label_selector=label_selector
            )
        else:
            listed = await _call(
                self._core.list_namespaced_config_map, namespace, label_selector=label_selector
            )
        return [self._plain(item) for item in listed.items or []]

    async def write_configmap(
        self, namespace: str, body: Mapping[str, Any], *, resource_version: str | None = None
    ) -> Obj:
        """Create the ConfigMap ``body`` (``resource_version`` ``None``), or replace it at
        that version; :class:`ConflictError` when it exists already, or changed since."""
        if resource_version is None:
            made = await _call(self._core.create_namespaced_config_map, namespace, dict(body))
            return self._plain(made)
        meta = {**body["metadata"], "resourceVersion": resource_version}
        name = meta["name"]
        replaced = await _call(
            self._core.replace_namespaced_config_map, name, namespace, {**body, "metadata": meta}
        )
        return self._plain(replaced)

    async def delete_configmap(
        self, namespace: str, name: str, resource_version: str
    ) -> bool | Terminating:
        """Delete the ConfigMap, still at ``resource_version``: True when it is gone,
        :class:`~bellows.kube.deletion.Terminating` when finalizers keep it; False when it
        is gone or changed since."""
        body = k8s.V1DeleteOptions(
            preconditions=k8s.V1Preconditions(resource_version=resource_version)
        )
        try:
            return deletion_of(await _call(
                self._answer_json, self._core.delete_namespaced_config_map,
                name, namespace, body=body,
            ))  # fmt: skip
        except (NotFoundError, ConflictError):
            return False

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease, or ``None`` when it does not exist."""
        coordination = k8s.CoordinationV1Api(self.api_client)
        try:
            return self._plain(await _call(coordination.read_namespaced_lease, name, namespace))
        except NotFoundError:
            return None

    async def get_batch_job(self, namespace: str, name: str) -> Obj | None:
        try:
            return self._plain(await _call(self._batch.read_namespaced_job, name, namespace))
        except NotFoundError:
            return None

    async def delete_batch_job(
        self, namespace: str, name: str, uid: str, *, resource_version: str | None = None
    ) -> bool | Terminating:
        """Delete that batch Job: only the one with ``uid`` (and, when given, still at
        ``resource_version``). True when it is gone, :class:`~bellows.kube.deletion.
        Terminating` when finalizers keep it; False when it is gone or no longer that one."""
        body = k8s.V1DeleteOptions(
            propagation_policy="Background",
            preconditions=k8s.V1Preconditions(uid=uid, resource_version=resource_version),
        )
        try:
            return deletion_of(await _call(
                self._answer_json, self._batch.delete_namespaced_job, name, namespace, body=body
            ))  # fmt: skip
        except (NotFoundError, ConflictError):
            return False  # gone, replaced by a newer Job of the same name, or changed

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        await _call(self._core.create_namespaced_event, namespace, dict(event))

    async def list_events(
        self, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[Obj]:
        """Core Events (of ``namespace``, or all) matching ``field_selector``, as plain dicts
        (read as JSON: an Event model validates fields a recorder may leave out)."""
        options: dict[str, Any] = {"_preload_content": False}
        if field_selector:
            options["field_selector"] = field_selector
        found: list[Obj] = []
        token: str | None = None
        while True:
            if token:
                options["_continue"] = token
            listed = await _call(self._list_event_json, namespace, PAGE, **options)
            found.extend(listed.get("items") or [])
            token = (listed.get("metadata") or {}).get("continue")
            if not token:
                return found

    def _list_event_json(self, namespace: str | None, limit: int, **options: Any) -> Obj:
        """One page of Events, read and decoded in the calling (worker) thread."""
        if namespace is None:
            response = self._core.list_event_for_all_namespaces(limit=limit, **options)
        else:
            response = self._core.list_namespaced_event(namespace, limit=limit, **options)
        try:
            listed: Obj = json.loads(response.data)
        finally:
            response.release_conn()
        return listed

    # ----- namespaces (their labels, for Kueue's namespaceSelector) ---------------------------

    async def list_namespaces(self) -> tuple[list[Obj], str]:
        """Every namespace (as JSON, see :meth:`list_nodes`) and the list's resourceVersion."""
        listed: Obj = await _call(self._list_json, self._core.list_namespace)
        meta = listed.get("metadata") or {}
        return list(listed.get("items") or []), str(meta.get("resourceVersion", ""))

    async def watch_namespaces(
        self, resource_version: str, *, timeout_s: int = 300
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, namespace)`` events after ``resource_version`` until the server ends the
        watch; :class:`ExpiredError` when that version is too old."""
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        async for event in _stream(self._core.list_namespace, (), kwargs, models=False):
            yield event

    def _list_json(self, fn: Callable[..., Any], **options: Any) -> Obj:
        response = fn(_preload_content=False, **options)
        try:
            listed: Obj = json.loads(response.data)
        finally:
            response.release_conn()
        return listed

    # ----- nodes (the cluster's GPUs) ----------------------------------------------------------

    def list_nodes(
        self, selector: str | None = None, *, limit: int = NODE_PAGE
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        """The nodes matching the label ``selector`` (``None``: all), ``limit`` per page, each
        page with the list's resourceVersion (watch from the last one), as plain dicts.

        Nodes are read as JSON, not as the client's models: those validate on the way in,
        so one node with an odd field would fail the whole list. A continue token the
        server no longer keeps raises :class:`ExpiredError`: list again.
        """
        options = {"label_selector": selector} if selector else {}
        return self._pages(self._core.list_node, limit, options)

    async def _pages(
        self, fn: Callable[..., Any], limit: int, options: Mapping[str, Any]
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {**options, "limit": limit}
            if token:
                kwargs["_continue"] = token
            listed = await _call(self._list_json, fn, **kwargs)
            meta = listed.get("metadata") or {}
            yield list(listed.get("items") or []), str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                return

    async def watch_nodes(
        self, selector: str | None, resource_version: str, *, timeout_s: int = 300
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, node)`` events after ``resource_version`` until the server ends the watch;
        a node leaving the selector comes as ``DELETED``. Raises :class:`ExpiredError` when
        that version is too old (list again, then watch)."""
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        if selector:
            kwargs["label_selector"] = selector
        async for event in _stream(self._core.list_node, (), kwargs, models=False):
            yield event

    def list_pods(
        self, namespace: str | None, field_selector: str | None = None, *, limit: int = NODE_PAGE
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        """The pods of ``namespace`` (``None``: every namespace) matching ``field_selector``,
        ``limit`` per page, each page with the list's resourceVersion, as plain dicts (read
        as JSON, as nodes are)."""
        options: dict[str, Any] = {"field_selector": field_selector} if field_selector else {}
        if namespace is None:
            return self._pages(self._core.list_pod_for_all_namespaces, limit, options)
        return self._pages(
            self._core.list_namespaced_pod, limit, {**options, "namespace": namespace}
        )

    async def watch_pods(
        self,
        namespace: str | None,
        field_selector: str | None,
        resource_version: str,
        *,
        timeout_s: int = 300,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """``(type, pod)`` events of ``namespace`` (``None``: every namespace) after
        ``resource_version``; raises :class:`ExpiredError` when that version is too old
        (list again, then watch)."""
        kwargs: dict[str, Any] = {
            "resource_version": resource_version,
            "timeout_seconds": timeout_s,
        }
        if field_selector:
            kwargs["field_selector"] = field_selector
        fn: Callable[..., Any] = self._core.list_pod_for_all_namespaces
        args: tuple[str, ...] = ()
        if namespace is not None:
            fn, args = self._core.list_namespaced_pod, (namespace,)
        async for event in _stream(fn, args, kwargs, models=False):
            yield event


async def _stream(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, models: bool = True
) -> AsyncIterator[tuple[str, Obj]]:
    """Run ``kubernetes.watch`` in a thread; closing the generator ends the HTTP stream.

    ``models=False`` keeps the client from building its models of each object (the events
    carry the raw dicts either way): a model that refuses one odd field would end the watch.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
    response: list[Any] = []
    stopping = threading.Event()

    def opened(*a: Any, **kw: Any) -> Any:
        resp = fn(*a, **kw)
        response.append(resp)
        return resp

    # Watch reads the return type from the docstring; with none named it builds no model
    opened.__doc__ = fn.__doc__ if models else "Raw objects: no return type."

    def post(item: tuple[str, Any]) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed first: nobody is listening
            loop.call_soon_threadsafe(queue.put_nowait, item)

    def run() -> None:
        watcher = k8s_watch.Watch()
        try:
            for event in watcher.stream(opened, *args, **kwargs):
                post(("event", event))
        except Exception as err:
            post(("error", None if stopping.is_set() else err))
        finally:
            post(("end", None))

    thread = threading.Thread(target=run, name="bellows-watch", daemon=True)
    thread.start()
    try:
        while True:
            tag, item = await queue.get()
            if tag == "end":
                return
            if tag == "error" and item is not None:
                if isinstance(item, ApiException):
                    raise _translate(item) from item
                raise item
            if tag == "event":
                yield str(item["type"]), item["raw_object"]
    finally:
        stopping.set()
        for resp in response:
            with contextlib.suppress(Exception):
                resp.shutdown()  # unblocks the thread's read at once
