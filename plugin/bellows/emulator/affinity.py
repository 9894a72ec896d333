"""Which nodes a pod may go to: its ``nodeSelector`` and required node affinity.

kube-scheduler's ``NodeAffinity`` filter (``k8s.io/component-helpers/scheduling/corev1/
nodeaffinity``), for the emulated scheduler (``scheduling.py``): a node passes when its
labels hold every ``nodeSelector`` pair **and**, if the pod has
``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution``, match at least one
of its ``nodeSelectorTerms`` (each term: all its ``matchExpressions`` hold). Operators
``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt`` and ``Lt`` (an integer value),
as the API server defines them. ``matchFields`` (on ``metadata.name`` only) is honoured too.
A term with neither matches no node, and a required affinity with no terms matches none, as
in the scheduler. Preferred node affinity does not filter: it scores
(:meth:`NodeRequirement.preference`, the ``NodeAffinity`` score plugin: the weights of the
preferred terms a node matches).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ANY_NODE", "NodeRequirement", "node_requirement"]

_REQUIRED: Final = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED: Final = "preferredDuringSchedulingIgnoredDuringExecution"
_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


@dataclass(frozen=True)
class Expression:
    """One ``matchExpressions`` (or ``matchFields``) entry."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def holds(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        try:  # Gt / Lt: one integer on each side, else the node does not match
            have, want = int(value), int(self.values[0])
        except (ValueError, IndexError):
            return False
        return have > want if self.operator == "Gt" else have < want


@dataclass(frozen=True)
class Term:
    """One ``nodeSelectorTerms`` entry: all its expressions hold (on labels and fields)."""

    labels: tuple[Expression, ...] = ()
    fields: tuple[Expression, ...] = ()

    def holds(self, name: str, labels: Mapping[str, str]) -> bool:
        if not self.labels and not self.fields:
            return False  # an empty term matches nothing
        named = {"metadata.name": name}
        return all(e.holds(labels) for e in self.labels) and all(
            e.holds(named) for e in self.fields
        )


@dataclass(frozen=True)
class NodeRequirement:
    """A pod's ``nodeSelector`` and required node affinity terms (``None``: no affinity)."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    preferred: tuple[tuple[int, Term], ...] = ()  # (weight, term) of the preferred ones

    def preference(self, name: str, labels: Mapping[str, str]) -> int:
        """The summed weight of the preferred terms a node of ``name`` and ``labels`` matches."""
        return sum(weight for weight, term in self.preferred if term.holds(name, labels))

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether a node of ``name`` and ``labels`` passes the filter."""
        if any(labels.get(k) != v for k, v in self.selector):
            return False
        return self.terms is None or any(t.holds(name, labels) for t in self.terms)


ANY_NODE: Final = NodeRequirement()


def _expressions(entries: object, where: str) -> tuple[Expression, ...]:
    if entries is None:
        return ()
    if not isinstance(entries, Sequence) or isinstance(entries, str):
        raise ValueError(f"{where}: {entries!r} is not a list of requirements")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where}[{i}]: {entry!r} is not an object")
        op = entry.get("operator")
        if op not in _OPERATORS:
            raise ValueError(f"{where}[{i}].operator: {op!r} is not one of {', '.join(_OPERATORS)}")
        values = entry.get("values") or []
        if not isinstance(values, Sequence) or isinstance(values, str):
            raise ValueError(f"{where}[{i}].values: {values!r} is not a list of strings")
        out.append(Expression(str(entry.get("key", "")), str(op), tuple(str(v) for v in values)))
    return tuple(out)


def node_requirement(pod_spec: Mapping[str, Any]) -> NodeRequirement:
    """The filter of a pod spec (a PodTemplateSpec's ``spec``). Raises ``ValueError`` naming
    the field of a malformed one (the API server would have refused the pod)."""
    selector = pod_spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise ValueError(f"nodeSelector: {selector!r} is not a map of label to value")
    affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get(_REQUIRED)
    terms: tuple[Term, ...] | None = None
    if required is not None:
        where = f"affinity.nodeAffinity.{_REQUIRED}.nodeSelectorTerms"
        listed = required.get("nodeSelectorTerms") or []
        terms = tuple(_term(t, f"{where}[{i}]") for i, t in enumerate(listed))
    where = f"affinity.nodeAffinity.{_PREFERRED}"
    preferred = tuple(
        (int(t.get("weight", 0)), _term(t.get("preference") or {}, f"{where}[{i}].preference"))
        for i, t in enumerate(affinity.get(_PREFERRED) or [])
    )
    pairs = tuple(sorted((str(k), str(v)) for k, v in selector.items()))
    return NodeRequirement(pairs, terms, preferred)


def _term(term: Mapping[str, Any], where: str) -> Term:
    return Term(
        _expressions(term.get("matchExpressions"), f"{where}.matchExpressions"),
        _expressions(term.get("matchFields"), f"{where}.matchFields"),
    )
