"""Kueue's topology-aware scheduling (TAS) as pure data: requests, domains, assignments.

The part of the emulated Kueue (``kueue.py``, ``tas.py``) that decides, with no store and no
I/O. What Kueue v0.19.2 does, from its design (KEP-2724, "Computing the assignment") and
its snapshot's algorithm (``pkg/cache/.../tas_flavor_snapshot.go``):

* **a podSet's request** comes from one of its pod template's annotations
  (:data:`REQUIRED`, :data:`PREFERRED`, :data:`UNCONSTRAINED`), stored in the Workload's
  ``spec.podSets[].topologyRequest`` (:func:`topology_request`); a podSet without one, on a
  ClusterQueue whose flavors are all TAS flavors, is handled as *implied* unconstrained at
  the lowest level (the "implicit default": the annotation is not persisted);
* **domains**: the topology's levels are node labels, highest first; a domain of level
  ``i`` is one tuple of the first ``i + 1`` label values, the lowest level's domains are
  the leaves. A leaf holds as many of the podSet's pods as its free GPUs allow (free: the
  nodes' allocatable less what Kueue counts as used, ``tas.py``); a domain holds its
  children's sum;
* **finding the assignment** (:func:`find_assignment`), in two phases: at the requested
  level (the lowest for unconstrained), the domains sorted by how many pods they hold, most
  first, ties by their values (*BestFit*), or that order reversed (*LeastFreeCapacity*,
  Kueue's default profile ``TASProfileMixed`` for unconstrained and implied requests).
  With BestFit, when the first domain holds them all, the one that holds them with least
  room to spare is taken. When none holds them all: *required* fails (the Workload stays
  pending with Kueue's message), *preferred* tries the next level up, and at the top (or
  for unconstrained, at once) the pods go to as many domains as needed, in the sorted
  order, the last one chosen again to fit best. Then, level by level down, the children
  of the chosen domains are sorted the same way and taken until they hold the count;
* **the assignment** is written at the lowest level only (with a ``kubernetes.io/hostname``
  lowest level, that level alone), domains in the order of their values, in
  ``v1beta2``'s shape (:func:`encode`: one slice, values per level ``universal`` when all
  the same, else ``individual`` with their common prefix ending in ``-``; pod counts
  ``universal`` when all the same); :func:`decode` reads any valid shape back.

Left out: resources other than ``nvidia.com/gpu`` (a podSet without GPUs gets no
assignment), slices (``podset-slice-*``), ``BalancedPlacement``, taints and tolerations,
and Kueue's hostname-prefix encoding of many slices (one slice is always valid). A domain
that holds none of the podSet's pods is passed over (Kueue's older snapshot stopped its
LeastFreeCapacity walk at the first such domain).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from bellows.inputs import SpecError
from bellows.kube.placement import (
    HOSTNAME,
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    KUEUE_UNCONSTRAINED_TOPOLOGY,
)

__all__ = [
    "HOSTNAME",
    "PREFERRED",
    "REQUIRED",
    "UNCONSTRAINED",
    "Domain",
    "Request",
    "decode",
    "encode",
    "find_assignment",
    "read_request",
    "topology_levels",
    "topology_request",
]

# Kueue's annotations, as the controller writes them (one source for both)
REQUIRED: Final = KUEUE_REQUIRED_TOPOLOGY
PREFERRED: Final = KUEUE_PREFERRED_TOPOLOGY
UNCONSTRAINED: Final = KUEUE_UNCONSTRAINED_TOPOLOGY
ANNOTATIONS: Final = (REQUIRED, PREFERRED, UNCONSTRAINED)

Mode = Literal["required", "preferred", "unconstrained"]


@dataclass(frozen=True)
class Request:
    """A podSet's topology request: ``level`` (a node label; ``None``: the lowest level)."""

    mode: Mode
    level: str | None = None
    implied: bool = False  # the implicit default: no annotation, on a TAS-only ClusterQueue

    @property
    def least_free(self) -> bool:
        """Whether Kueue picks domains least free first (``TASProfileMixed``)."""
        return self.mode == "unconstrained"


Domain = tuple[tuple[str, ...], int]
"""One domain of an assignment: its values (one per level written) and its pod count."""


def topology_levels(name: str, levels: Sequence[str]) -> tuple[str, ...]:
    """A Topology's levels, checked as Kueue's webhook checks them: 1 to 16 distinct node
    label keys, ``kubernetes.io/hostname`` only as the lowest. ``ValueError`` names them."""
    keys = tuple(levels)
    if not keys or len(keys) > 16 or len(set(keys)) != len(keys) or not all(keys):
        raise ValueError(
            f"topology {name}: levels {list(keys)!r} must be 1 to 16 distinct node label keys"
        )
    if HOSTNAME in keys[:-1]:
        raise ValueError(
            f"topology {name}: levels {list(keys)!r}: {HOSTNAME} may only be the lowest level"
        )
    return keys


