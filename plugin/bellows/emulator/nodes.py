"""Nodes in the emulated API server: what a Node may hold, and GPU nodes for tests and demos.

core/v1 ``nodes`` is cluster-scoped and has a ``status`` subresource; unlike most types, a
Node is created *with* its status (the kubelet registers itself so), and an update of the
main resource keeps the status as it was. :func:`node_problems` checks what the emulator
stores the way kube-apiserver's ``ValidateNode`` does for those fields:

* ``spec``: ``unschedulable`` (a cordon), ``taints`` (qualified key, label value, effect
  ``NoSchedule``/``PreferNoSchedule``/``NoExecute``, one taint per key and effect),
  ``podCIDR(s)``, ``providerID``;
* ``status``: ``capacity`` and ``allocatable`` (resource names a standard node resource or
  ``domain/name``; quantities valid, non-negative, and whole for ``pods`` and extended
  resources such as ``nvidia.com/gpu``), ``conditions`` (a ``type``, and a ``status`` of
  ``True``/``False``/``Unknown``: stricter than the server, which leaves them to the
  kubelet), ``addresses``, ``nodeInfo``.

Any other field is refused (422), real ones not listed here (``status.images``,
``status.daemonEndpoints`` …) included: the emulator stores only what it checks, and a typo
in a test's node must fail, not vanish. Quantities are stored in the canonical form the
API server writes them in (``"1000"`` reads back ``"1k"``, ``0.5`` as ``"500m"``), so a
client that reads them with ``int()`` fails here as it would on a real cluster.

Pods are not stored objects: the nodes are the cluster's capacity, which
:func:`schedulable_gpus` counts as a scheduler would see it (a cordoned node, or one whose
``Ready`` condition is not ``True``, takes no new pods), and where the emulated operators
bind their jobs' pods (:func:`schedulable_nodes`, ``scheduling.Placer``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from bellows.emulator.metadata import DNS_SUBDOMAIN
from bellows.emulator.schemas import FieldProblem
from bellows.inputs import SpecError, parse_quantity

__all__ = [
    "GPU",
    "canonical_nodes",
    "canonical_quantity",
    "gpu_node",
    "node_problems",
    "ready_condition",
    "schedulable_gpus",
    "schedulable_nodes",
    "uniform_nodes",
]

GPU: Final = "nvidia.com/gpu"
_STANDARD = frozenset({"cpu", "memory", "pods", "ephemeral-storage"})
_STANDARD_PREFIXES = ("hugepages-", "attachable-volumes-")
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # a qualified name's name part
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_CONDITION_STATUS = ("True", "False", "Unknown")
_SPEC: Final = {
    "unschedulable": bool,
    "taints": list,
    "podCIDR": str,
    "podCIDRs": list,
    "providerID": str,
}
_STATUS: Final = {
    "capacity": dict,
    "allocatable": dict,
    "conditions": list,
    "addresses": list,
    "nodeInfo": dict,
}
_CONDITION: Final = (
    "type",
    "status",
    "reason",
    "message",
    "lastHeartbeatTime",
    "lastTransitionTime",
)
_DECIMAL_SUFFIX: Final = {
    -9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"
}  # fmt: skip
_BINARY_SUFFIX: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")


# ----- quantities ------------------------------------------------------------------------


def _quantity_text(value: object) -> str | None:
    """The text of a quantity as Go's ``Quantity.UnmarshalJSON`` takes it: a string, or a
    bare JSON number (``4``, ``0.5``); ``None`` for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return json.dumps(value)
    return None


def _decimal(value: Fraction, *, exponent_form: bool) -> str | None:
    """``value`` as the API server writes a decimal quantity: the mantissa's factors of ten
    moved into an exponent that is a multiple of three, then a suffix (``k``) or ``e3``."""
    if value == 0:
        return "0"
    exponent = -9
    scaled = value * 10**9
    if scaled.denominator != 1:
        return None  # finer than nano: the server rounds it up; not emulated, kept as sent
    mantissa = scaled.numerator
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if exponent_form:
        return f"{mantissa}" if exponent == 0 else f"{mantissa}e{exponent}"
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def canonical_quantity(value: object) -> str | None:
    """The canonical string of a quantity (``"1000"`` → ``"1k"``, ``"1024Mi"`` → ``"1Gi"``,
    ``0.5`` → ``"500m"``), or ``None`` when ``value`` is not a non-negative quantity."""
    text = _quantity_text(value)
    try:
        amount = parse_quantity("quantity", text)
    except SpecError:
        return None
    assert text is not None
    if text.endswith("i") and amount.denominator == 1 and amount >= 1024:
        whole, step = amount.numerator, 0
        while whole % 1024 == 0 and step < len(_BINARY_SUFFIX) - 1:
            whole //= 1024
            step += 1
        return f"{whole}{_BINARY_SUFFIX[step]}"
    return _decimal(amount, exponent_form=_EXPONENT.search(text) is not None)


