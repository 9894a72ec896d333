"""Label and field selectors in the API server's query syntax.

Label selectors: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k``,
``!k``, joined by commas. Field selectors on custom resources support only
``metadata.name`` and ``metadata.namespace`` (with ``=``, ``==``, ``!=``), as the real server;
core Events also the fields its event strategy selects on (:data:`EVENT_FIELDS`: ``source``,
``reportingComponent``, ``reason``, ``type``, ``involvedObject.*``).
A selector it cannot parse raises :class:`SelectorError` (the server answers 400).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "EVENT_FIELDS",
    "POD_FIELDS",
    "Matcher",
    "SelectorError",
    "field_selector",
    "label_selector",
]

Matcher = Callable[[Mapping[str, Any]], bool]

# matched whole (fullmatch), never up to a trailing newline as "$" would
_SET_TERM = re.compile(r"\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*")
_EQ_TERM = re.compile(r"\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*")
_FIELDS = {"metadata.name": ("metadata", "name"), "metadata.namespace": ("metadata", "namespace")}
# kube-apiserver's pkg/registry/core/event: the fields an Event list or watch selects on
EVENT_FIELDS = {
    **{f"involvedObject.{f}": ("involvedObject", f) for f in (
        "kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath",
    )},
    "reason": ("reason",),
    "reportingComponent": ("reportingComponent",),
    "source": ("source", "component"),
    "type": ("type",),
}  # fmt: skip


# pkg/registry/core/pod: the fields a Pod list selects on (kubectl describe node asks for
# spec.nodeName and status.phase)
POD_FIELDS = {
    "spec.nodeName": ("spec", "nodeName"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "spec.serviceAccountName": ("spec", "serviceAccountName"),
    "status.phase": ("status", "phase"),
    "status.podIP": ("status", "podIP"),
}


class SelectorError(ValueError):
    """A selector string the API server would not accept."""


def _split_terms(text: str) -> list[str]:
    # Commas inside "in (a,b)" do not separate terms.
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def _label_term(term: str) -> Callable[[Mapping[str, str]], bool]:
    eq = _EQ_TERM.fullmatch(term)
    if eq:
        key, op, value = eq.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    match = _SET_TERM.fullmatch(term)
    if not match:
        raise SelectorError(f"unable to parse requirement {term.strip()!r}")
    negate, key, op, values = match.groups()
    if op:
        if negate:
            raise SelectorError(f"'!' cannot combine with {op!r} in {term.strip()!r}")
        allowed = {v.strip() for v in values.split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in allowed
        return lambda labels: labels.get(key) not in allowed
    if negate:
        return lambda labels: key not in labels
    return lambda labels: key in labels


def label_selector(text: str | None) -> Matcher:
    """A predicate on an object's ``metadata.labels`` for the selector ``text``."""
    terms = [_label_term(t) for t in _split_terms(text or "")]

    def matches(obj: Mapping[str, Any]) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(term(labels) for term in terms)

    return matches


def field_selector(text: str | None, extra: Mapping[str, tuple[str, ...]] | None = None) -> Matcher:
    """A predicate on ``metadata.name`` / ``metadata.namespace`` (and the ``extra`` fields
    the resource selects on: :data:`EVENT_FIELDS` for Events) for the selector ``text``."""
    fields: Mapping[str, tuple[str, ...]] = {**_FIELDS, **(extra or {})}
    checks: list[tuple[tuple[str, ...], bool, str]] = []
    for term in _split_terms(text or ""):
        eq = _EQ_TERM.fullmatch(term)
        if not eq or eq.group(1) not in fields:
            raise SelectorError(
                f"field selector {term.strip()!r} is not supported: expected one of "
                f"{', '.join(sorted(fields))} with =, == or !="
            )
        checks.append((fields[eq.group(1)], eq.group(2) != "!=", eq.group(3)))

    def matches(obj: Mapping[str, Any]) -> bool:
        for path, equal, value in checks:
            actual: Any = obj
            for step in path:
                actual = actual.get(step) if isinstance(actual, Mapping) else None
            if ((actual or "") == value) != equal:
                return False
        return True

    return matches