def topology_request(template: Mapping[str, Any], index_label: str) -> dict[str, Any] | None:
    """The ``topologyRequest`` of a podSet from its pod template's annotations (``None``:
    none), with ``podIndexLabel`` ``index_label``. :class:`SpecError` names an annotation
    that is malformed, or more than one (Kueue's webhook refuses such a job)."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    given = [key for key in ANNOTATIONS if key in notes]
    if len(given) > 1:
        raise SpecError("metadata.annotations", given, f"at most one of {', '.join(ANNOTATIONS)}")
    if not given:
        return None
    key, value = given[0], notes[given[0]]
    request: dict[str, Any] = {"podIndexLabel": index_label}
    if key == UNCONSTRAINED:
        if value not in ("true", "false"):
            raise SpecError(f"metadata.annotations[{key}]", value, '"true" or "false"')
        request["unconstrained"] = value == "true"
    elif not isinstance(value, str) or not value or len(value) > 63:
        raise SpecError(f"metadata.annotations[{key}]", value, "a node label key, 1-63 chars")
    else:
        request["required" if key == REQUIRED else "preferred"] = value
    return request


def read_request(pod_set: Mapping[str, Any], *, implied: bool) -> Request | None:
    """The request of a Workload's podSet (``None``: none; ``implied``: the ClusterQueue's
    flavors are all TAS flavors, so a podSet without one is unconstrained)."""
    request = pod_set.get("topologyRequest") or {}
    if request.get("required"):
        return Request("required", str(request["required"]))
    if request.get("preferred"):
        return Request("preferred", str(request["preferred"]))
    if request.get("unconstrained") is True:
        return Request("unconstrained")
    return Request("unconstrained", implied=True) if implied else None


@dataclass
class _Node:
    values: tuple[str, ...]
    state: int  # pods it holds (phase 1), then pods it is given (phase 2)
    children: list[_Node]


def _sorted(domains: Sequence[_Node], least_free: bool) -> list[_Node]:
    """The domains that hold a pod, most first (ties by values), or least first."""
    out = sorted((d for d in domains if d.state > 0), key=lambda d: (-d.state, d.values))
    return out[::-1] if least_free else out


def _best_fit(domains: Sequence[_Node], count: int) -> _Node:
    """The first of ``domains`` (sorted most first) that holds ``count`` with least to spare
    (the first when none holds it)."""
    fits = [d for d in domains if d.state >= count]
    if not fits:
        return domains[0]
    least = min(d.state for d in fits)
    return next(d for d in fits if d.state == least)


def _take(domains: Sequence[_Node], count: int, least_free: bool) -> list[_Node]:
    """``updateCountsToMinimum``: the domains in order until they hold ``count``, the last
    one given only what is left (with BestFit, the one that fits it best)."""
    out: list[_Node] = []
    left = count
    for i, listed in enumerate(domains):
        domain = listed
        if not least_free and domain.state >= left:
            domain = _best_fit(domains[i:], left)
        if domain.state >= left:
            domain.state = left
            return [*out, domain]
        left -= domain.state
        out.append(domain)
    raise AssertionError(f"domains holding {count - left} pods were taken for {count}")


def _fit_level(
    levels: list[dict[tuple[str, ...], _Node]], index: int, request: Request, count: int
) -> tuple[int, list[_Node]] | str:
    """Phase 2a: the level and the domains there that hold ``count`` (or why none do)."""
    ranked = _sorted(list(levels[index].values()), request.least_free)
    if not ranked:
        return f"doesn't allow to fit any of {count} pod(s)"
    top = ranked[0]
    if not request.least_free and top.state >= count:
        top = _best_fit(ranked, count)
    if top.state >= count:
        return index, [top]
    if request.mode == "required":
        return f"allows to fit only {top.state} out of {count} pod(s)"
    if index > 0 and request.mode == "preferred":
        return _fit_level(levels, index - 1, request, count)
    chosen: list[_Node] = []
    left = count
    for i, listed in enumerate(ranked):
        if left <= 0:
            break
        fits = not request.least_free and listed.state >= left
        chosen.append(_best_fit(ranked[i:], left) if fits else listed)
        left -= listed.state
    if left > 0:
        return f"allows to fit only {count - left} out of {count} pod(s)"
    return index, chosen


def find_assignment(
    leaves: Mapping[tuple[str, ...], int],
    level_keys: Sequence[str],
    request: Request,
    count: int,
) -> list[Domain] | str:
    """Where Kueue puts ``count`` pods of a podSet with ``request``: the domains of the
    lowest level written (hostname alone when it is the lowest), each with its count,
    in the order of their values; or Kueue's reason when they do not fit (``topology
    "<name>" <reason>``, the caller names the topology). ``leaves``: the pods of the podSet
    each lowest-level domain (one value per level) holds."""
    keys = list(level_keys)
    level = request.level if request.level is not None else keys[-1]
    if level not in keys:
        return f"no requested topology level: {level}"
    tree: list[dict[tuple[str, ...], _Node]] = [{} for _ in keys]
    for values, pods in sorted(leaves.items()):
        child: _Node | None = None
        for depth in range(len(keys) - 1, -1, -1):
            key = values[: depth + 1]
            node = tree[depth].setdefault(key, _Node(key, 0, []))
            node.state += max(pods, 0)
            if child is not None and child not in node.children:
                node.children.append(child)
            child = node
    found = _fit_level(tree, keys.index(level), request, count)
    if isinstance(found, str):
        return found
    index, chosen = found
    chosen = _take(chosen, count, request.least_free)
    for _ in range(index, len(keys) - 1):
        lower = _sorted([c for d in chosen for c in d.children], request.least_free)
        chosen = _take(lower, count, request.least_free)
    first = len(keys) - 1 if keys[-1] == HOSTNAME else 0
    return [(d.values[first:], d.state) for d in sorted(chosen, key=lambda d: d.values)]


def _prefix(values: Sequence[str]) -> str:
    """The common prefix of ``values`` up to its last ``-``, leaving each a root."""
    common = values[0]
    for value in values[1:]:  # character by character: node names, not paths
        while not value.startswith(common):
            common = common[:-1]
    cut = common.rfind("-") + 1
    while cut and any(len(v) <= cut for v in values):
        cut = common.rfind("-", 0, cut - 1) + 1
    return common[:cut]


def encode(level_keys: Sequence[str], domains: Sequence[Domain]) -> dict[str, Any]:
    """The ``topologyAssignment`` of ``domains`` on ``level_keys`` (the levels written), in
    the Workload ``v1beta2`` shape (one slice)."""
    per_level: list[dict[str, Any]] = []
    for depth in range(len(level_keys)):
        values = [d[0][depth] for d in domains]
        if len(set(values)) == 1:
            per_level.append({"universal": values[0]})
            continue
        prefix = _prefix(values)
        individual: dict[str, Any] = {"roots": [v[len(prefix) :] for v in values]}
        if prefix:
            individual["prefix"] = prefix
        per_level.append({"individual": individual})
    counts = [d[1] for d in domains]
    pods: dict[str, Any] = (
        {"universal": counts[0]} if len(set(counts)) == 1 else {"individual": counts}
    )
    return {
        "levels": list(level_keys),
        "slices": [{"domainCount": len(domains), "valuesPerLevel": per_level, "podCounts": pods}],
    }


def decode(assignment: Mapping[str, Any]) -> tuple[list[str], list[Domain]]:
    """The levels and domains of a ``v1beta2`` ``topologyAssignment`` (any valid shape:
    slices, prefixes, suffixes, universal values and counts). :class:`SpecError` names a
    field that is malformed."""
    levels = [str(k) for k in assignment.get("levels") or []]
    out: list[Domain] = []
    for i, piece in enumerate(assignment.get("slices") or []):
        where = f"topologyAssignment.slices[{i}]"
        size = piece.get("domainCount")
        if not isinstance(size, int) or size < 1:
            raise SpecError(f"{where}.domainCount", size, "a whole number >= 1")
        columns = []
        for j, entry in enumerate(piece.get("valuesPerLevel") or []):
            if "universal" in entry:
                columns.append([str(entry["universal"])] * size)
                continue
            spec = entry.get("individual") or {}
            roots = spec.get("roots") or []
            if len(roots) != size:
                raise SpecError(f"{where}.valuesPerLevel[{j}].individual.roots", roots, f"{size}")
            head, tail = spec.get("prefix") or "", spec.get("suffix") or ""
            columns.append([f"{head}{r}{tail}" for r in roots])
        if len(columns) != len(levels):
            raise SpecError(f"{where}.valuesPerLevel", len(columns), f"{len(levels)} levels")
        counts = piece.get("podCounts") or {}
        each = counts.get("individual") or [counts.get("universal")] * size
        if len(each) != size or not all(isinstance(c, int) and c >= 1 for c in each):
            raise SpecError(f"{where}.podCounts", counts, f"{size} counts >= 1")
        out += [(tuple(col[k] for col in columns), int(each[k])) for k in range(size)]
    return levels, out
