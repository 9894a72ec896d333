"""Object metadata checks the API server makes on every write: types, names, labels, owners.

Two kinds of problem, as on the real server:

* :func:`type_problems`: a field whose JSON type the server cannot decode into its Go struct
  (``metadata.name`` a list, ``labels`` a number). A create or replace body with one is a
  malformed request (400, "cannot be handled as a …"); a patch that yields one is an invalid
  patch (422).
* :func:`metadata_problems`: values that decode but are invalid (422): names, label and
  annotation keys, label values, the annotations' total size, owner references, finalizer
  names.

Every name pattern here is matched whole (``fullmatch``): ``$`` would let ``"name\\n"`` pass.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from bellows.emulator.schemas import FieldProblem

__all__ = [
    "MAX_ANNOTATIONS_BYTES",
    "go_type",
    "metadata_problems",
    "type_problems",
]

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")
DNS_LABEL: Final = re.compile(_LABEL)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
MAX_ANNOTATIONS_BYTES: Final = 256 * 1024  # TotalAnnotationSizeLimitB in apimachinery

# ObjectMeta's fields and their Go types (k8s.io/apimachinery/pkg/apis/meta/v1).
_STRING = "string"
_INT64 = "int64"
_STRING_MAP = "map[string]string"
_META_FIELDS: Final = {
    "name": _STRING,
    "generateName": _STRING,
    "namespace": _STRING,
    "selfLink": _STRING,
    "uid": _STRING,
    "resourceVersion": _STRING,
    "creationTimestamp": _STRING,
    "deletionTimestamp": _STRING,
    "generation": _INT64,
    "deletionGracePeriodSeconds": _INT64,
    "labels": _STRING_MAP,
    "annotations": _STRING_MAP,
    "ownerReferences": "[]v1.OwnerReference",
    "finalizers": "[]string",
    "managedFields": "[]v1.ManagedFieldsEntry",
}
_OWNER_FIELDS: Final = {
    "apiVersion": _STRING,
    "kind": _STRING,
    "name": _STRING,
    "uid": _STRING,
    "controller": "bool",
    "blockOwnerDeletion": "bool",
}
_INT64_RANGE = (-(2**63), 2**63 - 1)


def go_type(value: object) -> str:
    """How Go's ``encoding/json`` names the JSON type of ``value`` in its errors."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return f"number {json.dumps(value)[:40]}"
    if isinstance(value, list):
        return "array"
    return "object"


def _fits(kind: str, value: object) -> bool:
    if value is None:
        return True  # null decodes as the zero value
    if kind == _STRING:
        return isinstance(value, str)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == _INT64:
        low, high = _INT64_RANGE
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
    if kind == _STRING_MAP:
        return isinstance(value, Mapping) and all(
            v is None or isinstance(v, str) for v in value.values()
        )
    if kind == "[]string":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    return isinstance(value, list) and all(isinstance(v, Mapping) for v in value)


def type_problems(obj: Mapping[str, Any]) -> list[FieldProblem]:
    """Fields of ``obj``'s type and object metadata whose JSON type does not decode."""
    found = [
        FieldProblem(key, obj[key], "a string")
        for key in ("apiVersion", "kind")
        if not _fits(_STRING, obj.get(key))
    ]
    meta = obj.get("metadata")
    if meta is None:
        return found
    if not isinstance(meta, Mapping):
        return [*found, FieldProblem("metadata", meta, "an object (v1.ObjectMeta)")]
    for key, kind in _META_FIELDS.items():
        if not _fits(kind, meta.get(key)):
            found.append(FieldProblem(f"metadata.{key}", meta[key], f"of type {kind}"))
    refs = meta.get("ownerReferences")
    for i, ref in enumerate(refs if isinstance(refs, list) else []):
        for key, kind in _OWNER_FIELDS.items():
            if isinstance(ref, Mapping) and not _fits(kind, ref.get(key)):
                where = f"metadata.ownerReferences[{i}].{key}"
                found.append(FieldProblem(where, ref[key], f"of type {kind}"))
    return found


def _qualified_key(key: str) -> bool:
    """``[prefix/]name``: prefix a DNS subdomain <= 253, name <= 63 (labels and annotations)."""
    prefix, slash, short = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return len(short) <= 63 and _QUALIFIED_NAME.fullmatch(short) is not None


def _name_problem(name: object, *, label: bool) -> FieldProblem | None:
    if label:
        if isinstance(name, str) and len(name) <= 63 and DNS_LABEL.fullmatch(name):
            return None
        return FieldProblem("metadata.name", name, "a lowercase RFC 1123 label (<= 63)")
    if isinstance(name, str) and len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name):
        return None
    return FieldProblem(
        "metadata.name", name, "a lowercase RFC 1123 subdomain of at most 253 characters"
    )


def _owner_problems(refs: list[Mapping[str, Any]]) -> list[FieldProblem]:
    found: list[FieldProblem] = []
    for i, ref in enumerate(refs):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                where = f"metadata.ownerReferences[{i}].{key}"
                found.append(FieldProblem(where, ref.get(key), f"a non-empty {key}"))
    if sum(ref.get("controller") is True for ref in refs) > 1:
        found.append(
            FieldProblem(
                "metadata.ownerReferences",
                [ref.get("name") for ref in refs if ref.get("controller") is True],
                "only one reference with controller set to true",
            )
        )
    return found


def metadata_problems(meta: Mapping[str, Any], *, label_name: bool = False) -> list[FieldProblem]:
    """Problems in ``meta`` (its types already decode): the name an RFC 1123 subdomain (a
    label where ``label_name``, as for namespaces), qualified label and annotation keys,
    label values, annotations within 256 KiB, complete owner references with one
    controller at most, finalizers qualified names (``example.com/cleanup``)."""
    found = [p for p in [_name_problem(meta.get("name", ""), label=label_name)] if p]
    for field in ("labels", "annotations"):
        entries = meta.get(field) or {}
        for key, value in entries.items():
            if not _qualified_key(key):
                found.append(
                    FieldProblem(
                        f"metadata.{field}",
                        key,
                        "a qualified name: [prefix/]name, name <= 63 characters",
                    )
                )
            text = value or ""
            if field == "labels" and (len(text) > 63 or not _LABEL_VALUE.fullmatch(text)):
                found.append(
                    FieldProblem(
                        f"metadata.labels.{key}",
                        value,
                        "a label value: <= 63 alphanumerics, '-', '_' or '.'",
                    )
                )
    notes = meta.get("annotations") or {}
    size = sum(len(f"{k}{v or ''}".encode("utf-8", "surrogatepass")) for k, v in notes.items())
    if size > MAX_ANNOTATIONS_BYTES:
        found.append(
            FieldProblem(
                "metadata.annotations",
                f"{size} bytes",
                f"Too long: must have at most {MAX_ANNOTATIONS_BYTES} bytes",
            )
        )
    found += _owner_problems(list(meta.get("ownerReferences") or []))
    found += [
        FieldProblem("metadata.finalizers", name, "a qualified name: [prefix/]name")
        for name in meta.get("finalizers") or []
        if not _qualified_key(name)
    ]
    return found
