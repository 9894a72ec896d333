"""Read-only lists from the Kubernetes API over plain HTTP(S), without the ``kubernetes`` package.

``bellows status`` makes a handful of GET requests; importing the official client for them
(700 modules, about half a second, ``benchmarks/status.py``) cost more than the requests.
:class:`ListingApi` makes the same requests with ``http.client``: one keep-alive connection
per worker thread, pages decoded with ``orjson``, the answers as plain dicts and the errors
of :mod:`bellows.kube.errors`.

:func:`endpoint` reads a kubeconfig as ``kubectl`` and the client do: ``--kubeconfig``, else
every file of ``$KUBECONFIG`` merged (the first file naming a cluster, user or context wins),
else ``~/.kube/config``; in a pod without one, its service account. The credentials it knows
are the static ones: a bearer token (``token``, ``tokenFile``), a client certificate and key
(files or ``-data``), a user name and password; the server's CA (file or data),
``insecure-skip-tls-verify`` and ``tls-server-name``. A user with an ``exec`` plugin or an
``auth-provider``, or a cluster behind a ``proxy-url``, raises :class:`NeedsClient`: the
caller then uses the official client, which implements those.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.client
import json
import os
import ssl
import tempfile
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import orjson

from bellows.kube.errors import ConflictError, ExpiredError, NotFoundError
from bellows.kube.kinds import KindAdapter

__all__ = [
    "ApiError",
    "ConfigError",
    "Endpoint",
    "KubeConfig",
    "ListingApi",
    "NeedsClient",
    "endpoint",
    "read_kubeconfig",
]

Obj = dict[str, Any]
PAGE = 500  # jobs or Events per list request, as bellows.kube.client
NODE_PAGE = 100  # nodes per list request: a node's status lists its images
TIMEOUT_S = 60.0  # one request, connection included
ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """The kubeconfig cannot be used: no file, no such context, a field missing or wrong."""


class NeedsClient(Exception):  # noqa: N818 - a signal to fall back, not a failure
    """The kubeconfig's credentials need the official client (an exec plugin, an
    auth-provider, a proxy)."""


class ApiError(Exception):
    """An answer with an HTTP error status: ``(403) Forbidden: <the server's message>``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"({status}) {reason}: {message}" if message else f"({status}) {reason}")
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where and how to send requests: ``server`` without a trailing slash, the headers of
    every request (``Authorization``), and the TLS context (``None`` for plain HTTP)."""

    server: str
    headers: Mapping[str, str] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None
    tls_server_name: str | None = None


# ----- the kubeconfig ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Named:
    """One ``clusters``/``users``/``contexts`` entry, with the folder of the file it is in
    (relative file names are read from there)."""

    body: Mapping[str, Any]
    base: Path


@dataclass(frozen=True)
class KubeConfig:
    """The kubeconfig files merged: each entry by name, and the current context."""

    files: tuple[Path, ...]
    current: str | None
    clusters: Mapping[str, _Named]
    users: Mapping[str, _Named]
    contexts: Mapping[str, _Named]

    def context(self, name: str | None) -> tuple[str, Mapping[str, Any]]:
        """The context ``name`` (default: the current one): its name and its fields."""
        chosen = name if name is not None else self.current
        if not chosen:
            raise ConfigError(f"{self._where()}: no current-context, and no --context given")
        found = self.contexts.get(chosen)
        if found is None:
            raise ConfigError(
                f"{self._where()}: no context {chosen!r} (contexts: {sorted(self.contexts)})"
            )
        return chosen, dict(found.body.get("context") or {})

    def _where(self) -> str:
        return "kubeconfig " + os.pathsep.join(str(f) for f in self.files)


def _files(kubeconfig: str | os.PathLike[str] | None) -> list[Path]:
    if kubeconfig is not None:
        return [Path(kubeconfig)]
    paths = os.environ.get("KUBECONFIG", "")
    if paths:
        found = [Path(p).expanduser() for p in paths.split(os.pathsep) if p]
        return [p for p in found if p.exists()]
    return [Path("~/.kube/config").expanduser()]


def read_kubeconfig(kubeconfig: str | os.PathLike[str] | None = None) -> KubeConfig:
    """The kubeconfig ``kubeconfig`` (default ``$KUBECONFIG``'s files, else ``~/.kube/config``)."""
    import yaml  # noqa: PLC0415 - only here: a pod's service account needs no YAML

    files = _files(kubeconfig)
    if not files:
        raise ConfigError(f"no kubeconfig: none of $KUBECONFIG={os.environ['KUBECONFIG']} exists")
    merged: dict[str, dict[str, _Named]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for path in files:
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as err:
            raise ConfigError(f"kubeconfig {path}: {err.strerror or type(err).__name__}") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"kubeconfig {path}: not YAML ({str(err).splitlines()[0]})") from None
        if not isinstance(document, dict):
            raise ConfigError(
                f"kubeconfig {path}: expected a mapping, got {type(document).__name__}"
            )
        current = current or document.get("current-context") or None
        for section, entries in merged.items():
            listed = document.get(section) or []
            if not isinstance(listed, list):
                raise ConfigError(f"kubeconfig {path}: {section} is not a list")
            for entry in listed:
                if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                    raise ConfigError(f"kubeconfig {path}: an entry of {section} has no name")
                entries.setdefault(entry["name"], _Named(entry, path.resolve().parent))
    return KubeConfig(
        tuple(files), current, merged["clusters"], merged["users"], merged["contexts"]
    )


def _data(entry: _Named, section: str, key: str) -> bytes | None:
    """``key`` of an entry as bytes: ``key-data`` (base64) first, else the file ``key``."""
    body = entry.body.get(section) or {}
    data = body.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except ValueError:
            raise ConfigError(f"{section}.{key}-data is not base64") from None
    path = body.get(key)
    if not path:
        return None
    try:
        return (entry.base / str(path)).read_bytes()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(f"{section}.{key}: {entry.base / str(path)}: {reason}") from None


def _client_certificate(tls: ssl.SSLContext, certificate: bytes, key: bytes) -> None:
    """Load a client certificate and key given as bytes (``ssl`` reads only files: written
    to a private folder, loaded, removed)."""
    with tempfile.TemporaryDirectory(prefix="bellows-tls-") as folder:
        cert_file, key_file = Path(folder, "client.crt"), Path(folder, "client.key")
        for path, data in ((cert_file, certificate), (key_file, key)):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
        try:
            tls.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as err:
            raise ConfigError(f"the client certificate or key cannot be used: {err}") from None


def _tls(ca: bytes | None, *, verify: bool) -> ssl.SSLContext:
    tls = ssl.create_default_context()
    if not verify:
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    elif ca is not None:
        tls = ssl.create_default_context(cadata=ca.decode("ascii", "replace"))
    return tls


def _from_kubeconfig(config: KubeConfig, context: str | None) -> Endpoint:
    name, fields = config.context(context)
    cluster = config.clusters.get(str(fields.get("cluster")))
    if cluster is None:
        raise ConfigError(
            f"context {name!r}: no cluster {fields.get('cluster')!r} in the kubeconfig"
        )
    user = config.users.get(str(fields.get("user"))) if fields.get("user") else None
    credentials: Mapping[str, Any] = (user.body.get("user") or {}) if user else {}
    body = cluster.body.get("cluster") or {}
    if "auth-provider" in credentials or "exec" in credentials or body.get("proxy-url"):
        raise NeedsClient(name)
    server = str(body.get("server") or "").rstrip("/")
    if urlsplit(server).scheme not in ("http", "https") or not urlsplit(server).hostname:
        raise ConfigError(f"cluster {cluster.body['name']!r}: server {server!r} is not a URL")
    headers: dict[str, str] = {}
    token = credentials.get("token")
    if not token and credentials.get("tokenFile") and user is not None:
        token = _read_text(user.base / str(credentials["tokenFile"]), "user.tokenFile")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif "username" in credentials and "password" in credentials:
        pair = f"{credentials['username']}:{credentials['password']}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
    if not server.startswith("https"):
        return Endpoint(server, headers)
    ca = _data(cluster, "cluster", "certificate-authority")
    tls = _tls(ca, verify=not body.get("insecure-skip-tls-verify"))
    if user is not None:
        certificate = _data(user, "user", "client-certificate")
        key = _data(user, "user", "client-key")
        if certificate is not None and key is not None:
            _client_certificate(tls, certificate, key)
    return Endpoint(server, headers, tls, body.get("tls-server-name"))


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as err:
        raise ConfigError(f"{what}: {path}: {err.strerror or type(err).__name__}") from None


def _in_cluster() -> Endpoint:
    """The pod's service account, as ``kubernetes.config.load_incluster_config`` reads it."""
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    token = _read_text(ACCOUNT / "token", "service account token")
    ca = ACCOUNT / "ca.crt"
    try:
        tls = ssl.create_default_context(cafile=str(ca))
    except OSError as err:
        raise ConfigError(f"service account CA {ca}: {err.strerror}") from None
    return Endpoint(f"https://{host}:{port}", {"Authorization": f"Bearer {token}"}, tls)


def endpoint(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> Endpoint:
    """The server and credentials of ``context`` (default: the current one) of the kubeconfig,
    or, in a pod (``KUBERNETES_SERVICE_HOST``) with no ``kubeconfig`` given, its account's.
    :class:`NeedsClient` when only the official client can authenticate."""
    if kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        return _in_cluster()
    return _from_kubeconfig(read_kubeconfig(kubeconfig), context)


# ----- requests ----------------------------------------------------------------------------


class _Tls(http.client.HTTPSConnection):
    """An HTTPS connection that checks the certificate for ``server_name`` (``tls-server-name``)
    rather than the host it connects to."""

    def __init__(
        self,
        host: str,
        port: int | None,
        *,
        tls: ssl.SSLContext,
        server_name: str | None,
        timeout: float,
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=tls)
        self._tls, self._server_name = tls, server_name

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._tls.wrap_socket(self.sock, server_hostname=self._server_name or self.host)


def _error(status: int, reason: str, body: bytes) -> Exception:
    message = ""
    with contextlib.suppress(ValueError, AttributeError):
        message = str(orjson.loads(body).get("message") or "")
    if status == 404:
        return NotFoundError(message or reason)
    if status == 409:
        return ConflictError(message or reason)
    if status == 410:
        return ExpiredError(message or reason)
    return ApiError(status, reason, message or body[:200].decode(errors="replace").strip())


def _decode(data: bytes) -> Obj:
    try:
        out: Obj = orjson.loads(data)
    except orjson.JSONDecodeError:  # an integer over 64 bits, a lone surrogate: as json
        out = json.loads(data)
    return out


class ListingApi:
    """The reads of ``bellows status`` as coroutines: each request in a worker thread, on
    that thread's keep-alive connection. :meth:`close` closes them all."""

    def __init__(self, where: Endpoint, *, timeout_s: float = TIMEOUT_S) -> None:
        parts = urlsplit(where.server)
        self._where, self._timeout_s = where, timeout_s
        self._host, self._port = parts.hostname or "", parts.port
        self._prefix = parts.path.rstrip("/")
        self._local = threading.local()
        self._opened: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            opened, self._opened = self._opened, []
        for connection in opened:
            connection.close()

    def _connection(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        if connection is None:
            if self._where.tls is None:
                connection = http.client.HTTPConnection(
                    self._host, self._port, timeout=self._timeout_s
                )
            else:
                connection = _Tls(
                    self._host,
                    self._port,
                    tls=self._where.tls,
                    server_name=self._where.tls_server_name,
                    timeout=self._timeout_s,
                )
            self._local.connection = connection
            with self._lock:
                self._opened.append(connection)
        return connection

    def get(self, path: str, query: Mapping[str, Any] | None = None) -> Obj:
        """GET ``path`` (with ``query``) and decode the JSON answer; an error status raises."""
        target = self._prefix + path + ("?" + urlencode(query) if query else "")
        headers = {"Accept": "application/json", **self._where.headers}
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more, anew
            connection = self._connection()
            try:
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                data = response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                connection.close()
                if attempt == 2:
                    raise
                continue
            if response.status >= 400:
                raise _error(response.status, response.reason, data)
            return _decode(data)
        raise AssertionError("unreachable")

    async def _pages(
        self, path: str, query: Mapping[str, Any], limit: int
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        token = ""
        while True:
            options = {**query, "limit": limit, **({"continue": token} if token else {})}
            listed = await asyncio.to_thread(self.get, path, options)
            meta = listed.get("metadata") or {}
            yield list(listed.get("items") or []), str(meta.get("resourceVersion", ""))
            token = str(meta.get("continue") or "")
            if not token:
                return

    def list_job_pages(
        self, kind: KindAdapter, namespace: str | None = None, *, limit: int = PAGE
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        """The jobs of ``kind`` (in ``namespace``, or all), as ``KubeApi.list_job_pages``."""
        where = "" if namespace is None else f"/namespaces/{quote(namespace, safe='')}"
        path = f"/apis/{kind.group}/{kind.version}{where}/{kind.plural}"
        return self._pages(path, {}, limit)

    async def list_events(
        self, namespace: str | None = None, *, field_selector: str | None = None
    ) -> list[Obj]:
        """Core Events (of ``namespace``, or all) matching ``field_selector``, every page."""
        where = "" if namespace is None else f"/namespaces/{quote(namespace, safe='')}"
        query = {"fieldSelector": field_selector} if field_selector else {}
        found: list[Obj] = []
        async for page, _ in self._pages(f"/api/v1{where}/events", query, PAGE):
            found.extend(page)
        return found

    def list_nodes(
        self, selector: str | None = None, *, limit: int = NODE_PAGE
    ) -> AsyncIterator[tuple[list[Obj], str]]:
        """The nodes matching the label ``selector`` (``None``: all), ``limit`` per page."""
        return self._pages("/api/v1/nodes", {"labelSelector": selector} if selector else {}, limit)

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        return await self._get_or_none(
            f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps", name
        )

    async def get_lease(self, namespace: str, name: str) -> Obj | None:
        """The ``coordination.k8s.io/v1`` Lease, or ``None`` when it does not exist."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
        return await self._get_or_none(path, name)

    async def _get_or_none(self, collection: str, name: str) -> Obj | None:
        try:
            return await asyncio.to_thread(self.get, f"{collection}/{quote(name, safe='')}")
        except NotFoundError:
            return None
