"""The placement patch: packing asked for while a job is sized, merged, never clobbering."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from bellows.emulator.crds import trainer_crd_paths
from bellows.emulator.patching import merge_patch
from bellows.emulator.resources import crd_resources
from bellows.kube import MPIJobKind, PyTorchJobKind, keys
from bellows.kube.adapters import TRAINJOB
from bellows.kube.adapters.trainjob import (
    JOBSET_NAME_LABEL,
    NODE_JOB,
    PLACEMENT_MANAGER,
    node_pod_template,
    pod_template_patch,
)
from bellows.kube.journal import Journal, Phase, SendPatch, plan_scale
from bellows.kube.placement import (
    HOSTNAME,
    KUEUE_PREFERRED_TOPOLOGY,
    Placement,
    pack_term,
    placed_template,
)
from bellows.kube.recreation import plan_recreate, successor
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


def test_config_placement_defaults_to_nodes_and_names_bad_values(tmp_path):
    config = load_config(env={})
    assert config.controller.placement is Placement.NODES
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


# ----- TrainJob: through spec.runtimePatches -----------------------------------------------

KUEUE_MANAGER = "kueue.x-k8s.io/manager"


@pytest.fixture(scope="module")
def trainjob_schema(shared_data):
    found = crd_resources(trainer_crd_paths(shared_data / "crds"))
    return next(r for r in found if r.kind == "TrainJob")


def _trainjob(examples, patches=()):
    obj = copy.deepcopy(examples["TrainJob"])
    obj["metadata"].update(uid="u-1", resourceVersion="7")
    if patches:
        obj["spec"]["runtimePatches"] = [copy.deepcopy(p) for p in patches]
    return obj


def _node_template(obj, manager):
    """The ``node`` Job's pod template of the runtime patch of ``manager``."""
    entry = next(p for p in obj["spec"]["runtimePatches"] if p["manager"] == manager)
    jobs = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return next(j for j in jobs if j["name"] == NODE_JOB)["template"]["spec"]["template"]


def test_trainjob_pack_is_a_runtime_patch_that_keeps_the_owners_and_kueues(
    trainjob_schema, examples
):
    owner = pod_template_patch({"affinity": owner_affinity()}, manager="team-a/affinity")
    kueue = pod_template_patch({"nodeSelector": {"gpu.type": "h100"}}, manager=KUEUE_MANAGER)
    obj = _trainjob(examples, [owner, kueue])
    spec = TRAINJOB.placement_patch(obj, Placement.PACK, HOSTNAME)
    patched = merge_patch(obj, {"spec": spec})
    assert trainjob_schema.problems(patched) == []
    patches = patched["spec"]["runtimePatches"]
    # the others' entries stay as they were, first; Bellows' entry last
    assert patches[:2] == [owner, kueue]
    assert patches[2]["manager"] == PLACEMENT_MANAGER
    affinity = _node_template(patched, PLACEMENT_MANAGER)["spec"]["affinity"]
    before = owner_affinity()
    selector = {JOBSET_NAME_LABEL: obj["metadata"]["name"]}
    assert affinity["podAffinity"][PREFERRED] == [
        *before["podAffinity"][PREFERRED],
        pack_term(selector),
    ]
    # the owner's other affinity carried on whole (the Trainer replaces a field whole)
    assert affinity["nodeAffinity"] == before["nodeAffinity"]
    assert affinity["podAntiAffinity"] == before["podAntiAffinity"]
    # as the pods get it: every patch in its order
    assert node_pod_template(patches)["spec"]["nodeSelector"] == {"gpu.type": "h100"}
    assert TRAINJOB.placement_patch(patched, Placement.PACK, HOSTNAME) == {}  # idempotent
    assert TRAINJOB.placement_patch(obj, Placement.NONE, HOSTNAME) == {}


