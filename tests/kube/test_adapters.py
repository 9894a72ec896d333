"""Adapters, owner settings and the pure planner: no server involved."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest

from bellows.emulator.patching import merge_patch
from bellows.emulator.resources import crd_resources
from bellows.jobs import SpecError
from bellows.kube import MPIJobKind, PyTorchJobKind, keys
from bellows.kube.journal import (
    AwaitHalt,
    Blocked,
    DeleteLauncher,
    Nothing,
    Phase,
    SendPatch,
    plan_halt,
    plan_scale,
)
from bellows.kube.specs import build_spec
from bellows.scaling import parse_job_profile

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def schemas(shared_data):
    return {r.kind: r for r in crd_resources(sorted((shared_data / "crds").glob("*.yaml")))}


def placed(obj, rv="7"):
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", resourceVersion=rv)
    return obj


def inline_profile(obj, examples):
    """The PyTorchJob example with its ConfigMap profile moved inline."""
    notes = obj["metadata"]["annotations"]
    notes.pop(keys.PROFILE_CONFIGMAP)
    notes[keys.PROFILE] = examples["ConfigMap"]["data"]["profile.json"]
    return obj


def test_views_of_the_examples(examples):
    torch = PyTorchJobKind().view(
        placed(examples["PyTorchJob"]), ("GLOBAL_BATCH_SIZE", "LOCAL_BATCH_SIZE")
    )
    assert (torch.gpus, torch.gpu_step, torch.min_gpus, torch.suspended) == (2, 1, 1, True)
    assert torch.env == {"GLOBAL_BATCH_SIZE": ("256",), "LOCAL_BATCH_SIZE": ("128",)}
    mpi = MPIJobKind().view(placed(examples["MPIJob"]), ("GLOBAL_BATCH_SIZE",))
    assert (mpi.gpus, mpi.gpu_step, mpi.min_gpus, mpi.ref.key) == (
        2,
        1,
        1,
        "mpijob/default/cifar10-horovod",
    )
    assert mpi.env == {"GLOBAL_BATCH_SIZE": ("256", "256")}  # launcher and worker
    assert MPIJobKind().launcher(examples["MPIJob"]) == "cifar10-horovod-launcher"


def test_specs_from_the_examples(examples):
    obj = inline_profile(placed(examples["PyTorchJob"]), examples)
    settings = keys.parse_settings(obj["metadata"]["annotations"])
    assert settings.profile == parse_job_profile(
        __import__("json").loads(examples["ConfigMap"]["data"]["profile.json"])
    )
    spec = build_spec(PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile)
    assert (spec.name, spec.b_min, spec.b_max, spec.k_max, spec.m_max) == (
        "pytorchjob/default/resnet50-imagenet",
        64,
        512,
        8,
        128,
    )
    assert (spec.batch_size, spec.gpus, spec.weights, spec.work) == (256, 2, 25557032, 12811670.0)


@pytest.mark.parametrize(
    ("change", "field", "valid"),
    [
        ({keys.MIN_BATCH: "1024"}, keys.MIN_BATCH, "<= bellows.io/max-batch-size"),
        ({keys.MAX_GPUS: "zero"}, keys.MAX_GPUS, "integer in [1, 65536]"),
        ({keys.WORK: None}, keys.WORK, "required"),
        ({keys.BATCH_ENV: "1BAD"}, keys.BATCH_ENV, "environment variable name"),
        ({keys.PROFILE: '{"kind": "JobProfile"}'}, keys.PROFILE + ".apiVersion", "required"),
        ({keys.PROFILE_CONFIGMAP: "x"}, keys.PROFILE_CONFIGMAP, "absent when"),
        ({keys.ELASTIC: "yes"}, keys.ELASTIC, "'true' or 'false'"),
        ({keys.MAX_BATCH_PER_GPU: "64"}, keys.MAX_BATCH_PER_GPU, "ceil(256 / 2 GPUs)"),
        ({keys.MIN_BATCH: "300"}, "env GLOBAL_BATCH_SIZE / LOCAL_BATCH_SIZE", "in [b_min, b_max]"),
        ({keys.MAX_GPUS: "1"}, keys.MAX_GPUS, "<= k_max"),
    ],
)
def test_bad_settings_name_the_key_the_value_and_what_is_valid(examples, change, field, valid):
    obj = inline_profile(placed(examples["PyTorchJob"]), examples)
    notes = obj["metadata"]["annotations"]
    for key, value in change.items():
        if value is None:
            notes.pop(key)
        else:
            notes[key] = value

    def build():
        settings = keys.parse_settings(notes)
        return build_spec(
            PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile
        )

    with pytest.raises(SpecError) as err:
        build()
    assert err.value.field == field
    assert valid in err.value.valid


def test_contradictory_env_and_replica_shapes_are_refused(examples):
    obj = inline_profile(placed(examples["PyTorchJob"]), examples)
    env = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"]
    env[1]["value"] = "100"  # LOCAL_BATCH_SIZE disagrees with GLOBAL_BATCH_SIZE / 2 GPUs
    settings = keys.parse_settings(obj["metadata"]["annotations"])
    with pytest.raises(SpecError, match="disagree"):
        build_spec(PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile)
    env[1]["value"] = "128"
    obj["spec"]["pytorchReplicaSpecs"]["Master"] = copy.deepcopy(
        obj["spec"]["pytorchReplicaSpecs"]["Worker"]
    )
    obj["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 1
    with pytest.raises(SpecError, match="one GPU per training replica") as err:
        build_spec(PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile)
    assert err.value.field == "replicas"


def test_kueue_jobs_carry_their_queue_and_hpa_metrics_are_blocked(examples):
    obj = placed(examples["PyTorchJob"])
    assert PyTorchJobKind().view(obj, ()).blocker is None
    assert PyTorchJobKind().view(obj, ()).queue is None
    obj["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team-a"}
    # A queue name is no blocker: the reader and the actuator decide, by the Kueue setting.
    assert PyTorchJobKind().view(obj, ()).blocker is None
    assert PyTorchJobKind().view(obj, ()).queue == "team-a"
    obj["metadata"]["labels"] = {}
    obj["metadata"].setdefault("annotations", {})["kueue.x-k8s.io/queue-name"] = "team-b"
    assert PyTorchJobKind().view(obj, ()).queue == "team-b"  # the deprecated spelling
    assert PyTorchJobKind().pod_counts(obj) == {
        t.lower(): s.get("replicas", 1) for t, s in obj["spec"]["pytorchReplicaSpecs"].items()
    }
    obj = placed(examples["PyTorchJob"])
    obj["spec"]["elasticPolicy"] = {"metrics": [{"type": "Resource"}]}
    assert "HPA" in (PyTorchJobKind().view(obj, ()).blocker or "")


@pytest.mark.parametrize("kind", ["PyTorchJob", "MPIJob"])
def test_scale_patches_are_valid_against_the_real_crds(schemas, examples, kind):
    adapter = PyTorchJobKind() if kind == "PyTorchJob" else MPIJobKind()
    obj = placed(examples[kind])
    env = {"GLOBAL_BATCH_SIZE": "512"}
    patch = {"spec": adapter.scale_patch(obj, 4, env)}
    patched = merge_patch(obj, patch)
    assert schemas[kind].problems(patched) == []
    view = adapter.view(patched, ("GLOBAL_BATCH_SIZE",))
    assert view.gpus == 4
    assert set(view.env["GLOBAL_BATCH_SIZE"]) == {"512"}
    # Other containers and env entries survive the whole-list replacement.
    before = adapter.containers(obj, "Worker")[0]
    after = adapter.containers(patched, "Worker")[0]
    assert after["image"] == before["image"]
    assert len(after["env"]) == len(before["env"])
    with pytest.raises(SpecError, match="positive multiple"):
        adapter.scale_patch(obj, 0, env)


def test_planner_walks_suspend_patch_resume(schemas, examples):
    kind = PyTorchJobKind()
    obj = placed(examples["PyTorchJob"])
    obj["spec"]["runPolicy"]["suspend"] = False
    obj["status"] = {
        "startTime": "2025-01-01T11:00:00Z",
        "conditions": [{"type": "Running", "status": "True"}],
    }
    args = {
        "target": (4, 512),
        "env": {"GLOBAL_BATCH_SIZE": "512", "LOCAL_BATCH_SIZE": "128"},
        "requested": (2, 256),
        "launcher": None,
        "now": NOW,
    }
    step = plan_scale(kind, obj, **args)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.SUSPENDING
    assert step.body["metadata"]["resourceVersion"] == "7"
    assert step.body["metadata"]["annotations"][keys.REQUESTED] == "k=2,b=256"
    obj = merge_patch(obj, step.body)
    assert schemas["PyTorchJob"].problems(obj) == []
    assert isinstance(plan_scale(kind, obj, **args), AwaitHalt)  # the operator has not confirmed
    obj["status"]["conditions"].append(
        {"type": "Suspended", "status": "True", "lastTransitionTime": "2025-01-01T12:00:00Z"}
    )
    step = plan_scale(kind, obj, **args)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    obj = merge_patch(obj, step.body)
    assert schemas["PyTorchJob"].problems(obj) == []
    step = plan_scale(kind, obj, **args)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    assert step.body["spec"] == {"runPolicy": {"suspend": False}}
    obj = merge_patch(obj, step.body)
    assert isinstance(plan_scale(kind, obj, **args), Nothing)


OWNED_BY_U1 = {
    "apiVersion": "kubeflow.org/v2beta1",
    "kind": "MPIJob",
    "name": "cifar10-horovod",
    "uid": "u-1",
    "controller": True,
    "blockOwnerDeletion": True,
}


@pytest.mark.parametrize(
    "owners",
    [
        [],  # a Job someone created by hand
        [dict(OWNED_BY_U1, uid="u-2")],  # another MPIJob's (deleted and created again)
        [dict(OWNED_BY_U1, controller=False)],  # owned, but not controlled
        [dict(OWNED_BY_U1, controller="true")],  # a string is not true
        [{"kind": "CronJob", "name": "nightly", "uid": "c-1", "controller": True}],
    ],
    ids=["no-owner", "other-uid", "not-controller", "string-true", "cronjob"],
)
def test_planner_never_deletes_a_launcher_the_mpijob_does_not_control(examples, owners):
    kind = MPIJobKind()
    obj = placed(examples["MPIJob"])
    env = {"GLOBAL_BATCH_SIZE": "512"}
    args = {"target": (4, 512), "env": env, "requested": (2, 256), "now": NOW}
    obj = merge_patch(obj, plan_scale(kind, obj, launcher=None, **args).body)  # patched
    foreign = {
        "metadata": {
            "name": "cifar10-horovod-launcher",
            "uid": "j-1",
            "resourceVersion": "3",
            "ownerReferences": owners,
        },
        "spec": {"template": {"spec": {"containers": [{"name": "other", "image": "x"}]}}},
    }
    step = plan_scale(kind, obj, launcher=foreign, **args)
    assert isinstance(step, Blocked)
    assert step.reason == "LauncherNotOwned"
    assert step.problem.startswith(
        "batch Job 'cifar10-horovod-launcher' exists and is not controlled by this MPIJob"
    )
    # before any write, too: a job that is not running yet is not started beside it
    fresh = placed(examples["MPIJob"])
    assert isinstance(plan_scale(kind, fresh, launcher=foreign, **args), Blocked)


def test_planner_refreshes_a_stale_mpi_launcher_and_halts_idempotently(examples):
    kind = MPIJobKind()
    obj = placed(examples["MPIJob"])
    env = {"GLOBAL_BATCH_SIZE": "512"}
    args = {"target": (4, 512), "env": env, "requested": (2, 256), "now": NOW}
    step = plan_scale(kind, obj, launcher=None, **args)  # created suspended, never ran
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    obj = merge_patch(obj, step.body)
    launcher = {
        "metadata": {
            "name": "cifar10-horovod-launcher",
            "uid": "l-1",
            "resourceVersion": "9",
            "ownerReferences": [OWNED_BY_U1],
        },
        "spec": {"template": obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]},
    }
    stale = merge_patch(
        launcher,
        {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "launcher",
                                "env": [{"name": "GLOBAL_BATCH_SIZE", "value": "256"}],
                            }
                        ]
                    }
                }
            }
        },
    )
    assert plan_scale(kind, obj, launcher=stale, **args) == DeleteLauncher(
        "cifar10-horovod-launcher", "l-1", "9"
    )
    step = plan_scale(kind, obj, launcher=launcher, **args)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    halt = plan_halt(
        kind, obj, phase=Phase.REJECTED, message="rejected: full", requested=(2, 256), now=NOW
    )
    assert isinstance(halt, SendPatch)
    assert halt.body["metadata"]["annotations"][keys.TARGET] is None
    assert isinstance(
        plan_halt(
            kind,
            merge_patch(obj, halt.body),
            phase=Phase.REJECTED,
            message="rejected: full",
            requested=None,
            now=NOW,
        ),
        Nothing,
    )


def test_a_profile_s_gpu_type_sections_reach_the_spec(examples):
    """An annotation profile with a section per GPU type (issue 39) gives the job's spec
    those sections, and the job on a type is its one-type spec there."""
    obj = placed(examples["PyTorchJob"])
    document = json.loads(examples["ConfigMap"]["data"]["profile.json"])
    document["types"] = {"a100": {"weights": 25557032, "maxLocalBatch": 800,
                                  "step": [{"localBatch": 64, "seconds": 0.07}]}}  # fmt: skip
    annotations = obj["metadata"]["annotations"]
    annotations.pop(keys.PROFILE_CONFIGMAP, None)
    annotations[keys.PROFILE] = json.dumps(document)
    settings = keys.parse_settings(annotations)
    spec = build_spec(PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile)
    assert spec.type_names == ("a100",)
    on = spec.on("a100")
    assert on is not None
    assert (on.m_max, on.profile.local_batches) == (800, (64,))


def test_a_profile_annotation_carries_its_measured_placements_into_the_spec(examples):
    """Issue 36: the placements an owner measured reach the core from the annotation, the
    same document the simulator's jobs carry; a wrong one is refused naming its path."""
    obj = inline_profile(placed(examples["PyTorchJob"]), examples)
    notes = obj["metadata"]["annotations"]
    document = json.loads(notes[keys.PROFILE])
    document["placements"] = [
        {"nodes": 2, "gpus": 8, "localBatch": [32, 64], "seconds": [0.5, 0.8]},
    ]
    notes[keys.PROFILE] = json.dumps(document)
    settings = keys.parse_settings(notes)
    spec = build_spec(PyTorchJobKind().view(obj, settings.env_names), settings, settings.profile)
    assert [(p.nodes, p.gpus, p.local_batches) for p in spec.placements] == [(2, 8, (32, 64))]
    document["placements"][0]["seconds"] = [0.5, -1]
    notes[keys.PROFILE] = json.dumps(document)
    with pytest.raises(SpecError, match=r"placements\[0\]\.seconds\[1\]"):
        keys.parse_settings(notes)