def canonical_nodes(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with each valid capacity and allocatable quantity in canonical form (the
    invalid ones are left for :func:`node_problems` to name)."""
    status = obj.get("status")
    if not isinstance(status, dict):
        return obj
    for field in ("capacity", "allocatable"):
        resources = status.get(field)
        if not isinstance(resources, dict):
            continue
        for name, value in resources.items():
            canonical = canonical_quantity(value)
            if canonical is not None:
                resources[name] = canonical
    return obj


# ----- validation ------------------------------------------------------------------------


def _resource_name_ok(name: str) -> bool:
    prefix, slash, short = name.rpartition("/")
    if not slash:
        return name in _STANDARD or name.startswith(_STANDARD_PREFIXES)
    return (
        0 < len(prefix) <= 253
        and DNS_SUBDOMAIN.fullmatch(prefix) is not None
        and len(short) <= 63
        and _NAME.fullmatch(short) is not None
    )


def _integer_resource(name: str) -> bool:
    """``pods`` and extended resources (``domain/name`` outside ``kubernetes.io``) count
    whole units (``IsIntegerResourceName``)."""
    if name == "pods":
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _resources_problems(field: str, resources: Mapping[str, Any]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    for name, value in resources.items():
        where = f"status.{field}.{name[:80]}"
        if not _resource_name_ok(name):
            found.append(
                FieldProblem(
                    where, name, "a standard node resource (cpu, memory, pods, …) or domain/name"
                )
            )
            continue
        text = _quantity_text(value)
        try:
            amount = parse_quantity(where, text)
        except SpecError:
            found.append(FieldProblem(where, value, "a non-negative quantity (8, 1k, 500m, 4Gi)"))
            continue
        if _integer_resource(name) and amount.denominator != 1:
            found.append(FieldProblem(where, value, "an integer (whole units of this resource)"))
    return found


def _fields(
    where: str, value: object, allowed: Mapping[str, type]
) -> tuple[dict[str, Any], list[FieldProblem]]:
    """``value`` as an object whose known fields have their types; the problems otherwise."""
    if value is None:
        return {}, []
    if not isinstance(value, dict):
        return {}, [FieldProblem(where, value, "an object")]
    found: list[FieldProblem] = []
    for key, item in value.items():
        kind = allowed.get(key)
        if kind is None:
            found.append(FieldProblem(f"{where}.{key[:80]}", item, "a field the Node declares"))
        elif item is not None and (
            not isinstance(item, kind) or (kind is not bool and isinstance(item, bool))
        ):
            found.append(FieldProblem(f"{where}.{key}", item, f"a value of type {kind.__name__}"))
    return value, found


def _taint_problems(taints: list[Any]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints):
        where = f"spec.taints[{i}]"
        allowed = {"key": str, "value": str, "effect": str, "timeAdded": str}
        fields, problems = _fields(where, taint, allowed)
        found += problems
        if problems:
            continue
        key, effect = fields.get("key") or "", fields.get("effect") or ""
        prefix, slash, short = key.rpartition("/")
        if (slash and not DNS_SUBDOMAIN.fullmatch(prefix)) or not _NAME.fullmatch(short):
            found.append(FieldProblem(f"{where}.key", key, "a qualified name"))
        value = fields.get("value") or ""
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            found.append(FieldProblem(f"{where}.value", value, "a label value"))
        if effect not in _EFFECTS:
            found.append(FieldProblem(f"{where}.effect", effect, f"one of {list(_EFFECTS)}"))
        if (key, effect) in seen:
            found.append(FieldProblem(where, key, "one taint per key and effect"))
        seen.add((key, effect))
    return found


def _condition_problems(conditions: list[Any]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    for i, condition in enumerate(conditions):
        where = f"status.conditions[{i}]"
        fields, problems = _fields(where, condition, dict.fromkeys(_CONDITION, str))
        found += problems
        if problems:
            continue
        if not fields.get("type"):
            found.append(FieldProblem(f"{where}.type", fields.get("type"), "a condition type"))
        if fields.get("status") not in _CONDITION_STATUS:
            found.append(
                FieldProblem(f"{where}.status", fields.get("status"), "True, False or Unknown")
            )
    return found


def _string_items(where: str, items: list[Any], allowed: Mapping[str, type]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    for i, item in enumerate(items):
        found += _fields(f"{where}[{i}]", item, allowed)[1]
    return found


def node_problems(obj: Mapping[str, Any]) -> list[FieldProblem]:
    """Every problem in a Node's ``spec`` and ``status`` (metadata is checked apart)."""
    found = [
        FieldProblem(key, obj[key], "a field the Node declares")
        for key in obj
        if key not in ("apiVersion", "kind", "metadata", "spec", "status")
    ]
    spec, problems = _fields("spec", obj.get("spec"), _SPEC)
    found += problems
    if not problems:
        found += _taint_problems(spec.get("taints") or [])
        cidrs = spec.get("podCIDRs") or []
        found += [
            FieldProblem(f"spec.podCIDRs[{i}]", c, "a string")
            for i, c in enumerate(cidrs)
            if not isinstance(c, str)
        ]
    status, problems = _fields("status", obj.get("status"), _STATUS)
    found += problems
    if problems:
        return found
    for field in ("capacity", "allocatable"):
        found += _resources_problems(field, status.get(field) or {})
    found += _condition_problems(status.get("conditions") or [])
    found += _string_items(
        "status.addresses", status.get("addresses") or [], {"type": str, "address": str}
    )
    info = status.get("nodeInfo") or {}
    found += [
        FieldProblem(f"status.nodeInfo.{key[:80]}", value, "a string")
        for key, value in info.items()
        if not isinstance(value, str)
    ]
    return found


# ----- GPU nodes -------------------------------------------------------------------------


def gpu_node(
    name: str,
    gpus: int,
    *,
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    resource: str = GPU,
) -> dict[str, Any]:
    """A Node as a kubelet with ``gpus`` GPUs (and the device plugin) registers it."""
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110", resource: str(gpus)}
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [ready_condition(ready)],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }
    return node


