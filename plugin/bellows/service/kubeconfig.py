"""The kubeconfig files a process outside a pod reads, checked so that a bad one is one line.

The ``kubernetes`` client reads ``kubernetes.kubeconfig`` (else ``$KUBECONFIG``, a
``:``-separated list, else ``~/.kube/config``) and raises whatever its YAML reader or decoder
meets: a traceback for an empty or binary file. :func:`checked_kubeconfig` reads each file
first and raises :class:`KubeconfigError` naming the file and what is wrong with it; the
commands print it as one ``Error:`` line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

__all__ = ["KubeconfigError", "checked_kubeconfig", "kubeconfig_paths"]

DEFAULT = "~/.kube/config"
MAX_BYTES = 16 * 1024 * 1024  # a kubeconfig with embedded certificates is some kB, never MB


class KubeconfigError(ValueError):
    """A kubeconfig file that is missing, unreadable, empty, not UTF-8 or not a kubeconfig."""


def kubeconfig_paths(
    kubeconfig: Path | None, environ: Mapping[str, str] = os.environ
) -> list[Path]:
    """The files the client would read: ``kubeconfig``, else ``$KUBECONFIG``'s, else the
    default (``~`` expanded)."""
    if kubeconfig is not None:
        return [Path(kubeconfig).expanduser()]
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    return [Path(p).expanduser() for p in listed or [DEFAULT]]


def _problem(path: Path) -> str | None:
    """What is wrong with the kubeconfig at ``path``, or ``None``."""
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
    return None


def checked_kubeconfig(kubeconfig: Path | None) -> str:
    """The kubeconfig argument for the client (paths joined as ``$KUBECONFIG`` joins them),
    every file read and checked first; :class:`KubeconfigError` names the first bad one."""
    paths = kubeconfig_paths(kubeconfig)
    for path in paths:
        problem = _problem(path)
        if problem is not None:
            origin = "" if kubeconfig is not None else _origin()
            raise KubeconfigError(f"kubeconfig {path}{origin} {problem}")
    return os.pathsep.join(str(p) for p in paths)


def _origin() -> str:
    return " (from $KUBECONFIG)" if os.environ.get("KUBECONFIG") else " (the default)"
