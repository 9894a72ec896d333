"""The resource types the emulated API server serves, and how each one is checked.

Custom resources come from real CRD files (``schemas.load_crd``) and are checked against
their structural schema. Built-in types carry a small hand-written check of the fields
Bellows and the emulated operators use: enough to fail a test that writes a malformed
Event, Lease, ConfigMap, batch Job or Node, without bundling the whole Kubernetes OpenAPI.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bellows.emulator.nodes import canonical_nodes, node_problems
from bellows.emulator.schemas import FieldProblem, SchemaChecker, SchemaEdit, load_crd

__all__ = ["ResourceType", "builtin_resources", "crd_resources"]

Checker = Callable[[Mapping[str, Any]], list[FieldProblem]]


@dataclass(frozen=True)
class ResourceType:
    """One ``group/version/plural`` the server answers for.

    ``strategic_merge``: whether a strategic merge patch is accepted (the emulator applies
    it as a JSON merge patch, which is exact only for types without merge-keyed lists, so it
    is enabled only for those). ``unconditional_update``: whether PUT may omit
    ``resourceVersion`` (false for custom resources, as on the real server).
    ``status_on_create``: a create keeps the body's ``status`` though the type has a status
    subresource (Nodes: the kubelet registers a node with its status). ``normalize``: how
    the server rewrites a valid object before storing it (canonical quantities).
    ``singular``, ``short_names``, ``categories`` and ``columns`` (a CRD's
    ``additionalPrinterColumns``) are what discovery and ``kubectl get``'s tables show
    (``discovery.py``, ``tables.py``).
    """

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    strategic_merge: bool = False
    unconditional_update: bool = True
    status_on_create: bool = False
    schema: SchemaChecker | None = None
    check: Checker | None = None
    normalize: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    singular: str = ""
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[Mapping[str, Any], ...] = ()

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

    def problems(
        self, obj: Mapping[str, Any], old: Mapping[str, Any] | None = None
    ) -> list[FieldProblem]:
        found = self.schema.problems(obj, old) if self.schema else []
        return found + (self.check(obj) if self.check else [])

    def defaulted(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = self.schema.default(obj) if self.schema else obj
        return self.normalize(out) if self.normalize else out


def _need(obj: Mapping[str, Any], path: str, kind: type | tuple[type, ...]) -> list[FieldProblem]:
    node: object = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return [FieldProblem(path, None, "a required field")]
        node = node[part]
    if (isinstance(node, bool) and kind is not bool) or not isinstance(node, kind):
        return [FieldProblem(path, node, f"a value of type {getattr(kind, '__name__', kind)}")]
    return []


_CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+")  # IsConfigMapKey, matched whole
MAX_CONFIGMAP_BYTES = 1024 * 1024  # MaxSecretSize, which ConfigMaps share


def _check_configmap(obj: Mapping[str, Any]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    size = 0
    seen: set[str] = set()
    for field in ("data", "binaryData"):
        entries = obj.get(field) or {}
        if not isinstance(entries, Mapping):
            found.append(FieldProblem(field, entries, "a map of string to string"))
            continue
        for key, value in entries.items():
            if len(key) > 253 or key in (".", "..") or not _CONFIG_KEY.fullmatch(key):
                found.append(
                    FieldProblem(
                        f"{field}[{key[:60]!r}]",
                        key,
                        "a valid config key: alphanumerics, '-', '_' or '.' (<= 253)",
                    )
                )
            if key in seen:
                found.append(FieldProblem(f"{field}[{key[:60]!r}]", key, "a key in one map only"))
            seen.add(key)
            if not isinstance(value, str):
                found.append(FieldProblem(f"{field}.{key[:60]}", value, "a string"))
                continue
            size += len(key) + len(value.encode("utf-8", "surrogatepass"))
    if size > MAX_CONFIGMAP_BYTES:
        found.append(
            FieldProblem("", f"{size} bytes", f"Too long: must have at most {MAX_CONFIGMAP_BYTES}")
        )
    return found


def _secret_data(obj: dict[str, Any]) -> dict[str, Any]:
    """A Secret as the API server stores it: ``stringData`` merged into ``data`` (base64),
    ``type`` ``Opaque`` when unset."""
    strings = obj.get("stringData")
    if isinstance(strings, Mapping) and all(isinstance(v, str) for v in strings.values()):
        data = obj.get("data")
        merged = dict(data) if isinstance(data, Mapping) else {}
        merged.update({k: base64.b64encode(v.encode()).decode() for k, v in strings.items()})
        obj = {k: v for k, v in obj.items() if k != "stringData"} | {"data": merged}
    return obj if "type" in obj else {**obj, "type": "Opaque"}


def _check_secret(obj: Mapping[str, Any]) -> list[FieldProblem]:
    """ValidateSecret: keys as a ConfigMap's, each value base64, 1 MiB in all."""
    entries = obj.get("data") or {}
    if not isinstance(entries, Mapping):
        return [FieldProblem("data", entries, "a map of string to base64 string")]
    found: list[FieldProblem] = []
    size = 0
    for key, value in entries.items():
        if len(key) > 253 or key in (".", "..") or not _CONFIG_KEY.fullmatch(key):
            found.append(FieldProblem(f"data[{key[:60]!r}]", key, "a valid config key"))
        try:
            size += len(key) + len(base64.b64decode(value, validate=True))
        except (TypeError, ValueError):
            found.append(FieldProblem(f"data[{key[:60]!r}]", value, "a base64 string"))
    if not isinstance(obj.get("type"), str):
        found.append(FieldProblem("type", obj.get("type"), "a string"))
    if size > MAX_CONFIGMAP_BYTES:
        found.append(
            FieldProblem(
                "data", f"{size} bytes", f"Too long: must have at most {MAX_CONFIGMAP_BYTES}"
            )
        )
    return found


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
    if not isinstance(spec, Mapping):
        return [FieldProblem("spec", spec, "an object")]
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
    if not all(isinstance(c, Mapping) for c in pod["containers"]):
        found.append(FieldProblem("spec.template.spec.containers", pod["containers"], "objects"))
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


