"""The kubeconfig, read one way for every command: through the official ``kubernetes``
client's loader, each file checked first so that a bad one is one line.

The official loader reads the file given (else ``$KUBECONFIG``, a ``:``-separated list
merged as kubectl merges it, else ``~/.kube/config``) and implements every credential
kubectl does (tokens, client certificates, ``exec`` plugins, auth providers, a
``proxy-url``, ``tls-server-name``); it raises whatever its YAML reader or decoder meets: a
traceback for an empty or binary file. :func:`checked_kubeconfig` reads each file first and
raises :class:`KubeconfigError` naming the file and what is wrong with it; the commands
print it as one ``Error:`` line. As kubectl, a ``$KUBECONFIG`` entry that does not exist is
skipped; none existing is an error. :func:`load_configuration` fills a client
``Configuration`` from the pod's service account or the kubeconfig, and
:func:`context_namespace` says which namespace a context names (``bellows status``'s
default, as kubectl's).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

__all__ = [
    "ACCOUNT",
    "KubeconfigError",
    "UnknownContextError",
    "checked_kubeconfig",
    "context_namespace",
    "kubeconfig_paths",
    "load_configuration",
]

DEFAULT = "~/.kube/config"
ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")  # a pod's service account
MAX_BYTES = 16 * 1024 * 1024  # a kubeconfig with embedded certificates is some kB, never MB


class KubeconfigError(ValueError):
    """A kubeconfig file that is missing, unreadable, empty, not UTF-8 or not a kubeconfig."""


class UnknownContextError(KubeconfigError):
    """A context asked for by name that the kubeconfig does not have."""


def kubeconfig_paths(
    kubeconfig: Path | None, environ: Mapping[str, str] = os.environ
) -> list[Path]:
    """The files the client would read: ``kubeconfig``, else ``$KUBECONFIG``'s, else the
    default (``~`` expanded)."""
    if kubeconfig is not None:
        return [Path(kubeconfig).expanduser()]
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed or [DEFAULT]]


def _problem(path: Path) -> str | Mapping[str, object]:
    """What is wrong with the kubeconfig at ``path``, or the document when nothing is."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return "does not exist"
    except IsADirectoryError:
        return "is a directory, not a file"
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    if len(data) > MAX_BYTES:
        return f"is over {MAX_BYTES // (1024 * 1024)} MiB: not a kubeconfig"
    if not data.strip():
        return "is empty: expected a kubeconfig (apiVersion: v1, kind: Config)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return f"is not UTF-8 text (byte {err.start}): expected a kubeconfig in YAML"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"is not valid YAML{where}: expected a kubeconfig"
    if not isinstance(doc, dict):
        return f"holds a YAML {type(doc).__name__}, not a kubeconfig mapping"
    return doc


def _checked(kubeconfig: Path | None) -> tuple[str, str | None]:
    """The files (joined as ``$KUBECONFIG`` joins them), each read and checked, and the
    current context as kubectl picks it: the first file's that sets one (the official
    loader takes the last's)."""
    paths = kubeconfig_paths(kubeconfig)
    if kubeconfig is None and len(paths) > 1:
        paths = [p for p in paths if p.exists()]
        if not paths:
            listed = os.environ.get("KUBECONFIG", "")
            raise KubeconfigError(f"no kubeconfig: none of $KUBECONFIG={listed} exists")
    current: str | None = None
    for path in paths:
        found = _problem(path)
        if isinstance(found, str):
            origin = "" if kubeconfig is not None else _origin()
            raise KubeconfigError(f"kubeconfig {path}{origin} {found}")
        current = current or str(found.get("current-context") or "") or None
    return os.pathsep.join(str(p) for p in paths), current


def checked_kubeconfig(kubeconfig: Path | None) -> str:
    """The kubeconfig argument for the client (paths joined as ``$KUBECONFIG`` joins them),
    every file read and checked first; :class:`KubeconfigError` names the first bad one.
    Of several ``$KUBECONFIG`` files, those that do not exist are left out, as kubectl
    leaves them out."""
    return _checked(kubeconfig)[0]


