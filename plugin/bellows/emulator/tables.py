"""Server-side printing: ``meta.k8s.io/v1`` ``Table`` answers, as ``kubectl get`` asks for them.

``kubectl get`` sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`` and
prints the table the server makes. For a custom resource the columns are the server's:
``Name``, then the CRD version's ``additionalPrinterColumns`` (``Age`` when it declares
none), their JSONPaths evaluated on each object, ``date`` columns shown as kube-apiserver
shows them (``5m10s``, ``3h``, ``2d``). Built-in types get a few of kube-apiserver's own
columns (a Node's ``Status``, an Event's ``Type``/``Reason``/``Object``/``Message``, …).
Each row carries the object's metadata (``PartialObjectMetadata``), which kubectl needs for
``-A``'s namespace column and ``--show-labels``. A watch asked for as a table streams one
single-row table per event.

The JSONPath subset is what the served CRDs' columns use: ``.a.b``, ``[n]``, ``[a:b]``
(negative bounds too), ``[*]`` and ``[?(@.key=='value')]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from bellows.emulator.resources import ResourceType

__all__ = ["human_duration", "jsonpath", "table", "wants_table"]

Cell = Callable[[Mapping[str, Any], datetime], Any]
_STEP = re.compile(r"\.([A-Za-z0-9_-]+)|\[([^\]]*)\]")
_FILTER = re.compile(r"\?\(@\.([A-Za-z0-9_.-]+)\s*==\s*['\"]([^'\"]*)['\"]\)")


def wants_table(accept: str) -> bool:
    """Whether ``accept``'s first acceptable type is a ``meta.k8s.io/v1`` Table."""
    for media in accept.split(","):
        params = {p.strip() for p in media.split(";")[1:]}
        if {"as=Table", "g=meta.k8s.io", "v=v1"} <= params:
            return True
        if media.split(";")[0].strip() in ("application/json", "*/*"):
            return False
    return False


def _index(values: list[Any], selector: str) -> list[Any]:
    if selector == "*":
        return values
    if ":" in selector:
        start, _, stop = selector.partition(":")
        return values[int(start) if start else None : int(stop) if stop else None]
    i = int(selector)
    return [values[i]] if -len(values) <= i < len(values) else []


def _step(value: Any, name: str | None, selector: str | None) -> list[Any]:
    if name is not None:
        return [value[name]] if isinstance(value, Mapping) and name in value else []
    assert selector is not None
    found = _FILTER.fullmatch(selector.strip())
    if found:
        items = value if isinstance(value, list) else []
        key, wanted = found.groups()
        return [v for v in items if isinstance(v, Mapping) and str(v.get(key)) == wanted]
    if not isinstance(value, list):
        return []
    try:
        return _index(value, selector.strip())
    except ValueError:
        return []


def jsonpath(path: str, obj: Any) -> list[Any]:
    """The values ``path`` (the subset above) selects in ``obj``, in order."""
    values = [obj]
    for name, selector in _STEP.findall(path.strip().removeprefix("{").removesuffix("}")):
        values = [v for value in values for v in _step(value, name or None, selector or None)]
    return values


def human_duration(seconds: float) -> str:
    """A duration as ``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` prints it."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    minutes, hours, days = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    return f"{years}y{days % 365}d" if years < 8 and days % 365 else f"{years}y"


def _age(stamp: Any, now: datetime) -> str:
    if not isinstance(stamp, str):
        return "<unknown>"
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


def _printed(value: Any, kind: str, now: datetime) -> Any:
    if kind == "date":
        return _age(value, now)
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if kind == "string" and not isinstance(value, str):
        return json.dumps(value)
    return value


def _crd_cell(column: Mapping[str, Any]) -> Cell:
    path, kind = str(column.get("jsonPath", "")), str(column.get("type", "string"))

    def cell(obj: Mapping[str, Any], now: datetime) -> Any:
        found = jsonpath(path, obj)
        return _printed(found[0], kind, now) if found else None

    return cell


def _ready(obj: Mapping[str, Any]) -> str:
    conditions = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    state = "Unknown" if ready is None else "Ready" if ready.get("status") == "True" else "NotReady"
    return state + (",SchedulingDisabled" if (obj.get("spec") or {}).get("unschedulable") else "")


def _involved(obj: Mapping[str, Any]) -> str:
    involved = obj.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _column(name: str, kind: str, get: Callable[[Mapping[str, Any]], Any]) -> tuple[Any, ...]:
    return name, kind, lambda obj, _now: get(obj)


_AGE = ("Age", "date", lambda obj, now: _age(obj["metadata"].get("creationTimestamp"), now))
_BUILTIN: dict[str, tuple[tuple[Any, ...], ...]] = {
    "v1/nodes": (_column("Status", "string", _ready), _AGE),
    "v1/pods": (
        _column("Status", "string", lambda o: (o.get("status") or {}).get("phase", "Pending")),
        _column("Node", "string", lambda o: (o.get("spec") or {}).get("nodeName", "<none>")),
        _AGE,
    ),
    "v1/configmaps": (
        _column(
            "Data", "integer", lambda o: len(o.get("data") or {}) + len(o.get("binaryData") or {})
        ),
        _AGE,
    ),
    "v1/events": (
        _column("Type", "string", lambda o: o.get("type", "")),
        _column("Reason", "string", lambda o: o.get("reason", "")),
        _column("Object", "string", _involved),
        _column("Message", "string", lambda o: o.get("message", "")),
        _AGE,
    ),
    "coordination.k8s.io/v1/leases": (
        _column("Holder", "string", lambda o: (o.get("spec") or {}).get("holderIdentity", "")),
        _AGE,
    ),
}


def _columns(res: ResourceType) -> list[tuple[str, str, int, str, Cell]]:
    """(name, type, priority, description, cell) of each column after ``Name``."""
    if res.columns:
        return [
            (
                str(c["name"]),
                str(c.get("type", "string")),
                int(c.get("priority", 0)),
                str(c.get("description", "")),
                _crd_cell(c),
            )
            for c in res.columns
        ]
    return [(n, t, 0, "", cell) for n, t, cell in _BUILTIN.get(res.key, (_AGE,))]


def _partial(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def table(
    res: ResourceType,
    objects: list[Mapping[str, Any]],
    meta: Mapping[str, Any],
    *,
    include: str = "Metadata",
    now: datetime | None = None,
) -> dict[str, Any]:
    """The ``Table`` of ``objects`` of ``res`` (``meta``: the list's metadata;
    ``include``: the request's ``includeObject``, ``None``/``Metadata``/``Object``)."""
    now = now or datetime.now(UTC)
    columns = _columns(res)
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace.",
            "priority": 0,
        },
        *(
            {"name": n, "type": t, "format": "", "description": d, "priority": p}
            for n, t, p, d, _ in columns
        ),
    ]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [obj["metadata"].get("name"), *(cell(obj, now) for *_, cell in columns)]
        }
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = _partial(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(meta),
        "columnDefinitions": definitions,
        "rows": rows,
    }


def table_include(accept: str, query: Mapping[str, str]) -> str | None:
    """``includeObject`` of a request that asks for a Table (``Metadata`` by default, as
    on the real server); ``None`` when it asks for plain objects."""
    return query.get("includeObject") or "Metadata" if wants_table(accept) else None


def table_event(res: ResourceType, event: dict[str, Any], include: str) -> dict[str, Any]:
    """A watch event whose object is a one-row Table (an ``ERROR`` event as it is)."""
    if event.get("type") == "ERROR":
        return event
    obj = event["object"]
    meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
    return {"type": event["type"], "object": table(res, [obj], meta, include=include)}
