"""The resource types the emulated API server serves, and how each one is checked.

Custom resources come from real CRD files (``schemas.load_crd``) and are checked against
their structural schema. Built-in types carry a small hand-written check of the fields
Bellows and the emulated operators use: enough to fail a test that writes a malformed
Event, Lease, ConfigMap or batch Job, without bundling the whole Kubernetes OpenAPI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bellows.kube.emulator.schemas import FieldProblem, SchemaChecker, load_crd

__all__ = ["ResourceType", "builtin_resources", "crd_resources"]

Checker = Callable[[Mapping[str, Any]], list[FieldProblem]]


@dataclass(frozen=True)
class ResourceType:
    """One ``group/version/plural`` the server answers for.

    ``strategic_merge``: whether a strategic merge patch is accepted (the emulator applies
    it as a JSON merge patch, which is exact only for types without merge-keyed lists, so it
    is enabled only for those). ``unconditional_update``: whether PUT may omit
    ``resourceVersion`` (false for custom resources, as on the real server).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    strategic_merge: bool = False
    unconditional_update: bool = True
    schema: SchemaChecker | None = None
    check: Checker | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> str:
        """``group/version/plural`` (``v1/configmaps`` for the core group)."""
        return f"{self.api_version}/{self.plural}"

    @property
    def qualified(self) -> str:
        """``plural.group`` as the server names the resource in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def problems(self, obj: Mapping[str, Any]) -> list[FieldProblem]:
        found = self.schema.problems(obj) if self.schema else []
        return found + (self.check(obj) if self.check else [])

    def defaulted(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.schema.default(obj) if self.schema else obj


def _need(obj: Mapping[str, Any], path: str, kind: type | tuple[type, ...]) -> list[FieldProblem]:
    node: object = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return [FieldProblem(path, None, "a required field")]
        node = node[part]
    if (isinstance(node, bool) and kind is not bool) or not isinstance(node, kind):
        return [FieldProblem(path, node, f"a value of type {getattr(kind, '__name__', kind)}")]
    return []


def _check_configmap(obj: Mapping[str, Any]) -> list[FieldProblem]:
    data = obj.get("data") or {}
    if not isinstance(data, Mapping):
        return [FieldProblem("data", data, "a map of string to string")]
    return [
        FieldProblem(f"data.{key}", value, "a string")
        for key, value in data.items()
        if not isinstance(value, str)
    ]


def _check_event(obj: Mapping[str, Any]) -> list[FieldProblem]:
    found = _need(obj, "involvedObject", dict)
    if not found:
        involved = obj["involvedObject"]
        namespace = obj.get("metadata", {}).get("namespace")
        if involved.get("namespace", namespace) != namespace:
            found.append(
                FieldProblem(
                    "involvedObject.namespace",
                    involved.get("namespace"),
                    f"the event's namespace ({namespace})",
                )
            )
    if obj.get("type", "Normal") not in ("Normal", "Warning"):
        found.append(FieldProblem("type", obj.get("type"), "'Normal' or 'Warning'"))
    for key in ("reason", "message"):
        if key in obj and not isinstance(obj[key], str):
            found.append(FieldProblem(key, obj[key], "a string"))
    return found


def _check_lease(obj: Mapping[str, Any]) -> list[FieldProblem]:
    spec = obj.get("spec") or {}
    found: list[FieldProblem] = []
    for key, kind in (
        ("holderIdentity", str),
        ("leaseDurationSeconds", int),
        ("acquireTime", str),
        ("renewTime", str),
        ("leaseTransitions", int),
    ):
        value = spec.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            found.append(FieldProblem(f"spec.{key}", value, f"a {kind.__name__}"))
    return found


def _check_batch_job(obj: Mapping[str, Any]) -> list[FieldProblem]:
    found = _need(obj, "spec.template.spec.containers", list)
    if found:
        return found
    pod = obj["spec"]["template"]["spec"]
    if not pod["containers"]:
        found.append(FieldProblem("spec.template.spec.containers", [], "at least one container"))
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        found.append(
            FieldProblem(
                "spec.template.spec.restartPolicy", pod.get("restartPolicy"), "Never or OnFailure"
            )
        )
    suspend = obj["spec"].get("suspend", False)
    if not isinstance(suspend, bool):
        found.append(FieldProblem("spec.suspend", suspend, "true or false"))
    return found


def builtin_resources() -> list[ResourceType]:
    """Namespaces, ConfigMaps, core Events, batch Jobs and coordination Leases."""
    return [
        ResourceType("", "v1", "namespaces", "Namespace", namespaced=False, strategic_merge=True),
        ResourceType(
            "", "v1", "configmaps", "ConfigMap", strategic_merge=True, check=_check_configmap
        ),
        ResourceType("", "v1", "events", "Event", strategic_merge=True, check=_check_event),
        ResourceType("batch", "v1", "jobs", "Job", status_subresource=True, check=_check_batch_job),
        ResourceType(
            "coordination.k8s.io", "v1", "leases", "Lease", strategic_merge=True, check=_check_lease
        ),
    ]


def crd_resources(paths: Iterable[Path]) -> list[ResourceType]:
    """One resource type per served version of each CRD file in ``paths``."""
    out: list[ResourceType] = []
    for path in paths:
        for crd in load_crd(Path(path)):
            out.append(
                ResourceType(
                    crd.group,
                    crd.version,
                    crd.plural,
                    crd.kind,
                    namespaced=crd.namespaced,
                    status_subresource=crd.status_subresource,
                    unconditional_update=False,
                    schema=crd.checker,
                )
            )
    return out
