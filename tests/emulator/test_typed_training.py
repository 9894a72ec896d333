"""On an emulated cluster of several GPU types (issue 39), a job trains at the speed of the
type its pods run on: the type its template's ``nodeSelector`` pins (its pods bind only to
that type's nodes), else the type of the nodes its pods landed on, read once they are bound;
its per-GPU batch is held to that type's memory (``bellows.emulator.typed``)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import shared_data_dir

from bellows.emulator import EmulatedCluster
from bellows.emulator.operator import Progress
from bellows.emulator.scheduling import Placer, Pod
from bellows.emulator.training import Training
from bellows.emulator.typed import GPU_PRODUCT, NodeTypes, Speeds, typed_nodes
from bellows.jobs import JobSpec, StepProfile, TypeSection
from bellows.scaling import default_cluster, throughput
from bellows.scaling.gpu_types import sia_mix
from bellows.sim.workloads import TraceJob
from bellows.twin.replay import job_manifest

MIX = sia_mix()
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"
GPUS, BATCH = 2, 64  # two replicas of one GPU, 32 samples each


def _steps(scale: float) -> StepProfile:
    return StepProfile((8, 16, 32, 64), tuple(scale * (0.02 + 0.004 * m) for m in (8, 16, 32, 64)))


SECTIONS = (
    TypeSection("t4", _steps(3.0), 20_000_000, 16),  # slow, and 32 per GPU does not fit
    TypeSection("a100", _steps(0.5), 20_000_000, 64),
    TypeSection("rtx2080ti", _steps(1.5), 20_000_000, 64),
)
SPEC = JobSpec(
    name="typed", b_min=32, b_max=256, batch_size=BATCH, k_max=8, m_max=64,
    weights=25_000_000, work=1e9, profile=_steps(1.0), gpus=GPUS, types=SECTIONS,
)  # fmt: skip


def _crds() -> list[Path]:
    return sorted((shared_data_dir() / "crds").glob("*.yaml"))


def _cluster() -> EmulatedCluster:
    gpus, labels = typed_nodes(MIX)
    return EmulatedCluster(
        crds=_crds(), gpu_nodes=gpus, labels_by_node=labels, typed=MIX, compression=1.0
    )


def _job(name: str, spec: JobSpec = SPEC, selector: Mapping[str, str] | None = None) -> Any:
    """A running PyTorchJob of ``spec`` (its sections in its profile annotation), its pods'
    template selecting ``selector``."""
    job = TraceJob(0.0, JobSpec(**{**spec.__dict__, "name": name}))
    _, body = job_manifest(job, 0, namespace="default")
    body["spec"]["runPolicy"]["suspend"] = False
    if selector is not None:
        template = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
        template["spec"]["nodeSelector"] = dict(selector)
    return body


def _rate(gpu_type: str, spec: JobSpec = SPEC) -> float:
    on = spec.on(gpu_type)
    assert on is not None
    return throughput(on, GPUS, BATCH, MIX.type(gpu_type).cluster)


async def _until(kube: EmulatedCluster, check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        kube.check_alive()
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def _progress(kube: EmulatedCluster, uid: str) -> Progress | None:
    assert kube.operator is not None
    return kube.operator.progress(uid)


async def _started(kube: EmulatedCluster, body: Any) -> str:
    """Create ``body``; its uid, once the operator trains it."""
    created = kube.store.create(kube.store.resources[PYTORCHJOBS], "default", body)
    uid: str = created["metadata"]["uid"]
    await _until(kube, lambda: _progress(kube, uid) is not None, "never started")
    return uid


def _types_of(kube: EmulatedCluster, uid: str) -> set[str]:
    """The GPU types of the nodes holding the job's pods (by their product label)."""
    products = {t.product: t.name for t in MIX.types}
    return {products[lb[GPU_PRODUCT]] for lb in kube.placer.node_labels(uid).values()}


def _step_s(kube: EmulatedCluster, uid: str) -> float | None:
    got = _progress(kube, uid)
    return None if got is None else got.step_seconds


def _at(kube: EmulatedCluster, uid: str, rate: float) -> Callable[[], bool]:
    """Whether the job trains at ``rate`` (samples per second) now."""
    return lambda: math.isclose(_step_s(kube, uid) or 0.0, BATCH / rate, rel_tol=1e-9)


@pytest.mark.parametrize("gpu_type", ["t4", "a100", "rtx2080ti"])
async def test_a_job_pinned_to_a_type_binds_there_and_trains_at_its_speed(gpu_type: str) -> None:
    # a per-GPU batch the T4 holds (16), so that every type runs it
    spec = JobSpec(**{**SPEC.__dict__, "batch_size": 32})
    async with _cluster() as kube:
        product = MIX.type(gpu_type).product
        uid = await _started(kube, _job("pinned", spec, {GPU_PRODUCT: product}))
        await _until(kube, lambda: sum(kube.placer.placement(uid).values()) == GPUS, "unbound")
        assert _types_of(kube, uid) == {gpu_type}
        on = spec.on(gpu_type)
        assert on is not None
        rate = throughput(on, GPUS, 32, MIX.type(gpu_type).cluster)
        assert _step_s(kube, uid) == pytest.approx(32 / rate, rel=1e-9)


def _cordon_all_but(kube: EmulatedCluster, *kept: str) -> None:
    for node in typed_nodes(MIX)[0]:
        if node not in kept:
            kube.cordon(node)


