"""Goodput from the first round: a job whose profile states its efficiency (the profile
ConfigMap's or the inline annotation's ``efficiency`` section) is decided by goodput before
it ever reports; a job without one is decided by throughput, as before (issue 37 item 1)."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Mode
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, PyTorchJobKind, keys
from bellows.kube.reading import Arrived, Invalid
from bellows.scaling import MODEL_EFFICIENCY, EfficiencyProfile, default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.controller import Controller

NS = "default"
TORCH = "resnet50-imagenet"
KEY = f"pytorchjob/{NS}/{TORCH}"
BATCH = 256  # the example's ask: 2 GPUs x LOCAL_BATCH_SIZE 128


def _with_efficiency(examples: dict[str, Any], section: object) -> dict[str, Any]:
    configmap = copy.deepcopy(examples["ConfigMap"])
    document = json.loads(configmap["data"]["profile.json"])
    document["efficiency"] = section
    configmap["data"]["profile.json"] = json.dumps(document)
    return configmap


async def _create(api: KubeApi, *objects: dict[str, Any]) -> None:
    core = k8s.CoreV1Api(api.api_client)
    custom = k8s.CustomObjectsApi(api.api_client)
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            await asyncio.to_thread(core.create_namespaced_config_map, NS, obj)
        else:
            await asyncio.to_thread(
                custom.create_namespaced_custom_object, "kubeflow.org", "v1", NS,
                "pytorchjobs", obj,
            )  # fmt: skip


def _controller(api: KubeApi, mode: Mode = Mode.BELLOWS) -> Controller:
    clock = ServiceClock(speedup=60.0)
    return Controller(
        api=api,
        autoscaler=Autoscaler(AutoscalerConfig(mode=mode), capacity=8, cluster=default_cluster()),
        actuator=Actuator(api),
        reader=JobReader(api, namespace=NS),
        now=clock.now,
        wall_to_clock=clock.at,
    )


def test_a_profile_configmap_s_efficiency_decides_the_job_by_goodput_at_once(
    examples: dict[str, Any], on_cluster: Callable[..., None]
) -> None:
    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        await _create(
            api, _with_efficiency(examples, {"model": "imagenet"}), examples["PyTorchJob"]
        )
        obj = await api.get_job(PyTorchJobKind(), NS, TORCH)
        assert obj is not None
        seen = await JobReader(api, namespace=NS).examine(PyTorchJobKind(), obj)
        assert isinstance(seen, Arrived)
        expected = MODEL_EFFICIENCY["imagenet"].rebased(BATCH)
        assert seen.efficiency == expected
        assert seen.efficiency.reference_batch == seen.spec.batch_size == BATCH
        controller = _controller(api)
        await controller.rebuild()  # its first round: no report has come
        auto = controller.autoscaler
        assert auto.charged(KEY) == expected
        assert KEY in auto.allocations
        # the goodput row's batch at its GPUs, not the throughput row's (ImageNet's big
        # batches cost samples: a goodput row never picks a bigger one)
        plain = Autoscaler(AutoscalerConfig(), capacity=8, cluster=default_cluster())
        plain.arrive(seen.spec, 0.0)
        plain.step(0.0)
        assert auto.allocations[KEY].batch <= plain.allocations[KEY].batch

    on_cluster(scenario, compression=60.0, namespaces=(NS,))


def test_an_inline_profile_s_measured_efficiency_is_taken_and_none_is_throughput(
    examples: dict[str, Any], on_cluster: Callable[..., None]
) -> None:
    section = {"referenceBatch": 64, "noiseScale": 900.0, "growth": 0.5, "batchExponent": 0.1}

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        job = copy.deepcopy(examples["PyTorchJob"])
        notes = job["metadata"]["annotations"]
        document = json.loads(examples["ConfigMap"]["data"]["profile.json"])
        document["efficiency"] = section
        del notes[keys.PROFILE_CONFIGMAP]
        notes[keys.PROFILE] = json.dumps(document)
        other = copy.deepcopy(examples["PyTorchJob"])
        other["metadata"]["name"] = "no-efficiency"
        await _create(api, examples["ConfigMap"], job, other)
        controller = _controller(api)
        await controller.rebuild()
        auto = controller.autoscaler
        charged = auto.charged(KEY)
        assert charged is not None
        assert charged.reference_batch == BATCH
        # the same noise scale, stated at the job's own batch
        stated = EfficiencyProfile(64, 900.0, 0.5, 0.1)
        assert float(charged.noise_scale_at(512, 1e6)) == pytest.approx(
            float(stated.noise_scale_at(512, 1e6)), rel=1e-12
        )
        assert auto.charged(f"pytorchjob/{NS}/no-efficiency") is None  # by throughput
        # paper mode keeps the paper's premise: nobody is decided by goodput
        paper = _controller(api, Mode.PAPER)
        await paper.rebuild()
        assert paper.autoscaler.charged(KEY) is None

    on_cluster(scenario, compression=60.0, namespaces=(NS,))


def test_an_out_of_bounds_efficiency_makes_the_job_invalid_naming_the_field(
    examples: dict[str, Any], on_cluster: Callable[..., None]
) -> None:
    bad = {"referenceBatch": 64, "noiseScale": 1e13, "growth": 0.5, "batchExponent": 0.1}

    async def scenario(cluster: EmulatedCluster, api: KubeApi) -> None:
        await _create(api, _with_efficiency(examples, bad), examples["PyTorchJob"])
        obj = await api.get_job(PyTorchJobKind(), NS, TORCH)
        assert obj is not None
        seen = await JobReader(api, namespace=NS).examine(PyTorchJobKind(), obj)
        assert isinstance(seen, Invalid)
        assert "efficiency.noiseScale" in seen.problem, seen.problem
        assert "[0.001, 1e+12]" in seen.problem

    on_cluster(scenario, compression=60.0, namespaces=(NS,))