def ready_condition(ready: bool) -> dict[str, str]:
    """The kubelet's ``Ready`` condition (``Unknown`` is what the node controller writes when
    the kubelet stops reporting; ``False`` is a kubelet reporting itself not ready)."""
    return {
        "type": "Ready",
        "status": "True" if ready else "Unknown",
        "reason": "KubeletReady" if ready else "NodeStatusUnknown",
        "message": (
            "kubelet is posting ready status" if ready else "Kubelet stopped posting node status."
        ),
    }


def uniform_nodes(count: int, gpus: int, *, prefix: str = "gpu-node") -> dict[str, int]:
    """``count`` nodes of ``gpus`` GPUs each, by name (``gpu-node-0`` …)."""
    return {f"{prefix}-{i}": gpus for i in range(count)}


def schedulable_nodes(
    nodes: Iterable[Mapping[str, Any]], resource: str = GPU
) -> dict[str, tuple[int, dict[str, str]]]:
    """The nodes new pods could go to, by name: their allocatable ``resource`` and labels
    (a cordoned node, or one whose ``Ready`` condition is not ``True``, left out; stored
    nodes only: their quantities are valid and whole)."""
    out: dict[str, tuple[int, dict[str, str]]] = {}
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        status = node.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions") or []
        )
        value = (status.get("allocatable") or {}).get(resource)
        if ready and value is not None:
            meta = node.get("metadata") or {}
            gpus = int(parse_quantity(resource, value))
            out[str(meta.get("name", ""))] = (gpus, dict(meta.get("labels") or {}))
    return out


def schedulable_gpus(nodes: Iterable[Mapping[str, Any]], resource: str = GPU) -> int:
    """The GPUs new pods could get on ``nodes``: allocatable ``resource`` of every node
    that is not cordoned and whose ``Ready`` condition is ``True`` (stored nodes only:
    their quantities are valid and whole)."""
    return sum(gpus for gpus, _ in schedulable_nodes(nodes, resource).values())
