"""Issue 25: node flaps. A counted node that turns NotReady or is deleted keeps its GPUs for
``controller.capacity.nodeGraceSeconds`` (300 s by default, Kubernetes' own wait before it
evicts such a node's pods): a 30 s NotReady blip halts nothing; a node out for longer
leaves the capacity and the newest jobs are halted as before. A controller started while no
node offers GPUs waits for one (a log line, readiness false) instead of failing its start."""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from bellows.emulator import EmulatedCluster, gpu_node
from bellows.kube import KubeApi
from bellows.scaling import default_cluster
from bellows.service import runner
from bellows.service.capacity import NodeGpus, watch_capacity
from bellows.service.clock import ServiceClock
from bellows.service.config import CapacitySettings, load_config
from bellows.service.health import Health
from bellows.service.metrics import Metrics
from tests.service.livecluster import NS, crds

GPU = "nvidia.com/gpu"


def _node(name: str, gpus: int, *, ready: bool = True, cordoned: bool = False) -> dict:
    node = gpu_node(name, gpus)
    node["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    node["spec"]["unschedulable"] = cordoned
    return node


def test_a_blip_keeps_the_gpus_and_an_outage_past_the_grace_loses_them() -> None:
    clock = [0.0]
    gpus = NodeGpus(GPU, grace_s=300.0, now=lambda: clock[0])
    for name in ("a", "b"):
        gpus.put(_node(name, 4))
    assert gpus.total == 8
    gpus.put(_node("b", 4, ready=False))  # a 30 s NotReady blip
    clock[0] = 30.0
    gpus.expire()
    assert gpus.total == 8
    gpus.put(_node("b", 4))
    clock[0] = 1000.0
    gpus.expire()
    assert gpus.total == 8
    assert gpus.next_expiry() is None
    # NotReady for longer than the grace: the GPUs go when it ends, not before
    gpus.put(_node("b", 4, ready=False))
    gpus.put(_node("b", 4, ready=False))  # a status update: the grace runs from the first
    clock[0] = 1299.0
    gpus.expire()
    assert gpus.total == 8
    assert gpus.next_expiry() == 1300.0
    clock[0] = 1300.0
    gpus.expire()
    assert gpus.total == 4
    # a node deleted lapses alike; one cordoned (an admin's choice) counts at once
    gpus.remove(_node("a", 4))
    assert gpus.total == 4
    clock[0] = 1600.0
    gpus.expire()
    assert gpus.total == 0
    gpus.put(_node("c", 8))
    gpus.put(_node("c", 8, cordoned=True))
    assert gpus.total == 0
    # a grace of 0: at once, as before
    at_once = NodeGpus(GPU, grace_s=0.0, now=lambda: clock[0])
    at_once.put(_node("a", 4))
    at_once.put(_node("a", 4, ready=False))
    assert at_once.total == 0


class Told:
    def __init__(self) -> None:
        self.values: list[int] = []

    async def __call__(self, gpus: int) -> None:
        self.values.append(gpus)


async def _until(what: str, check, timeout_s: float = 10.0) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout_s, f"not within {timeout_s} s: {what}"
        await asyncio.sleep(0.01)


def test_the_watch_holds_a_blip_and_drops_a_node_gone_past_its_grace() -> None:
    speedup = 600.0  # the 300 s grace passes in half a real second

    async def main() -> None:
        async with EmulatedCluster(crds=crds(), operator=False, gpu_nodes={"a": 4, "b": 4}) as c:
            api = KubeApi(c.api_client())
            clock = ServiceClock(speedup=speedup)
            told = Told()
            watch = watch_capacity(api, CapacitySettings(), told, now=clock.now, speedup=speedup)
            task = asyncio.create_task(watch)
            try:
                await _until("the first total", lambda: told.values == [8])
                c.set_node_ready("b", False)
                await clock.sleep_until(clock.now() + 30.0)  # a 30 s blip
                c.set_node_ready("b", True)
                await asyncio.sleep(600.0 / speedup)  # twice the grace: nothing told
                assert told.values == [8]
                lost = clock.now()
                c.remove_node("b")
                await _until("the node's GPUs gone", lambda: told.values == [8, 4])
                assert clock.now() - lost >= 300.0  # not before its grace ended
                c.add_node("b", 4)  # back: counted at once
                await _until("the node back", lambda: told.values == [8, 4, 8])
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(main())


def test_a_start_with_no_gpu_node_waits_for_one_not_ready_meanwhile() -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=crds(), operator=False, namespaces=(NS,)) as cluster:
            api = KubeApi(cluster.api_client())
            config = load_config(overrides=[f"namespaces={NS}", "controller.capacity.gpus=0"])
            health = Health(asyncio.get_running_loop().time)
            with structlog.testing.capture_logs() as logs:
                start = asyncio.create_task(
                    runner._started_controller(
                        config,
                        api_client=api.api_client,
                        api=api,
                        clock=ServiceClock(),
                        cluster=default_cluster(),
                        metrics=Metrics(),
                        stop=asyncio.Event(),
                        health=health,
                    )
                )
                try:
                    await _until(
                        "readiness false, saying why",
                        lambda: "capacity" in health.readiness().checks,
                    )
                    probe = health.readiness()
                    assert not probe.ok
                    assert "waiting for a GPU node" in probe.checks["capacity"]
                    assert not start.done()
                    cluster.add_node("gpu-1", 8)
                    pools = await asyncio.wait_for(start, 30)
                finally:
                    start.cancel()
            assert pools is not None
            assert pools.default.autoscaler.capacity == 8
            assert health.readiness().checks["capacity"] == "ok"
            waits = [e for e in logs if e["event"] == "controller.waiting_for_gpu_nodes"]
            assert waits
            assert "nvidia.com/gpu" in waits[0]["problem"]
            await asyncio.to_thread(api.api_client.close)

    asyncio.run(main())
