"""One kind type, one ref type, one read of a job's annotations: no server involved."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

import bellows.bus
import bellows.kube
from bellows import refs
from bellows.autoscaler.decisions import Start
from bellows.bus import JobArrived
from bellows.jobs import SpecError
from bellows.kube import KINDS, Actuator, Invalid, JobReader, MPIJobKind, PyTorchJobKind, keys
from bellows.kube.examining import LeftAlone, OptedJob, opted_job
from bellows.kube.kinds import KUEUE_QUEUE, kueue_refusal
from bellows.refs import JobKind, JobRef
from bellows.service.watching import observed

from .test_actuator import TORCH, submit

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def placed(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="u-1", resourceVersion="7")
    return obj


def test_the_bus_and_kube_share_one_kind_and_one_ref_type(examples):
    assert bellows.bus.JobRef is bellows.kube.JobRef is refs.JobRef
    assert bellows.bus.JobKind is bellows.kube.JobKind is refs.JobKind
    assert [adapter.kind for adapter in KINDS] == [JobKind.PYTORCHJOB, JobKind.MPIJOB]
    obj = placed(examples["MPIJob"])
    view = MPIJobKind().view(obj, ())
    seen = observed(MPIJobKind(), obj, now=lambda: T0)
    assert seen is not None
    # the bridge's event names the object the view reads, with its uid: no conversion
    assert seen.job == JobRef(view.ref.kind, view.ref.namespace, view.ref.name, "u-1")
    assert seen.job.key == view.ref.key == "mpijob/default/cifar10-horovod"


def test_refs_validate_and_parse_their_key():
    ref = JobRef.parse("mpijob/team-a/bert.large")
    assert ref == JobRef(JobKind.MPIJOB, "team-a", "bert.large")
    assert (ref.kind, ref.uid, ref.key) == (JobKind.MPIJOB, "", "mpijob/team-a/bert.large")
    assert JobRef.parse(ref.key, [JobKind.MPIJOB]) == ref
    with pytest.raises(SpecError, match=r"with kind in \['pytorchjob'\]"):
        JobRef.parse(ref.key, [JobKind.PYTORCHJOB])
    with pytest.raises(SpecError, match=r"job\.kind='CronJob'"):
        JobRef("CronJob", "team-a", "x")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"job\.namespace"):
        JobRef(JobKind.MPIJOB, "Team_A", "x")
    with pytest.raises(SpecError, match=r"job\.uid"):
        JobRef(JobKind.MPIJOB, "team-a", "x", "a uid")
    # a ref may name whichever object has the name now; an event is about one object
    with pytest.raises(SpecError, match=r"job\.uid=''"):
        JobArrived(ref, T0)


def test_an_opted_in_job_is_read_once_into_its_view_and_settings(examples):
    obj = placed(examples["PyTorchJob"])
    notes = obj["metadata"]["annotations"]
    seen = opted_job(PyTorchJobKind(), obj, kueue=False)
    assert isinstance(seen, OptedJob)
    assert seen.settings == keys.parse_settings(notes)
    assert seen.view.env == {"GLOBAL_BATCH_SIZE": ("256",), "LOCAL_BATCH_SIZE": ("128",)}
    bare = opted_job(PyTorchJobKind(), obj, kueue=False, env=False)
    assert isinstance(bare, OptedJob)
    assert bare.view.env == {}
    assert bare.settings == seen.settings


def test_what_leaves_a_job_alone_is_checked_in_one_order(examples):
    kind = PyTorchJobKind()
    queued = placed(examples["PyTorchJob"])
    queued["metadata"].setdefault("labels", {})[KUEUE_QUEUE] = "team-a"
    assert opted_job(kind, queued, kueue=False) == LeftAlone("refused", kueue_refusal("team-a"))
    assert isinstance(opted_job(kind, queued, kueue=True), OptedJob)
    foreign = placed(examples["PyTorchJob"])
    foreign["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    foreign["metadata"]["annotations"][keys.MIN_BATCH] = "not read"
    assert opted_job(kind, foreign, kueue=False) == LeftAlone(
        "foreign", "kueue.x-k8s.io/multikueue"
    )
    foreign["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    assert opted_job(kind, foreign, kueue=False) == LeftAlone("finished", "Succeeded")


def test_batch_bounds_follow_one_rule_with_the_owners_names(examples):
    obj = placed(examples["PyTorchJob"])
    obj["metadata"]["annotations"][keys.MIN_BATCH] = "1024"
    with pytest.raises(SpecError) as info:
        opted_job(PyTorchJobKind(), obj, kueue=False)
    assert str(info.value) == (
        "bellows.io/min-batch-size='1024' is invalid: expected <= bellows.io/max-batch-size (512)"
    )


def test_the_reader_and_the_actuator_read_a_bad_job_alike(on_cluster, examples):
    async def scenario(cluster, api):
        examples["PyTorchJob"]["metadata"]["annotations"][keys.MIN_BATCH] = "1024"
        await submit(api, examples)
        [problem] = await JobReader(api).snapshot()
        assert isinstance(problem, Invalid)
        acted = await Actuator(api).apply(Start(TORCH, 2, 256))
        assert (acted.job, acted.result, acted.detail) == (TORCH, "invalid", problem.problem)
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        assert obj is not None
        assert obj["metadata"]["annotations"][keys.STATUS] == f"not managed: {problem.problem}"

    on_cluster(scenario, compression=1.0)
