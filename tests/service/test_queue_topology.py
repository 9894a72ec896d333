"""Where Kueue places a job by topology-aware scheduling: the queue index reads which
ResourceFlavors have a topology, and a job whose ClusterQueue's GPU flavors all do is
``topology_aware`` (the controller then asks Kueue for its nodes, docs/kube.md)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths
from bellows.kube import KubeApi
from bellows.kube.kueue import GROUP, KUEUE_QUEUE, VERSION
from bellows.kube.placement import HOSTNAME
from bellows.service.queues import QueueIndex
from tests.conftest import shared_data_dir

NS = "default"
LIMIT_S = 10.0


def _job(queue: str | None) -> dict[str, Any]:
    labels = {KUEUE_QUEUE: queue} if queue else {}
    return {"metadata": {"name": f"job-{queue}", "namespace": NS, "labels": labels}}


def test_a_job_is_topology_aware_where_every_flavor_of_its_queue_has_a_topology() -> None:
    data = shared_data_dir() / "crds"
    files = [*sorted(data.glob("*.yaml")), *kueue_crd_paths(data)]

    async def main() -> None:
        async with EmulatedCluster(crds=files, kueue=True) as cluster:
            cluster.add_topology("hosts", [HOSTNAME])
            cluster.add_resource_flavor("tas", node_labels={"gpu": "yes"}, topology="hosts")
            cluster.add_cluster_queue("tas-q", {"tas": 8})
            cluster.add_cluster_queue("plain-q", 8)  # a flavor without a topology
            cluster.add_cluster_queue("mixed-q", {"tas": 4, "default-flavor": 4})
            for local, target in (("t", "tas-q"), ("p", "plain-q"), ("m", "mixed-q")):
                cluster.add_local_queue(local, target)
            api = KubeApi(cluster.api_client())
            index = QueueIndex(api, namespaces=(NS,), retry_s=(0.05, 0.2))
            try:
                await index.sync()
                aware = {q: index.topology_aware(_job(q)) for q in ("t", "p", "m", None)}
                assert aware == {"t": True, "p": False, "m": False, None: False}
                assert not index.topology_aware(_job("missing"))  # no such LocalQueue
                # the flavor goes: the job is no longer placed by topology, seen by the watch
                watching = asyncio.create_task(index.watch())
                flavors = cluster.store.resources[f"{GROUP}/{VERSION}/resourceflavors"]
                cluster.store.delete(flavors, None, "tas")
                deadline = time.monotonic() + LIMIT_S
                while index.topology_aware(_job("t")):
                    assert time.monotonic() < deadline, "the watch did not see the flavor go"
                    await asyncio.sleep(0.01)
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
            finally:
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(main())
