"""The placement patch: packing asked for while a job is sized, merged, never clobbering."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from bellows.emulator.patching import merge_patch
from bellows.emulator.resources import crd_resources
from bellows.kube import MPIJobKind, PyTorchJobKind
from bellows.kube.journal import Phase, SendPatch, plan_scale
from bellows.kube.placement import (
    HOSTNAME,
    KUEUE_PREFERRED_TOPOLOGY,
    Placement,
    pack_term,
    placed_template,
)
from bellows.service.config import load_config

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
KINDS = {"PyTorchJob": PyTorchJobKind(), "MPIJob": MPIJobKind()}


@pytest.fixture(scope="module")
def schemas(shared_data):
    return {r.kind: r for r in crd_resources(sorted((shared_data / "crds").glob("*.yaml")))}


def suspended(obj):
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", resourceVersion="7")
    obj["spec"]["runPolicy"]["suspend"] = True
    return obj


def templates(kind, obj):
    adapter = KINDS[kind]
    return {t: s["template"] for t, s in adapter.specs(obj).items()}


def owner_affinity():
    """An owner's own affinity: a node preference, a required anti-affinity, a preferred term."""
    return {
        "nodeAffinity": {
            PREFERRED: [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": "gpu.type", "operator": "In", "values": ["t4"]}
                        ]
                    },
                }
            ]
        },
        "podAffinity": {
            PREFERRED: [
                {
                    "weight": 5,
                    "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"app": "dataset-cache"}},
                        "topologyKey": "topology.kubernetes.io/zone",
                    },
                }
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": HOSTNAME}
            ]
        },
    }


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_pack_patch_is_valid_against_the_real_crds_and_keeps_the_owners_affinity(
    schemas, examples, kind
):
    adapter = KINDS[kind]
    obj = suspended(examples[kind])
    for template in templates(kind, obj).values():
        template.setdefault("spec", {})["affinity"] = owner_affinity()
        template.setdefault("metadata", {}).setdefault("annotations", {})["team"] = "vision"
    spec = adapter.placement_patch(obj, Placement.PACK, HOSTNAME)
    patched = merge_patch(obj, {"spec": spec})
    assert schemas[kind].problems(patched) == []
    name = obj["metadata"]["name"]
    selector = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": adapter.operator_name,
    }
    for rtype, template in templates(kind, patched).items():
        affinity = template["spec"]["affinity"]
        before = owner_affinity()
        # the owner's terms stay, in their order; Bellows' term comes last, once
        assert affinity["podAffinity"][PREFERRED] == [
            *before["podAffinity"][PREFERRED],
            pack_term(selector),
        ], rtype
        assert affinity["nodeAffinity"] == before["nodeAffinity"]
        assert affinity["podAntiAffinity"] == before["podAntiAffinity"]
        assert template["metadata"]["annotations"]["team"] == "vision"
        # nothing else of the template moved
        original = templates(kind, obj)[rtype]
        assert {k: v for k, v in template["spec"].items() if k != "affinity"} == {
            k: v for k, v in original["spec"].items() if k != "affinity"
        }
    # asked twice, nothing more to change (idempotent: a replayed step adds no second term)
    assert adapter.placement_patch(patched, Placement.PACK, HOSTNAME) == {}


def test_an_equal_term_the_owner_wrote_is_not_added_again_and_none_changes_nothing(examples):
    adapter = KINDS["PyTorchJob"]
    obj = suspended(examples["PyTorchJob"])
    selector = adapter.pod_selector(obj)
    mine = dict(pack_term(selector), weight=40)  # the owner's own weight for the same term
    for template in templates("PyTorchJob", obj).values():
        template.setdefault("spec", {})["affinity"] = {"podAffinity": {PREFERRED: [mine]}}
    assert adapter.placement_patch(obj, Placement.PACK, HOSTNAME) == {}
    assert adapter.placement_patch(obj, Placement.NONE, HOSTNAME) == {}


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_kueue_topology_annotates_every_pod_template_and_keeps_an_owners_choice(
    schemas, examples, kind
):
    adapter = KINDS[kind]
    obj = suspended(examples[kind])
    spec = adapter.placement_patch(obj, Placement.KUEUE_TOPOLOGY, "cloud.example.com/host")
    patched = merge_patch(obj, {"spec": spec})
    assert schemas[kind].problems(patched) == []
    for template in templates(kind, patched).values():
        notes = template["metadata"]["annotations"]
        assert notes[KUEUE_PREFERRED_TOPOLOGY] == "cloud.example.com/host"
        assert "affinity" not in template.get("spec", {})
    # an owner who chose a topology (required or preferred) keeps it
    own = {"metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}}}
    assert (
        placed_template(own, selector={}, placement=Placement.KUEUE_TOPOLOGY, topology_key="h")
        == {}
    )


def test_the_planner_sends_placement_with_replicas_and_env_only(schemas, examples):
    kind = KINDS["PyTorchJob"]
    obj = suspended(examples["PyTorchJob"])
    env = {"GLOBAL_BATCH_SIZE": "512", "LOCAL_BATCH_SIZE": "128"}

    def plan(job, **placement):
        return plan_scale(
            kind, job, target=(4, 512), env=env, requested=(2, 256), launcher=None, now=NOW,
            **placement,
        )  # fmt: skip

    step = plan(obj, placement=Placement.PACK)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED  # a job that never ran: sized in one write
    patched = merge_patch(obj, step.body)
    assert schemas["PyTorchJob"].problems(patched) == []
    assert kind.view(patched, ()).gpus == 4
    for template in templates("PyTorchJob", patched).values():
        terms = template["spec"]["affinity"]["podAffinity"][PREFERRED]
        assert terms == [pack_term(kind.pod_selector(obj))]
    # without placement the same step sends no affinity (the default of the planner)
    plain = plan(obj)
    assert isinstance(plain, SendPatch)
    assert "affinity" not in str(plain.body)
    # the resume step after it carries no placement again
    step = plan(patched, placement=Placement.PACK)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    assert step.body["spec"] == {"runPolicy": {"suspend": False}}


def test_config_placement_defaults_to_pack_and_names_bad_values(tmp_path):
    config = load_config(env={})
    assert config.controller.placement is Placement.PACK
    assert config.controller.placement_topology_key == HOSTNAME
    assert (
        load_config(env={"BELLOWS_CONTROLLER_PLACEMENT": "kueue-topology"}).controller.placement
        is Placement.KUEUE_TOPOLOGY
    )
    with pytest.raises(Exception, match="placement") as bad:
        load_config(env={"BELLOWS_CONTROLLER_PLACEMENT": "spread"})
    assert "spread" in str(bad.value)
    with pytest.raises(Exception, match=r"placement_topology_key|placementTopologyKey"):
        load_config(env={"BELLOWS_CONTROLLER_PLACEMENT_TOPOLOGY_KEY": "not a label/"})