def test_trainjob_kueue_topology_annotates_the_training_pods(trainjob_schema, examples):
    obj = _trainjob(examples)
    spec = TRAINJOB.placement_patch(obj, Placement.KUEUE_TOPOLOGY, "cloud.example.com/host")
    patched = merge_patch(obj, {"spec": spec})
    assert trainjob_schema.problems(patched) == []
    template = _node_template(patched, PLACEMENT_MANAGER)
    assert template["metadata"]["annotations"] == {
        KUEUE_PREFERRED_TOPOLOGY: "cloud.example.com/host"
    }
    assert "affinity" not in template["spec"]
    # an owner who chose a topology in their own patch keeps it: nothing of Bellows'
    own = pod_template_patch(
        {},
        manager="team-a/topology",
        pod_metadata={"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}},
    )
    mine = _trainjob(examples, [own])
    assert TRAINJOB.placement_patch(mine, Placement.KUEUE_TOPOLOGY, HOSTNAME) == {}
    # a list already at the CRD's 16 entries has no room for one more: left as it is
    full = _trainjob(examples, [dict(own, manager=f"m-{i}") for i in range(16)])
    assert TRAINJOB.placement_patch(full, Placement.PACK, HOSTNAME) == {}


def test_the_recreated_trainjob_asks_for_packing_and_drops_kueues_patch(examples):
    kueue = pod_template_patch({"nodeSelector": {"gpu.type": "h100"}}, manager=KUEUE_MANAGER)
    owner = pod_template_patch({"tolerations": [{"key": "gpu"}]}, manager="team-a/tolerations")
    obj = _trainjob(examples, [kueue, owner])
    env = {"GLOBAL_BATCH_SIZE": "384", "LOCAL_BATCH_SIZE": "128"}
    new = successor(
        TRAINJOB, obj, target=(3, 384), env=env, done=None, now=NOW, journal=Journal(),
        placement=Placement.PACK,
    )  # fmt: skip
    managers = [p["manager"] for p in new["spec"]["runtimePatches"]]
    assert managers == ["team-a/tolerations", PLACEMENT_MANAGER]  # Kueue writes its own again
    terms = _node_template(new, PLACEMENT_MANAGER)["spec"]["affinity"]["podAffinity"][PREFERRED]
    assert terms == [pack_term({JOBSET_NAME_LABEL: obj["metadata"]["name"]})]
    plain = successor(
        TRAINJOB, obj, target=(3, 384), env=env, done=None, now=NOW, journal=Journal()
    )
    assert [p["manager"] for p in plain["spec"]["runtimePatches"]] == ["team-a/tolerations"]


def test_a_trainjob_sized_already_gets_its_placement_while_suspended_then_resumes(examples):
    obj = _trainjob(examples)  # numNodes 2, batch 256: the target below
    obj["metadata"]["annotations"].update(
        {
            keys.TARGET: "k=2,b=256",
            keys.PHASE: "suspending",
            keys.SUSPENDED_AT: "2025-01-01T11:00:00Z",
        }
    )
    obj["status"] = {
        "conditions": [
            {
                "type": "Suspended",
                "status": "True",
                "reason": "Suspended",
                "message": "",
                "lastTransitionTime": "2025-01-01T11:00:01Z",
            }
        ],
        "jobsStatus": [{"name": NODE_JOB, "active": 0, "suspended": 1}],
    }
    env = {"GLOBAL_BATCH_SIZE": "256", "LOCAL_BATCH_SIZE": "128"}

    def plan(job):
        return plan_recreate(
            TRAINJOB, job, None, target=(2, 256), env=env, requested=(2, 256), now=NOW,
            in_place=None, placement=Placement.PACK,
        )  # fmt: skip

    step = plan(obj)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    assert set(step.body["spec"]) == {"runtimePatches"}  # no suspend: it stays suspended
    patched = merge_patch(obj, step.body)
    step = plan(patched)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    assert step.body["spec"] == {"suspend": False}
