"""Offline validation of Kubernetes objects: built-in kinds, the Kubeflow CRDs, ServiceMonitor.

Built-in kinds are checked with ``kubernetes-validate`` (the Kubernetes OpenAPI schemas it
ships, in strict mode: unknown fields fail). PyTorchJob and MPIJob are checked against the
``openAPIV3Schema`` of the real CRDs in ``shared/data/crds``. The Prometheus Operator's
ServiceMonitor has no schema on this machine, so only its shape is checked here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.conftest import shared_data_dir

# Oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest with schemas.
KUBE_VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())

CRD_FILES = (
    "training-operator-v1.9.4_kubeflow.org_pytorchjobs.yaml",
    "mpi-operator-v0.8.2_kubeflow.org_mpijobs.yaml",
)


class InvalidObjectError(AssertionError):
    """An object failed validation; the message names the object and the field."""


@functools.cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """``(apiVersion, kind) -> openAPIV3Schema`` for every version of the stored CRDs."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((shared_data_dir() / "crds" / name).read_text())
        group = crd["spec"]["group"]
        kind = crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def _name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('name')}"


def validate(obj: dict[str, Any]) -> None:
    """Raise :class:`InvalidObjectError` unless ``obj`` is a valid object of its kind."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        raise InvalidObjectError(f"{_name(obj)}: apiVersion and kind must be strings")
    crd = crd_schemas().get((api_version, kind))
    if crd is not None:
        _validate_custom(obj, crd)
    elif api_version == "monitoring.coreos.com/v1" and kind == "ServiceMonitor":
        _validate_service_monitor(obj)
    else:
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                path = "/".join(str(p) for p in error.path)
                raise InvalidObjectError(
                    f"{_name(obj)} (Kubernetes {version}) at {path}: {error.message}"
                ) from None
            except kubernetes_validate.SchemaNotFoundError as error:
                raise InvalidObjectError(f"{_name(obj)}: {error.message}") from None


def _validate_custom(obj: dict[str, Any], schema: dict[str, Any]) -> None:
    # CRD schemas allow unknown fields only where x-kubernetes-preserve-unknown-fields says
    # so; apply the same pruning rule by forbidding extras everywhere else.
    strict = _forbid_unknown(schema)
    strict["properties"]["apiVersion"] = {"type": "string"}
    strict["properties"]["kind"] = {"type": "string"}
    strict["properties"]["metadata"] = {"type": "object"}
    errors = sorted(jsonschema.Draft7Validator(strict).iter_errors(obj), key=lambda e: list(e.path))
    if errors:
        first = errors[0]
        path = "/".join(str(p) for p in first.path)
        raise InvalidObjectError(f"{_name(obj)} at {path}: {first.message}")


def _forbid_unknown(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_forbid_unknown(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _forbid_unknown(v) for k, v in schema.items()}
    preserve = schema.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in schema and "additionalProperties" not in schema and not preserve:
        out["additionalProperties"] = False
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def _validate_service_monitor(obj: dict[str, Any]) -> None:
    spec = obj.get("spec") or {}
    selector = (spec.get("selector") or {}).get("matchLabels")
    endpoints = spec.get("endpoints")
    if not isinstance(selector, dict) or not selector:
        raise InvalidObjectError(f"{_name(obj)}: spec.selector.matchLabels must be a non-empty map")
    if not isinstance(endpoints, list) or not endpoints:
        raise InvalidObjectError(f"{_name(obj)}: spec.endpoints must be a non-empty list")
    for i, endpoint in enumerate(endpoints):
        if not isinstance(endpoint.get("port"), str):
            raise InvalidObjectError(f"{_name(obj)}: spec.endpoints[{i}].port must be a port name")


def load_all(texts: Iterable[str]) -> list[dict[str, Any]]:
    """Every non-empty YAML document in ``texts``."""
    return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


def load_files(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every non-empty YAML document in the files ``paths``."""
    return load_all(p.read_text() for p in paths)
