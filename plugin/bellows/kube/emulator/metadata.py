"""Object metadata checks the API server makes on every write: names, labels, annotations."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bellows.kube.emulator.schemas import FieldProblem

__all__ = ["metadata_problems"]

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def metadata_problems(meta: Mapping[str, Any]) -> list[FieldProblem]:
    """Problems in ``meta``: name an RFC 1123 subdomain, qualified label/annotation keys."""
    found: list[FieldProblem] = []
    name = meta.get("name", "")
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        found.append(
            FieldProblem(
                "metadata.name", name, "a lowercase RFC 1123 subdomain of at most 253 characters"
            )
        )
    for field in ("labels", "annotations"):
        entries = meta.get(field) or {}
        if not isinstance(entries, Mapping):
            found.append(FieldProblem(f"metadata.{field}", entries, "a map of string to string"))
            continue
        for key, value in entries.items():
            prefix, _, short = key.rpartition("/")
            if (
                (prefix and not _DNS_SUBDOMAIN.match(prefix))
                or len(short) > 63
                or not _LABEL_NAME.match(short)
            ):
                found.append(
                    FieldProblem(
                        f"metadata.{field}",
                        key,
                        "a qualified name: [prefix/]name, name <= 63 characters",
                    )
                )
            if not isinstance(value, str):
                found.append(FieldProblem(f"metadata.{field}.{key}", value, "a string"))
            elif field == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                found.append(
                    FieldProblem(
                        f"metadata.labels.{key}",
                        value,
                        "a label value: <= 63 alphanumerics, '-', '_' or '.'",
                    )
                )
    return found