_NODE_TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _check_pod(obj: Mapping[str, Any]) -> list[FieldProblem]:
    found = _need(obj, "spec.containers", list)
    if not found and not obj["spec"]["containers"]:
        found.append(FieldProblem("spec.containers", [], "at least one container"))
    required = ((obj.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    terms = (required.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    for i, term in enumerate(terms if isinstance(terms, list) else []):
        for j, field in enumerate((term or {}).get("matchFields") or []):
            where = f"{_NODE_TERMS}.nodeSelectorTerms[{i}].matchFields[{j}]"
            # ValidateNodeFieldSelectorRequirement: metadata.name, In/NotIn, one value
            if field.get("key") != "metadata.name":
                found.append(FieldProblem(f"{where}.key", field.get("key"), "metadata.name"))
            if field.get("operator") not in ("In", "NotIn"):
                found.append(
                    FieldProblem(f"{where}.operator", field.get("operator"), "In or NotIn")
                )
            if len(field.get("values") or []) != 1:
                found.append(
                    FieldProblem(f"{where}.values", field.get("values"), "exactly one value")
                )
    return found


def builtin_resources() -> list[ResourceType]:
    """Namespaces, Nodes, ConfigMaps, Secrets, core Events, Pods, batch Jobs and coordination
    Leases, with the short names and categories kube-apiserver's discovery gives them. Pods are
    served for ``kubectl`` (``get pods``, ``describe node`` lists a node's pods): the emulated
    operators keep their jobs' pods to themselves (``scheduling.Placer``), not as objects."""
    return [
        ResourceType(
            "", "v1", "namespaces", "Namespace", namespaced=False, strategic_merge=True,
            short_names=("ns",),
        ),
        # a Node's conditions and addresses merge by key in a strategic merge patch: not emulated
        ResourceType(
            "", "v1", "nodes", "Node", namespaced=False, status_subresource=True,
            status_on_create=True, check=node_problems, normalize=canonical_nodes,
            short_names=("no",),
        ),
        ResourceType(
            "", "v1", "configmaps", "ConfigMap", strategic_merge=True, check=_check_configmap,
            short_names=("cm",),
        ),
        ResourceType(
            "", "v1", "secrets", "Secret", strategic_merge=True, check=_check_secret,
            normalize=_secret_data,
        ),
        ResourceType(
            "", "v1", "events", "Event", strategic_merge=True, check=_check_event,
            short_names=("ev",),
        ),
        # a Pod's containers merge by name in a strategic merge patch: not emulated
        ResourceType(
            "", "v1", "pods", "Pod", status_subresource=True, check=_check_pod,
            short_names=("po",), categories=("all",),
        ),
        ResourceType(
            "batch", "v1", "jobs", "Job", status_subresource=True, check=_check_batch_job,
            categories=("all",),
        ),
        ResourceType(
            "coordination.k8s.io", "v1", "leases", "Lease", strategic_merge=True,
            check=_check_lease,
        ),
    ]  # fmt: skip


def crd_resources(paths: Iterable[Path], edit: SchemaEdit | None = None) -> list[ResourceType]:
    """One resource type per served version of each CRD file in ``paths`` (``edit``: see
    :func:`~bellows.emulator.schemas.load_crd`)."""
    out: list[ResourceType] = []
    for path in paths:
        for crd in load_crd(Path(path), edit):
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
                    singular=crd.singular,
                    short_names=crd.short_names,
                    categories=crd.categories,
                    columns=crd.columns,
                )
            )
    return out
