"""Issue 25: a minimum runtime before a rebalance halt. A job that started or resumed less
than ``min_runtime_s`` ago (its own, ``bellows.io/min-runtime-seconds``, else the cluster's)
is not shrunk by a round to give GPUs to another; once that has passed it is, as before;
a capacity loss still shrinks and preempts it."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Preempt, Rescale, Start
from bellows.bus import JobArrived, JobKind, JobRef
from bellows.emulator import EmulatedCluster
from bellows.inputs import SpecError
from bellows.jobs import JobSpec
from bellows.kube import Actuator, JobReader, KubeApi, keys
from bellows.scaling import default_cluster
from bellows.service.clock import ServiceClock
from bellows.service.config import ControllerSettings
from bellows.service.controller import Controller
from bellows.sim import run
from bellows.sim.workloads.traces import TraceJob, read_trace, write_trace
from tests.service.livecluster import NS
from tests.service.test_pools import torch
from tests.strategies import make_job

DELTA = 120.0


def _core(min_runtime_s: float = 0.0) -> Autoscaler:
    config = AutoscalerConfig(delta_s=DELTA, restart_s=0.0, min_runtime_s=min_runtime_s)
    return Autoscaler(config, capacity=8, cluster=default_cluster())


def _job(name: str, **changes: object) -> JobSpec:
    return replace(make_job(name, k_max=8, work=1e9), **changes)  # type: ignore[arg-type]


def _scenario(core: Autoscaler, *, second_at: float = 10.0) -> dict[str, list[object]]:
    """``first`` arrives alone on 8 GPUs and takes them all; ``second`` arrives at
    ``second_at`` and waits (no GPU free); what each round decides, by time."""
    out: dict[str, list[object]] = {}
    core.arrive(_job("first"), 0.0)
    out["0"] = core.step(0.0)
    core.arrive(_job("second"), second_at)
    t = 0.0
    while t < 1000.0:
        t += DELTA
        out[f"{t:g}"] = core.step(t)
    return out


def _shrinks(decisions: dict[str, list[object]]) -> list[tuple[str, str]]:
    return [
        (at, d.job)
        for at, ds in decisions.items()
        for d in ds
        if isinstance(d, Rescale) and d.gpus < d.gpus_from
    ]


def test_without_a_minimum_runtime_the_first_round_shrinks_the_new_job() -> None:
    decisions = _scenario(_core())
    assert decisions["0"] == [Start("first", 8, decisions["0"][0].batch)]  # type: ignore[attr-defined]
    assert _shrinks(decisions)[0] == ("120", "first")


def test_a_job_inside_its_minimum_runtime_is_not_shrunk_by_a_round() -> None:
    decisions = _scenario(_core(min_runtime_s=500.0))
    shrinks = _shrinks(decisions)
    assert shrinks, "shrunk once the minimum runtime has passed"
    assert shrinks[0] == ("600", "first")  # the first round at or after 500 s
    assert all(not ds for at, ds in decisions.items() if 0 < float(at) < 500)


def test_a_job_may_set_its_own_minimum_runtime() -> None:
    core = _core(min_runtime_s=0.0)
    core.arrive(_job("first", min_runtime_s=300.0), 0.0)
    core.step(0.0)
    core.arrive(_job("second"), 10.0)
    assert core.step(120.0) == []
    assert core.step(240.0) == []
    assert any(isinstance(d, Rescale) and d.job == "first" for d in core.step(360.0))
    # and its own 0 waives a cluster default
    core = _core(min_runtime_s=900.0)
    core.arrive(_job("first", min_runtime_s=0.0), 0.0)
    core.step(0.0)
    core.arrive(_job("second"), 10.0)
    assert any(isinstance(d, Rescale) and d.job == "first" for d in core.step(120.0))


def test_a_capacity_loss_still_halts_a_protected_job() -> None:
    core = _core(min_runtime_s=3600.0)
    core.arrive(_job("first"), 0.0)
    core.step(0.0)
    core.arrive(_job("second"), 10.0)
    core.set_capacity(6, 20.0)  # a node lost: the GPUs in use no longer fit
    halted = core.step(20.0)
    assert [type(d) for d in halted if d.job == "first"] == [Preempt], halted
    assert core.in_use <= 6


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), 86_401.0])
def test_a_minimum_runtime_out_of_bounds_is_refused_naming_the_field(value: float) -> None:
    with pytest.raises(SpecError, match="min_runtime_s"):
        AutoscalerConfig(min_runtime_s=value)
    with pytest.raises(SpecError, match="min_runtime_s"):
        _job("x", min_runtime_s=value)


def test_the_annotation_sets_the_jobs_minimum_runtime() -> None:
    notes = torch("x", 1)["metadata"]["annotations"]
    assert keys.parse_settings(notes).min_runtime_s is None  # the cluster's default
    notes[keys.MIN_RUNTIME_SECONDS] = "900"
    assert keys.parse_settings(notes).min_runtime_s == 900.0
    for bad in ("-5", "1e9", "soon", "nan"):
        notes[keys.MIN_RUNTIME_SECONDS] = bad
        with pytest.raises(SpecError, match="min-runtime-seconds"):
            keys.parse_settings(notes)


def _first_shrunk_at(trace_path, min_runtime_s: float = 0.0) -> float | None:
    """When the simulator first gives ``first`` fewer GPUs, replaying the trace file."""
    trace = read_trace(trace_path)
    config = AutoscalerConfig(delta_s=DELTA, restart_s=0.0, min_runtime_s=min_runtime_s)
    result = run(trace, gpus=8, config=config, cluster=default_cluster())
    (first,) = [r for r in result.jobs if r.name == "first"]
    for before, after in zip(first.segments, first.segments[1:], strict=False):
        if after.gpus < before.gpus:
            return after.start_s
    return None


def test_the_simulator_honours_the_trace_field_and_the_cluster_default(tmp_path) -> None:
    path = tmp_path / "trace.jsonl"
    jobs = [TraceJob(0.0, _job("first", work=2e8)), TraceJob(10.0, _job("second", work=2e8))]
    write_trace(jobs, path)
    assert _first_shrunk_at(path) == 120.0
    assert _first_shrunk_at(path, min_runtime_s=500.0) == 600.0
    jobs[0] = TraceJob(0.0, _job("first", work=2e8, min_runtime_s=300.0))
    write_trace(jobs, path)
    assert '"min_runtime_s":300.0' in path.read_text()
    assert _first_shrunk_at(path) == 360.0


# ----------------------------------------------------------------------------- the admin's cap


def test_the_cap_on_a_jobs_own_minimum_runtime_is_a_bounded_setting() -> None:
    assert ControllerSettings().max_min_runtime_s == 3600.0  # an hour unless the admin says
    assert ControllerSettings().autoscaler_config().max_min_runtime_s == 3600.0
    assert AutoscalerConfig().max_min_runtime_s == 86_400.0  # the core alone: the spec's own
    for value in (-1.0, float("nan"), float("inf"), 86_401.0):
        with pytest.raises(SpecError, match="max_min_runtime_s"):
            AutoscalerConfig(max_min_runtime_s=value)


def _clamped_on_the_cluster(own: str, crds: list[Path]) -> tuple[float | None, list[str]]:
    """A job whose own ``bellows.io/min-runtime-seconds`` is ``own`` arrives at a controller
    whose cap is an hour: the minimum runtime the core holds for it, and the messages of the
    ``Clamped`` Events on it."""

    async def main() -> tuple[float | None, list[str]]:
        async with EmulatedCluster(crds=crds, namespaces=(NS,)) as cluster:
            api = KubeApi(cluster.api_client())
            try:
                job = torch("greedy", 1)
                job["metadata"]["annotations"][keys.MIN_RUNTIME_SECONDS] = own
                custom = k8s.CustomObjectsApi(api.api_client)
                made = await asyncio.to_thread(
                    custom.create_namespaced_custom_object,
                    "kubeflow.org", "v1", NS, "pytorchjobs", job,
                )  # fmt: skip
                config = AutoscalerConfig(delta_s=DELTA, max_min_runtime_s=3600.0)
                clock = ServiceClock()
                controller = Controller(
                    api=api,
                    autoscaler=Autoscaler(config, capacity=8, cluster=default_cluster()),
                    actuator=Actuator(api),
                    reader=JobReader(api, namespace=NS),
                    namespaces=[NS],
                    now=clock.now,
                    wall_to_clock=clock.at,
                )
                meta = made["metadata"]
                ref = JobRef(JobKind.PYTORCHJOB, NS, "greedy", meta["uid"])
                await controller.apply(
                    (JobArrived(ref, datetime.now(UTC), meta["resourceVersion"]),)
                )
                least = controller.autoscaler.job(f"pytorchjob/{NS}/greedy").min_runtime_s
                store = cluster.store
                events = store.list_objects(store.resources["v1/events"], NS)[0]
                return least, [e["message"] for e in events if e.get("reason") == "Clamped"]
            finally:
                await asyncio.to_thread(api.api_client.close)

    return asyncio.run(asyncio.wait_for(main(), 60))


def test_a_jobs_own_minimum_runtime_above_the_cap_is_clamped_with_an_event(
    crds: list[Path],
) -> None:
    """Issue 35: one tenant's ``bellows.io/min-runtime-seconds: 86400`` kept its GPUs from
    every round for a day; the controller's cap (``controller.maxMinRuntimeSeconds``, an
    hour by default) clamps it, and a Warning Event says so on the job."""
    least, messages = _clamped_on_the_cluster("86400", crds)
    assert least == 3600.0
    assert messages == [
        "bellows.io/min-runtime-seconds=86400 is more than the cluster's cap of 3600 s "
        "(controller.maxMinRuntimeSeconds); rounds may shrink the job 3600 s after each "
        "start or resume"
    ]
    least, messages = _clamped_on_the_cluster("900", crds)  # within the cap: its own
    assert (least, messages) == (900.0, [])


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))
