"""Asking Kueue's topology-aware scheduling for a job's nodes (``controller.placement:
nodes`` beside a ClusterQueue whose flavors all have a topology): the sizing patch sets
one topology annotation of Bellows' own, marked, replaced by the next sizing, never over
the owner's; the Actuator asks it only of Kueue jobs Kueue places by topology."""

from __future__ import annotations

import copy
from typing import Any

from bellows.emulator.patching import merge_patch
from bellows.emulator.topology import topology_request
from bellows.kube import PyTorchJobKind
from bellows.kube.placement import (
    HOSTNAME,
    KUEUE_PREFERRED_TOPOLOGY,
    KUEUE_REQUIRED_TOPOLOGY,
    PINNED_NODES,
    TOPOLOGY_REQUEST,
    KueueTopology,
    Pinned,
    Placement,
    placed_template,
)

SELECTOR = {"training.kubeflow.org/job-name": "a"}
UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
INDEX = "training.kubeflow.org/replica-index"


def _apply(template: dict[str, Any], ask: Any) -> dict[str, Any]:
    patch = placed_template(template, selector=SELECTOR, placement=ask)
    return merge_patch(template, patch) if patch else template


def _notes(template: dict[str, Any]) -> dict[str, str]:
    return dict((template.get("metadata") or {}).get("annotations") or {})


def test_one_node_is_required_more_preferred_and_the_next_sizing_replaces_its_own() -> None:
    template: dict[str, Any] = {
        "metadata": {"annotations": {"team": "vision"}},
        "spec": {"containers": [{"name": "c"}]},
    }
    one = _apply(template, KueueTopology(Placement.NODES, HOSTNAME, required=True))
    assert _notes(one) == {
        "team": "vision",
        KUEUE_REQUIRED_TOPOLOGY: HOSTNAME,
        TOPOLOGY_REQUEST: KUEUE_REQUIRED_TOPOLOGY,
    }
    # what Kueue reads from it: one podSet request, required on the node level
    assert topology_request(one, INDEX) == {"required": HOSTNAME, "podIndexLabel": INDEX}
    # the same ask again changes nothing (the patch is idempotent)
    same = KueueTopology(Placement.NODES, HOSTNAME, required=True)
    assert placed_template(one, selector=SELECTOR, placement=same).get("metadata") is None
    # resized onto more nodes: preferred replaces Bellows' required, nothing stacked
    wide = _apply(one, KueueTopology(Placement.NODES, HOSTNAME, required=False))
    assert _notes(wide) == {
        "team": "vision",
        KUEUE_PREFERRED_TOPOLOGY: HOSTNAME,
        TOPOLOGY_REQUEST: KUEUE_PREFERRED_TOPOLOGY,
    }
    assert topology_request(wide, INDEX) == {"preferred": HOSTNAME, "podIndexLabel": INDEX}
    # no longer placed by Kueue's topology (a plain placement): Bellows' annotation goes
    plain = _apply(wide, Placement.NODES)
    assert _notes(plain) == {"team": "vision"}


def test_an_owners_topology_annotation_stands_and_bellows_adds_none() -> None:
    for key, value in ((KUEUE_PREFERRED_TOPOLOGY, "cloud/rack"), (UNCONSTRAINED, "true")):
        template = {"metadata": {"annotations": {key: value}}, "spec": {"containers": []}}
        asked = _apply(template, KueueTopology(Placement.NODES, HOSTNAME, required=True))
        assert _notes(asked) == {key: value}  # theirs, alone: Kueue refuses two
        assert _apply(asked, Placement.NODES) == asked


def test_a_pin_written_before_is_taken_out_and_the_pack_term_stays() -> None:
    template: dict[str, Any] = {"spec": {"containers": [{"name": "c"}]}}
    pinned = _apply(template, Pinned(Placement.NODES, ("n1",), required=False))
    assert _notes(pinned)[PINNED_NODES] == "n1"
    asked = _apply(pinned, KueueTopology(Placement.NODES, HOSTNAME, required=True))
    assert PINNED_NODES not in _notes(asked)
    assert not asked["spec"]["affinity"].get("nodeAffinity")  # the preferred pin is gone
    assert asked["spec"]["affinity"]["podAffinity"]  # pack's term, as with a pin
    assert _notes(asked)[KUEUE_REQUIRED_TOPOLOGY] == HOSTNAME


def test_a_forged_mark_only_touches_its_own_jobs_annotations() -> None:
    """A tenant who writes Bellows' mark on their own template makes Bellows take their
    annotation for its own: it is replaced in their job, and no other job reads it. A mark
    naming anything but a topology annotation names nothing: no other annotation is
    touched."""
    forged = {
        "metadata": {
            "annotations": {KUEUE_REQUIRED_TOPOLOGY: "cloud/rack", TOPOLOGY_REQUEST: "team"},
            "labels": {},
        },
        "spec": {"containers": []},
    }
    forged["metadata"]["annotations"]["team"] = "vision"
    other = {"metadata": {"annotations": {}}, "spec": {"containers": []}}
    ask = KueueTopology(Placement.NODES, HOSTNAME, required=False)
    asked = _apply(copy.deepcopy(forged), ask)
    # the mark named "team", not a topology annotation: theirs (required) is the owner's
    assert _notes(asked) == {KUEUE_REQUIRED_TOPOLOGY: "cloud/rack", "team": "vision"}
    forged["metadata"]["annotations"][TOPOLOGY_REQUEST] = KUEUE_REQUIRED_TOPOLOGY
    asked = _apply(forged, ask)
    assert _notes(asked) == {
        "team": "vision",
        KUEUE_PREFERRED_TOPOLOGY: HOSTNAME,
        TOPOLOGY_REQUEST: KUEUE_PREFERRED_TOPOLOGY,
    }
    assert _apply(other, ask)["metadata"]["annotations"] == {
        KUEUE_PREFERRED_TOPOLOGY: HOSTNAME,
        TOPOLOGY_REQUEST: KUEUE_PREFERRED_TOPOLOGY,
    }


def test_the_sizing_patch_of_a_pytorchjob_carries_it_on_every_template(examples: Any) -> None:
    job = copy.deepcopy(examples["PyTorchJob"])
    ask = KueueTopology(Placement.NODES, HOSTNAME, required=True)
    patch = PyTorchJobKind().placement_patch(job, ask, HOSTNAME)
    placed = merge_patch(job, {"spec": patch})  # the spec's part of the sizing patch
    for spec in placed["spec"]["pytorchReplicaSpecs"].values():
        assert _notes(spec["template"])[KUEUE_REQUIRED_TOPOLOGY] == HOSTNAME
