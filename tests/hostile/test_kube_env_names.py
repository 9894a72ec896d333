"""A refused batch-size env name reaches the job's owner: an Event and a status line, on the
emulated cluster, through the whole path (reader -> Invalid -> controller -> actuator).

The names are ones Kubernetes accepts in an annotation but that Bellows must not write: a
trailing newline (``$`` would have let it pass a pattern, then every patch failed), and
names the loader, Python or the launchers read for themselves.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi, PyTorchJobKind, keys
from bellows.service.clock import ServiceClock
from tests.hostile.test_forged_events import arrival, controller_for, create, opted_in_job

KIND = PyTorchJobKind()


async def events_of(api: KubeApi, name: str) -> list[Any]:
    core = k8s.CoreV1Api(api.api_client)
    listed = await asyncio.to_thread(core.list_namespaced_event, "default")
    return [e for e in listed.items if e.involved_object.name == name]


@pytest.mark.parametrize(
    ("key", "name", "says"),
    [
        (keys.BATCH_ENV, "GLOBAL_BATCH_SIZE\n", "an environment variable name"),
        (keys.BATCH_ENV, "LD_PRELOAD", "not one the shell, the loader"),
        (keys.LOCAL_BATCH_ENV, "PYTHONPATH", "not one the shell, the loader"),
        (keys.BATCH_ENV, "path", "not one the shell, the loader"),  # case-insensitive
    ],
    ids=["trailing-newline", "ld-preload", "pythonpath", "lower-case-path"],
)
def test_a_refused_env_name_gets_an_event_and_the_job_is_left_alone(
    crds: list[Path], key: str, name: str, says: str
) -> None:
    async def main() -> None:
        async with EmulatedCluster(crds=crds) as cluster:
            api = KubeApi(cluster.api_client())
            try:
                controller = controller_for(api, ServiceClock(), ["default"])
                await controller.rebuild()
                job = opted_in_job("default", "bad-env")
                job["metadata"]["annotations"][key] = name
                made = await create(api, job)  # the API server takes the annotation
                await controller.apply((arrival(made),))
                obj = await api.get_job(KIND, "default", "bad-env")
                assert obj is not None
                status = obj["metadata"]["annotations"][keys.STATUS]
                assert status.startswith(f"not managed: {key}={name!r} is invalid: expected")
                assert says in status
                assert obj["spec"] == made["spec"]  # never started, never patched
                assert controller.held == {}
                events = await events_of(api, "bad-env")
                assert [(e.reason, e.type) for e in events] == [("InvalidSettings", "Warning")]
                assert f"{key}={name!r} is invalid" in events[0].message
                # the same arrival again (a redelivery) adds no second Event
                await controller.apply((arrival(made),))
                assert len(await events_of(api, "bad-env")) == 1
            finally:
                await asyncio.to_thread(api.api_client.close)

    asyncio.run(asyncio.wait_for(main(), 60))


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))
