"""The GPUs a Node offers new pods, read from its status as the scheduler sees it.

Apart from the controller's capacity watch (:mod:`bellows.service.capacity`) so that
``bellows status`` can sum the nodes' GPUs without importing the controller's side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bellows.inputs import SpecError, parse_quantity, shown
from bellows.jobs import MAX_GPUS

__all__ = ["node_gpus", "node_name", "node_type", "pod_gpus"]


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


def node_gpus(node: Mapping[str, Any], resource: str) -> int:
    """The GPUs ``node`` offers new pods: its allocatable ``resource`` when it is Ready and
    not cordoned, else 0. :class:`SpecError` when that allocatable is not a whole number of
    GPUs in [0, MAX_GPUS] (the API server never stores one; a proxy or a bug might)."""
    name = shown(node_name(node))
    status = node.get("status") or {}
    value = (status.get("allocatable") or {}).get(resource)
    if value is None:
        return 0
    field = f"node {name}: status.allocatable.{resource}"
    amount = parse_quantity(field, value, maximum=MAX_GPUS)
    if amount.denominator != 1:
        raise SpecError(field, value, "a whole number of GPUs")
    if (node.get("spec") or {}).get("unschedulable") is True:
        return 0
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    return int(amount) if ready else 0


def node_type(node: Mapping[str, Any], label: str, types: Mapping[str, str]) -> str:
    """The GPU type of ``node``: its ``label``'s value as ``types`` names it (a value not
    listed is its own type; no label, or not a string: ``""``, untyped)."""
    meta = node.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    value = labels.get(label) if isinstance(labels, Mapping) else None
    if not isinstance(value, str) or not value:
        return ""
    return types.get(value, value)


def pod_gpus(pod_spec: Mapping[str, Any], resource: str = "nvidia.com/gpu") -> int:
    """The GPUs a pod of ``pod_spec`` asks for: its containers' ``resource`` limits
    (requests where no limit is set: an extended resource has them equal), or its largest
    init container's where that is more, as the scheduler counts them. ``ValueError`` (a
    :class:`SpecError`) names a quantity that is not a number."""

    def of(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(resource)
        value = (resources.get("requests") or {}).get(resource) if value is None else value
        return 0 if value is None else int(parse_quantity(resource, str(value)))

    run = sum(of(c) for c in pod_spec.get("containers") or [])
    return max(run, *(of(c) for c in pod_spec.get("initContainers") or []), 0)
