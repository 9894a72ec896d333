"""A dry-run request (``?dryRun=All``) to the emulated API server stores nothing, and drops
nothing else: while its body is still arriving, every other write in the loop (an emulated
controller's, another request's) lands as usual.

The store's dry-run flag once stayed set across the await that read the body: the emulated
Trainer's status writes in that window were answered as made and never stored, and TrainJobs
that had finished never said so (the stall of the TrainJob kill tests, issue 27).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from tests.conftest import shared_data_dir

from bellows.emulator import EmulatedCluster
from bellows.emulator.errors import ApiError

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def _map(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {}}


async def _slow(first: bytes, rest: bytes, go: asyncio.Event) -> AsyncIterator[bytes]:
    yield first
    await go.wait()
    yield rest


@pytest.mark.parametrize("dry", [True, False])
async def test_writes_made_while_a_request_body_arrives_are_stored_as_asked(dry: bool) -> None:
    crds = sorted((shared_data_dir() / "crds").glob("*.yaml"))
    async with EmulatedCluster(crds=crds, operator=False) as kube:
        store = kube.store
        res = store.resources["v1/configmaps"]
        body = json.dumps(_map("slow")).encode()
        go, arrived = asyncio.Event(), asyncio.Event()
        take = kube.faults.take

        def seen(method: str, path: str) -> object:  # the server took the request's headers
            if method == "POST" and path == CONFIGMAPS:
                arrived.set()
            return take(method, path)

        kube.faults.take = seen  # type: ignore[method-assign]
        query = "?dryRun=All" if dry else ""
        async with aiohttp.ClientSession() as session:
            request = asyncio.create_task(
                session.post(
                    f"{kube.url}{CONFIGMAPS}{query}",
                    data=_slow(body[:5], body[5:], go),
                    headers={"Content-Type": "application/json"},
                )
            )
            await asyncio.wait_for(arrived.wait(), 10)
            # the handler now waits for the rest of the body: write beside it
            for i in range(3):
                store.create(res, "default", _map(f"beside-{i}"))
                await asyncio.sleep(0)
            go.set()
            response = await asyncio.wait_for(request, 10)
            assert response.status == 201, await response.text()
            response.release()
        # every write made beside the slow request is stored (none answered as dry)
        for i in range(3):
            assert store.get(res, "default", f"beside-{i}")["metadata"]["name"] == f"beside-{i}"
        # and the slow one is stored only when it was no dry run
        if dry:
            with pytest.raises(ApiError, match="not found"):
                store.get(res, "default", "slow")
        else:
            assert store.get(res, "default", "slow")["metadata"]["name"] == "slow"