async def test_a_job_without_a_selector_trains_at_the_speed_of_where_its_pods_landed() -> None:
    async with _cluster() as kube:
        _cordon_all_but(kube, "rtx2080ti-0", "rtx2080ti-1", "rtx2080ti-2")
        uid = await _started(kube, _job("landed"))
        await _until(kube, _at(kube, uid, _rate("rtx2080ti")), "slow")
        assert _types_of(kube, uid) == {"rtx2080ti"}


async def test_a_job_whose_pods_wait_makes_no_progress_and_then_trains_at_their_types_speed() -> (
    None
):
    async with _cluster() as kube:
        _cordon_all_but(kube, "t4-0")  # taken by another job: no room left
        filler = JobSpec(**{**SPEC.__dict__, "gpus": 4, "batch_size": 32})
        await _started(kube, _job("filler", filler, {GPU_PRODUCT: MIX.type("t4").product}))
        uid = await _started(kube, _job("waiting"))
        await asyncio.sleep(0.2)
        assert kube.placer.pending(uid) == GPUS
        got = _progress(kube, uid)
        assert got is not None
        assert got.samples == 0.0  # held: no progress at any speed
        kube.cordon("a100-1", unschedulable=False)  # both pods bind there
        await _until(kube, _at(kube, uid, _rate("a100")), "never settled")
        assert kube.placer.placement(uid) == {"a100-1": GPUS}


async def test_pods_on_several_types_train_at_the_slowest_ones_speed() -> None:
    async with _cluster() as kube:
        _cordon_all_but(kube, "a100-0", "rtx2080ti-0")  # one pod on each (spreading)
        uid = await _started(kube, _job("spread"))
        slowest = min(_rate("a100"), _rate("rtx2080ti"))
        await _until(kube, _at(kube, uid, slowest), "not the slowest")
        assert _types_of(kube, uid) == {"a100", "rtx2080ti"}


async def test_a_per_gpu_batch_the_landed_type_cannot_hold_fails_the_job() -> None:
    async with _cluster() as kube:
        _cordon_all_but(kube, "t4-0")  # 32 per GPU, where the T4 holds 16
        created = kube.store.create(kube.store.resources[PYTORCHJOBS], "default", _job("big"))
        res, name = kube.store.resources[PYTORCHJOBS], created["metadata"]["name"]

        def failed() -> dict[str, Any] | None:
            obj = kube.store.get(res, "default", name)
            conditions = (obj.get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "Failed"), None)

        await _until(kube, lambda: failed() is not None, "never failed")
        condition = failed()
        assert condition is not None
        assert condition["message"] == (
            "CUDA out of memory: per-GPU batch 32 > the maxLocalBatch of its t4 section 16"
        )
        uid = created["metadata"]["uid"]
        await _until(kube, lambda: not kube.placer.placement(uid), "pods kept")


async def test_a_job_without_a_section_for_its_type_trains_as_its_untyped_spec_there() -> None:
    spec = JobSpec(**{**SPEC.__dict__, "types": SECTIONS[1:2]})  # a100 only
    rtx = MIX.type("rtx2080ti")
    async with _cluster() as kube:
        uid = await _started(kube, _job("untyped", spec, {GPU_PRODUCT: rtx.product}))
        untyped = JobSpec(**{**spec.__dict__, "types": ()})
        rate = throughput(untyped, GPUS, BATCH, rtx.cluster)
        await _until(kube, lambda: sum(kube.placer.placement(uid).values()) == GPUS, "unbound")
        assert _step_s(kube, uid) == pytest.approx(BATCH / rate, rel=1e-9)
        assert _types_of(kube, uid) == {"rtx2080ti"}


def test_the_selector_says_the_speed_without_nodes_and_untyped_nodes_leave_the_job_untyped() -> (
    None
):
    types = NodeTypes(MIX)
    a100 = MIX.type("a100")
    pods = [{"containers": [{"resources": {"limits": {"nvidia.com/gpu": 1}}}],
             "nodeSelector": {GPU_PRODUCT: a100.product}}]  # fmt: skip
    assert types.selected(pods) == a100
    assert types.selected([*pods, {"containers": []}]) == a100  # a launcher: no GPUs
    assert types.selected([{**pods[0], "nodeSelector": {}}]) is None
    assert types.bound([{GPU_PRODUCT: "Tesla-T4"}, {"kubernetes.io/hostname": "x"}]) == (
        MIX.type("t4"),
    )
    speeds = Speeds(default_cluster(), types, None)
    started = speeds.start(Training(1e9, 0.0), SPEC, gpus=GPUS, batch=BATCH, pods=pods, now=0.0)
    assert isinstance(started, Training)
    assert started.segment is not None
    assert started.segment.rate == pytest.approx(_rate("a100"))
    assert started.segment.unsettled is None
    # no selector: untyped on the operator's profile until its pods bind somewhere
    loose = speeds.start(Training(1e9, 0.0), SPEC, gpus=GPUS, batch=BATCH, pods=[], now=0.0)
    assert isinstance(loose, Training)
    assert loose.segment is not None
    assert loose.segment.unsettled == SPEC
    assert loose.segment.rate == pytest.approx(throughput(SPEC, GPUS, BATCH, default_cluster()))
    placer = Placer(lambda: {"plain-0": (8, {})})
    training = {"u": loose}

    placer.place("u", [Pod("u", {}, 1), Pod("u", {}, 1)], 0.0)
    assert Speeds(default_cluster(), types, placer).settle(training, "u") is None
    segment = training["u"].segment
    assert segment is not None
    assert segment.unsettled is None  # settled: untyped nodes, the operator's profile
    assert segment.rate == pytest.approx(throughput(SPEC, GPUS, BATCH, default_cluster()))