def _origin() -> str:
    return " (from $KUBECONFIG)" if os.environ.get("KUBECONFIG") else " (the default)"


def _in_pod(kubeconfig: Path | None, context: str | None) -> bool:
    """In a pod (``KUBERNETES_SERVICE_HOST``) with neither a kubeconfig nor a context
    named: the service account, as kubectl and client-go choose."""
    return kubeconfig is None and context is None and "KUBERNETES_SERVICE_HOST" in os.environ


def _trimmed(configuration: k8s.Configuration) -> None:
    """Tokens without the whitespace around them, as client-go reads a token file (the
    official loader keeps a file's newline, which no HTTP header may carry), on every
    refresh too (an ``exec`` plugin's, the service account's)."""
    hook = configuration.refresh_api_key_hook

    def refresh(config: k8s.Configuration) -> None:
        if hook is not None:
            hook(config)
        for key, value in list(config.api_key.items()):
            config.api_key[key] = value.strip() if isinstance(value, str) else value

    refresh(configuration)
    configuration.refresh_api_key_hook = refresh


def _usable(configuration: k8s.Configuration, where: str) -> None:
    """What the loader took in, tried as the client will use it: the server a URL, the
    CA, the client certificate and key loadable (the loader writes a ``-data`` field to a
    file, undecoded garbage included, and reads none of them before the first request)."""
    parts = urlsplit(str(configuration.host or ""))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise KubeconfigError(
            f"{where}: server {configuration.host!r} is not a URL (expected https://HOST:PORT)"
        )
    if parts.scheme != "https":
        return
    try:
        tls = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            tls.load_cert_chain(configuration.cert_file, configuration.key_file)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        raise KubeconfigError(f"{where}: its certificates cannot be used ({err})") from None


def load_configuration(
    kubeconfig: Path | None = None, context: str | None = None, *, in_cluster: bool | None = None
) -> k8s.Configuration:
    """A client ``Configuration`` from the pod's service account (``in_cluster``; by default
    in a pod when neither ``kubeconfig`` nor ``context`` is named) or from the kubeconfig's
    ``context`` (default: its current one). :class:`KubeconfigError` names what is wrong."""
    configuration = k8s.Configuration()
    if in_cluster is None:
        in_cluster = _in_pod(kubeconfig, context)
    if in_cluster:
        where = f"the pod's service account ({ACCOUNT})"
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except (k8s_config.ConfigException, OSError) as err:
            raise KubeconfigError(f"{where}: {err}") from None
    else:
        files, current = _checked(kubeconfig)
        where = f"kubeconfig {files}"
        try:
            k8s_config.load_kube_config(
                config_file=files,
                context=context or current,
                client_configuration=configuration,
                persist_config=False,
            )
        except (k8s_config.ConfigException, OSError, ValueError) as err:  # not usable
            raise KubeconfigError(f"{where}: {err}") from None
    _usable(configuration, where)
    _trimmed(configuration)
    return configuration


def context_namespace(kubeconfig: Path | None = None, context: str | None = None) -> str:
    """The namespace ``context`` (default: the current one) names, ``default`` when it names
    none, as kubectl; in a pod, the service account's. :class:`KubeconfigError` when the
    kubeconfig cannot be read or has no such context."""
    if _in_pod(kubeconfig, context):
        account = ACCOUNT / "namespace"
        return account.read_text().strip() if account.exists() else "default"
    files, current = _checked(kubeconfig)
    try:
        contexts, _ = k8s_config.list_kube_config_contexts(config_file=files)
    except (k8s_config.ConfigException, OSError, ValueError) as err:
        raise KubeconfigError(f"kubeconfig {files}: {err}") from None
    wanted = context if context is not None else current
    for entry in contexts or []:
        if entry.get("name") == wanted:
            return str((entry.get("context") or {}).get("namespace") or "default")
    names = sorted(str(c.get("name")) for c in contexts or [])
    if context is None:
        raise KubeconfigError(f"kubeconfig {files}: no current-context (contexts: {names})")
    raise UnknownContextError(f"{context!r} is not a context of {names}")
