"""The twin at goodput (issue 37 item 6): emulated jobs train as the simulator charges them,
Secrets are stored as the API server stores them, and an emulated job's helper finds its
progress endpoint where its pods would.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from tests.strategies import make_job

from bellows.emulator import EmulatedCluster
from bellows.emulator.training import Training, start, stop
from bellows.scaling import MODEL_EFFICIENCY, default_cluster, throughput
from bellows.twin.emulated_progress import pod_env

CLUSTER = default_cluster()
IMAGENET = MODEL_EFFICIENCY["imagenet"].rebased(64)


def _training(work: float) -> Training:
    return Training(work, restart_s=30.0, efficiency=IMAGENET)


@settings(max_examples=30, deadline=None)
@given(
    batch=st.sampled_from([64, 128, 512]),
    gpus=st.sampled_from([1, 2, 4]),
    split=st.floats(min_value=0.05, max_value=0.95),
)
def test_a_job_at_goodput_progresses_as_the_simulator_charges_it(
    batch: int, gpus: int, split: float
) -> None:
    job = make_job("pytorchjob/default/a", b_min=64, b_max=512, batch_size=64, work=2e6)
    rate = throughput(job, gpus, batch, CLUSTER)
    state = start(_training(job.work), job, gpus=gpus, batch=batch, cluster=CLUSTER, now=0.0)
    end = state.finish_time()
    assert end is not None
    # done when the samples processed at batch b take the progress to the work
    needed = float(IMAGENET.samples_between(batch, 0.0, job.work))
    assert end == pytest.approx(needed / rate, rel=1e-9)
    at = split * end
    seen = at * rate
    assert state.seen(at) == pytest.approx(seen)
    assert state.samples(at) == pytest.approx(float(IMAGENET.progress_after(batch, 0.0, seen)))
    if batch > 64:  # above the reference batch a sample is worth less than one
        assert state.samples(at) < state.seen(at)
    # halted and resumed: both counts kept, the restart paid before any progress
    halted = stop(state, at)
    assert (halted.samples(at + 100), halted.seen(at + 100)) == (state.samples(at), state.seen(at))
    again = start(halted, job, gpus=gpus, batch=batch, cluster=CLUSTER, now=at + 100)
    assert again.samples(at + 120) == pytest.approx(state.samples(at))
    resumed_end = again.finish_time()
    assert resumed_end is not None
    left = float(IMAGENET.samples_between(batch, state.samples(at), job.work))
    assert resumed_end == pytest.approx(at + 100 + 30.0 + left / rate, rel=1e-6)
    assert again.samples(resumed_end) == pytest.approx(job.work)
    # past its end it has processed what its work needed, no more
    assert again.seen(resumed_end + 1e4) == pytest.approx(state.seen(at) + left)


def test_a_job_without_an_efficiency_counts_samples() -> None:
    job = make_job("pytorchjob/default/a", work=1e5)
    state = start(Training(job.work, 0.0), job, gpus=2, batch=64, cluster=CLUSTER, now=0.0)
    rate = throughput(job, 2, 64, CLUSTER)
    assert state.samples(10.0) == state.seen(10.0) == pytest.approx(10.0 * rate)
    assert state.finish_time() == pytest.approx(job.work / rate)


def _on_cluster(scenario: Any) -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=[], operator=False) as cluster:
            await scenario(cluster, k8s.CoreV1Api(cluster.api_client()))

    asyncio.run(main())


def test_secrets_are_stored_as_the_api_server_stores_them() -> None:
    async def scenario(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
        body = {
            "metadata": {"name": "bellows-progress"},
            "stringData": {"url": "nats://u:p@nats:4222"},
            "data": {"inbox": base64.b64encode(b"_INBOX_progress_default").decode()},
        }
        await asyncio.to_thread(core.create_namespaced_secret, "default", body)
        got = await asyncio.to_thread(core.read_namespaced_secret, "bellows-progress", "default")
        assert got.type == "Opaque"
        assert {k: base64.b64decode(v).decode() for k, v in got.data.items()} == {
            "url": "nats://u:p@nats:4222", "inbox": "_INBOX_progress_default",
        }  # fmt: skip
        bad = {"metadata": {"name": "bad"}, "data": {"url": "not base64!"}}
        with pytest.raises(ApiException) as refused:
            await asyncio.to_thread(core.create_namespaced_secret, "default", bad)
        assert refused.value.status == 422
        assert "base64" in str(refused.value.body)

    _on_cluster(scenario)


def test_a_helper_finds_its_endpoint_where_its_pods_would() -> None:
    async def scenario(cluster: EmulatedCluster, core: k8s.CoreV1Api) -> None:
        secret = {"metadata": {"name": "bellows-progress"}, "stringData": {"url": "nats://x:1"}}
        await asyncio.to_thread(core.create_namespaced_secret, "default", secret)

        def ref(key: str, name: str = "bellows-progress") -> dict[str, Any]:
            return {"secretKeyRef": {"name": name, "key": key, "optional": True}}

        env = [
            {"name": "GLOBAL_BATCH_SIZE", "value": "64"},
            {"name": "BELLOWS_PROGRESS_URL", "valueFrom": ref("url")},
            {"name": "BELLOWS_PROGRESS_INBOX", "valueFrom": ref("inbox")},  # no such key
            {"name": "BELLOWS_JOB_NAMESPACE", "value": "default"},
            {"name": "BELLOWS_JOB_NAME", "value": "resnet"},
        ]
        job = {
            "metadata": {"name": "resnet", "namespace": "default"},
            "spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {
                "containers": [{"name": "sidecar", "env": []}, {"name": "train", "env": env}],
            }}}}},
        }  # fmt: skip
        assert pod_env(cluster.store, job) == {
            "BELLOWS_PROGRESS_URL": "nats://x:1",
            "BELLOWS_JOB_NAMESPACE": "default",
            "BELLOWS_JOB_NAME": "resnet",
        }
        env[1] = {"name": "BELLOWS_PROGRESS_URL", "valueFrom": ref("url", "missing")}
        assert "BELLOWS_PROGRESS_URL" not in pod_env(cluster.store, job)  # optional: unset
        assert pod_env(cluster.store, {"metadata": job["metadata"], "spec": {}}) == {}

    _on_cluster(scenario)
