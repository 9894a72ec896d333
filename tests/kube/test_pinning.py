"""Pinning a job to the nodes the controller's node view picked (``controller.placement:
nodes``): a required node affinity ANDed into the owner's terms, valid against the real
CRDs, replaced (never stacked) by the next sizing, taken out when no longer wanted."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bellows.emulator.affinity import node_requirement
from bellows.emulator.patching import merge_patch
from bellows.emulator.resources import crd_resources
from bellows.kube import MPIJobKind, PyTorchJobKind
from bellows.kube.adapters import TRAINJOB
from bellows.kube.adapters.trainjob import PLACEMENT_MANAGER
from bellows.kube.placement import (
    HOSTNAME,
    PINNED_NODES,
    Pinned,
    Placement,
    pack_term,
    pinned_expression,
    placed_template,
)

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
KINDS = {"PyTorchJob": PyTorchJobKind(), "MPIJob": MPIJobKind()}
SELECTOR = {"training.kubeflow.org/job-name": "a"}


@pytest.fixture(scope="module")
def schemas(shared_data: Any) -> dict[str, Any]:
    return {r.kind: r for r in crd_resources(sorted((shared_data / "crds").glob("*.yaml")))}


def _apply(template: dict[str, Any], nodes: tuple[str, ...]) -> dict[str, Any]:
    ask = Pinned(Placement.NODES, nodes) if nodes else Placement.NODES
    patch = placed_template(template, selector=SELECTOR, placement=ask)
    return merge_patch(template, patch) if patch else template


def _allowed(template: dict[str, Any], labels: dict[str, dict[str, str]]) -> set[str]:
    requirement = node_requirement(template.get("spec") or {})
    return {n for n, lb in labels.items() if requirement.allows(n, lb)}


NODES = {
    "n1": {"gpu": "t4"},
    "n2": {"gpu": "t4"},
    "n3": {"gpu": "a100"},
    "n4": {"gpu": "t4", "spot": "true"},
}


def test_a_pin_requires_the_nodes_and_the_next_one_replaces_it() -> None:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    pinned = _apply(template, ("n2", "n1"))
    assert pinned["metadata"]["annotations"][PINNED_NODES] == "n1,n2"
    terms = pinned["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    # one term per node (the API server takes one value per field requirement), ORed
    assert terms == [{"matchFields": [pinned_expression(n)]} for n in ("n1", "n2")]
    assert _allowed(pinned, NODES) == {"n1", "n2"}
    # the pack term comes with it (nodes is pack, and more)
    assert pinned["spec"]["affinity"]["podAffinity"][PREFERRED] == [pack_term(SELECTOR)]
    again = _apply(pinned, ("n3",))
    assert _allowed(again, NODES) == {"n3"}
    assert again["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
        {"matchFields": [pinned_expression("n3")]}
    ]
    assert (
        placed_template(again, selector=SELECTOR, placement=Pinned(Placement.NODES, ("n3",))) == {}
    )
    # no pin wanted (no room in the view): Bellows' requirement goes, the pack term stays
    free = _apply(again, ())
    assert not free["spec"]["affinity"].get("nodeAffinity")  # {} left by the merge patch
    assert PINNED_NODES not in free["metadata"].get("annotations", {})
    assert _allowed(free, NODES) == set(NODES)
    assert free["spec"]["affinity"]["podAffinity"][PREFERRED] == [pack_term(SELECTOR)]


def test_a_pin_is_anded_into_each_of_the_owners_terms_which_stay() -> None:
    owner = [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["t4"]}]},
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
    ]
    template: dict[str, Any] = {
        "spec": {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": owner}}}}
    }
    assert _allowed(template, NODES) == {"n1", "n2", "n3", "n4"}
    pinned = _apply(template, ("n2", "n3", "n4"))
    assert _allowed(pinned, NODES) == {"n2", "n3", "n4"}
    pinned = _apply(pinned, ("n1",))
    assert _allowed(pinned, NODES) == {"n1"}
    unpinned = _apply(pinned, ())
    assert unpinned["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == owner


def test_an_owners_own_field_requirement_stays_beside_the_pin() -> None:
    mine = {"key": "metadata.name", "operator": "NotIn", "values": ["n4"]}
    template: dict[str, Any] = {
        "spec": {
            "affinity": {
                "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [mine]}]}}
            }
        }
    }
    pinned = _apply(template, ("n3", "n4"))
    assert _allowed(pinned, NODES) == {"n3"}
    terms = _apply(pinned, ())["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [mine]}]


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_a_pinned_sizing_patch_is_valid_against_the_real_crds(
    schemas: dict[str, Any], examples: dict[str, Any], kind: str
) -> None:
    adapter = KINDS[kind]
    obj = copy.deepcopy(examples[kind])
    obj["metadata"].update(uid="u-1", resourceVersion="7")
    spec = adapter.placement_patch(obj, Pinned(Placement.NODES, ("gpu-node-1",)), HOSTNAME)
    patched = merge_patch(obj, {"spec": spec})
    assert schemas[kind].problems(patched) == []
    for rtype, replica in adapter.specs(patched).items():
        template = replica["template"]
        if rtype == "Launcher":
            continue
        assert _allowed(template, {"gpu-node-0": {}, "gpu-node-1": {}}) == {"gpu-node-1"}
    # the next sizing takes it out (merge patch nulls), still valid
    spec = adapter.placement_patch(patched, Placement.NODES, HOSTNAME)
    unpinned = merge_patch(patched, {"spec": spec})
    assert schemas[kind].problems(unpinned) == []
    for replica in adapter.specs(unpinned).values():
        assert PINNED_NODES not in (replica["template"].get("metadata") or {}).get(
            "annotations", {}
        )


def test_a_trainjob_is_pinned_through_bellows_runtime_patch(examples: dict[str, Any]) -> None:
    obj = copy.deepcopy(examples["TrainJob"])
    obj["metadata"].update(uid="u-1", resourceVersion="7")
    spec = TRAINJOB.placement_patch(obj, Pinned(Placement.NODES, ("gpu-node-0",)), HOSTNAME)
    (entry,) = [p for p in spec["runtimePatches"] if p["manager"] == PLACEMENT_MANAGER]
    text = str(entry)
    assert "gpu-node-0" in text
    assert "podAffinity" in text


def test_a_preferred_pin_scores_the_nodes_and_never_filters_them() -> None:
    """A job Kueue starts is only preferred on its nodes (a stale pin must not hold it)."""
    liked = {
        "weight": 7,
        "preference": {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100"]}]},
    }
    template: dict[str, Any] = {"spec": {"affinity": {"nodeAffinity": {PREFERRED: [liked]}}}}
    ask = Pinned(Placement.NODES, ("n2",), required=False)
    pinned = merge_patch(template, placed_template(template, selector=SELECTOR, placement=ask))
    assert _allowed(pinned, NODES) == set(NODES)  # nothing filtered
    requirement = node_requirement(pinned["spec"])
    scores = {n: requirement.preference(n, lb) for n, lb in NODES.items()}
    assert scores == {"n1": 0, "n2": 100, "n3": 7, "n4": 0}
    # the owner's preference stays first; the pin goes with the next sizing
    unpinned = _apply(pinned, ())
    assert unpinned["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [liked]
    assert PINNED_NODES not in unpinned["metadata"].get("annotations", {})
    # and a required pin replaces a preferred one
    required = _apply(pinned, ("n4",))
    assert _allowed(required, NODES) == {"n4"}
    assert required["spec"]["affinity"]["nodeAffinity"][PREFERRED] == [liked]


def test_a_pin_annotation_a_tenant_wrote_only_touches_its_own_job() -> None:
    """``bellows.io/pinned-nodes`` sits where the job's owner writes: forged, it can only
    make Bellows take out requirements of that one job's template (the owner's own, which
    they may edit anyway); a value that names no requirement there changes nothing but the
    note, and the next pin is Bellows' own."""
    mine = {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["t4"]}]}
    template: dict[str, Any] = {
        "metadata": {"annotations": {PINNED_NODES: "n9,,x/../y"}},
        "spec": {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [mine]}}}},
    }
    unpinned = _apply(template, ())
    assert unpinned["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [mine]
    assert PINNED_NODES not in unpinned["metadata"]["annotations"]
    pinned = _apply(template, ("n2",))
    assert _allowed(pinned, NODES) == {"n2"}
    assert pinned["metadata"]["annotations"][PINNED_NODES] == "n2"
