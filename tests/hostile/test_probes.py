"""The probes that stopped the controller, each as a test: the job or message is refused with
a clear error, and nothing escapes but the project's own error."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import tracemalloc
from typing import Any, cast

import pytest

from bellows.bus.codec import EventError, decode
from bellows.jobs import MAX_GPUS, JobSpec, SpecError, StepProfile, fit_to_cluster
from bellows.kube import Arrived, Invalid, JobReader, KubeApi, PyTorchJobKind, keys
from bellows.kube.journal import Journal
from bellows.scaling import default_cluster, tsf_tables
from tests.kube.conftest import load_examples

PROFILE = {
    "apiVersion": "bellows.io/v1alpha1",
    "kind": "JobProfile",
    "weights": 25557032,
    "step": [{"localBatch": 20, "seconds": 0.146}, {"localBatch": 200, "seconds": 0.922}],
}


def torch_job() -> dict[str, Any]:
    """The example PyTorchJob with its profile inline (no ConfigMap to read)."""
    obj = copy.deepcopy(load_examples()["PyTorchJob"])
    notes = obj["metadata"]["annotations"]
    del notes[keys.PROFILE_CONFIGMAP]
    notes[keys.PROFILE] = json.dumps(PROFILE)
    obj["metadata"].update(uid="uid-1", resourceVersion="1")
    return obj


def examine(obj: dict[str, Any]) -> Any:
    reader = JobReader(cast(KubeApi, None))  # an inline profile reads nothing from the API
    return asyncio.run(reader.examine(PyTorchJobKind(), obj))


def with_annotation(key: str, value: str) -> dict[str, Any]:
    obj = torch_job()
    obj["metadata"]["annotations"][key] = value
    return obj


def with_env(value: str) -> dict[str, Any]:
    obj = torch_job()
    container = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    for entry in container["env"]:
        if entry["name"] == "GLOBAL_BATCH_SIZE":
            entry["value"] = value
    return obj


def test_the_example_is_read_as_arrived():
    seen = examine(torch_job())
    assert isinstance(seen, Arrived)
    assert seen.spec.k_max == 8
    assert seen.spec.restart_s is None  # the cluster's default applies
    timed = examine(with_annotation(keys.RESTART_SECONDS, "42.5"))
    assert timed.spec.restart_s == 42.5


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (with_annotation(keys.MAX_GPUS, "²"), keys.MAX_GPUS),
        (with_annotation(keys.MAX_GPUS, "4000000"), keys.MAX_GPUS),
        (with_annotation(keys.MAX_BATCH, "9" * 5000), keys.MAX_BATCH),
        (with_annotation(keys.MIN_BATCH, "٣"), keys.MIN_BATCH),
        (with_annotation(keys.MAX_BATCH_PER_GPU, "1e3"), keys.MAX_BATCH_PER_GPU),
        (with_annotation(keys.WORK, "1e400"), keys.WORK),
        (with_annotation(keys.WORK, "nan"), keys.WORK),
        (with_annotation(keys.REQUESTED, "k=2,b=" + "9" * 5000), keys.REQUESTED),
        (with_annotation(keys.REQUESTED, "k=²,b=64"), keys.REQUESTED),
        (with_annotation(keys.PROFILE, json.dumps({**PROFILE, "weights": 10**400})), keys.PROFILE),
        (with_annotation(keys.PROFILE, json.dumps({**PROFILE, "weights": 10**15})), "weights"),
        (with_annotation(keys.PROFILE, '{"weights": 1e400}'), keys.PROFILE),
        (with_annotation(keys.PROFILE, "[" * 100_000), keys.PROFILE),
        (with_annotation(keys.BATCH_ENV, "GLOBAL_BATCH_SIZE\n"), keys.BATCH_ENV),
        (with_annotation(keys.BATCH_ENV, "LD_PRELOAD"), keys.BATCH_ENV),
        (with_annotation(keys.BATCH_ENV, "PYTHONPATH"), keys.BATCH_ENV),
        (with_annotation(keys.PROFILE_CONFIGMAP, "name\n"), keys.PROFILE_CONFIGMAP),
        (with_annotation(keys.RESTART_SECONDS, "nan"), keys.RESTART_SECONDS),
        (with_annotation(keys.RESTART_SECONDS, "1e9"), keys.RESTART_SECONDS),
        (with_env("²"), "env GLOBAL_BATCH_SIZE"),
        (with_env("9" * 5000), "env GLOBAL_BATCH_SIZE"),
    ],
)
def test_a_hostile_value_makes_the_job_invalid_and_names_it(obj, field):
    if field == keys.PROFILE_CONFIGMAP:
        del obj["metadata"]["annotations"][keys.PROFILE]
    seen = examine(obj)
    assert isinstance(seen, Invalid), seen
    assert field in seen.problem
    assert len(seen.problem) < 400  # the value is shown truncated


def test_a_value_no_check_foresaw_still_makes_the_job_invalid():
    obj = torch_job()
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = ["not", "a", "template"]
    seen = examine(obj)
    assert isinstance(seen, Invalid)
    assert "could not be read" in seen.problem or "template" in seen.problem


@pytest.mark.parametrize("value", ["k=²,b=1", "k=1,b=" + "9" * 5000, "k=1,b=1\n", "k=0,b=1"])
def test_a_hostile_journal_reads_as_absent(value):
    notes = {
        keys.ALLOCATION: value,
        keys.TARGET: value,
        keys.SUSPENDED_AT: "0001-01-01T00:00+14:00",
    }
    journal = Journal.read(notes)
    assert (journal.allocation, journal.target, journal.suspended_at) == (None, None, None)


def spec(**changes: Any) -> JobSpec:
    base = JobSpec(
        name="j", b_min=64, b_max=512, batch_size=256, k_max=MAX_GPUS, m_max=128,
        weights=25557032, work=1e6, profile=StepProfile((20, 200), (0.146, 0.922)), gpus=2,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)


def test_max_gpus_above_the_cluster_is_clamped_to_it():
    job = spec()
    fitted = fit_to_cluster(job, 64)
    assert (fitted.k_max, fitted.gpus) == (64, 2)
    assert fit_to_cluster(fitted, 64) is fitted
    assert fit_to_cluster(job, 0) is job  # capacity unknown: unchanged
    rigid = spec(elastic=False, k_max=16, gpus=16, batch_size=256)
    assert fit_to_cluster(rigid, 8).gpus == 16  # it waits for a bigger cluster, unchanged ask
    with pytest.raises(SpecError, match="fit the cluster's 2 GPUs"):
        fit_to_cluster(spec(b_min=512, b_max=512, batch_size=512, m_max=128), 2)


def test_tables_of_a_job_stay_small_whatever_its_profile():
    # A rising segment over a million per-GPU batches: every integer inside is a candidate.
    profile = StepProfile((1, 1 << 20), (1.0, 9e4))
    job = spec(m_max=1 << 20, b_min=1, b_max=1 << 30, batch_size=256, k_max=64, profile=profile)
    tracemalloc.start()
    try:
        tables = tsf_tables([job], default_cluster(), fixed_batch=False, width=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tables.values.shape == (1, 65)
    assert peak < 256 * 2**20, f"peak {peak / 2**20:.0f} MiB"


POISON = [
    (b"\xff\xfe", "malformed_json"),
    (b"[" * 100_000, "malformed_json"),
    (b'{"version": ' + b"9" * 5000 + b"}", "malformed_json"),
    (b'{"version": 1e400}', "malformed_json"),
    (
        b'{"version":1,"type":"job.arrived","time":"0001-01-01T00:00:00+14:00","source":"x",'
        b'"job":{"kind":"PyTorchJob","namespace":"a","name":"b","uid":"c"}}',
        "invalid_event",
    ),
    (b'{"version": 1, "type": ["job.arrived"]}', "unknown_type"),
    (b'{"version": true}', "unknown_version"),
]


@pytest.mark.parametrize(("data", "code"), POISON)
def test_a_poison_message_is_an_event_error_with_its_code(data, code):
    with pytest.raises(EventError) as err:
        decode(data)
    assert err.value.code == code
    assert len(err.value.reason) < 600
