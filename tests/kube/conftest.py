"""Fixtures for the Kubernetes tests: the real CRDs, the example manifests, a cluster runner."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml

from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths
from bellows.kube import KubeApi

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"


@pytest.fixture(scope="session")
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))


def load_examples() -> dict[str, dict[str, Any]]:
    """Every object of the example manifests, by kind."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


@pytest.fixture
def examples() -> dict[str, dict[str, Any]]:
    return copy.deepcopy(load_examples())


Scenario = Callable[[EmulatedCluster, KubeApi], Awaitable[None]]


@pytest.fixture
def on_cluster(crds: list[Path]) -> Callable[..., None]:
    """Run ``scenario(cluster, api)`` against a fresh emulated cluster, within a time limit."""

    def run(scenario: Scenario, *, limit_s: float = 30.0, **options: Any) -> None:
        async def main() -> None:
            async with EmulatedCluster(crds=crds, **options) as cluster:
                api = KubeApi(cluster.api_client())
                try:
                    await asyncio.wait_for(scenario(cluster, api), limit_s)
                finally:
                    await asyncio.to_thread(api.api_client.close)

        asyncio.run(main())

    return run


def run_sync(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def wait_for(
    api: KubeApi,
    kind: Any,
    namespace: str,
    name: str,
    predicate: Callable[[dict[str, Any] | None], bool],
) -> dict[str, Any] | None:
    """The job once ``predicate`` holds for it (``None`` = deleted), watching, never polling."""
    obj = await api.get_job(kind, namespace, name)
    if predicate(obj):
        return obj
    assert obj is not None
    version = obj["metadata"]["resourceVersion"]
    while True:
        async for event, new in api.watch_jobs(kind, namespace, version, name=name, timeout_s=30):
            version = new["metadata"]["resourceVersion"]
            current = None if event == "DELETED" else new
            if predicate(current):
                return current


def condition(obj: dict[str, Any] | None, kind: str) -> bool:
    found = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in found)


@pytest.fixture
def on_kueue(crds: list[Path], shared_data: Path) -> Callable[..., None]:
    """Run ``scenario(cluster, api)`` on a fresh cluster with the emulated Kueue."""
    files = [*crds, *kueue_crd_paths(shared_data / "crds")]

    def run(
        scenario: Callable[[EmulatedCluster, KubeApi], Awaitable[None]], **options: Any
    ) -> None:
        async def main() -> None:
            async with EmulatedCluster(crds=files, kueue=True, **options) as cluster:
                api = KubeApi(cluster.api_client())
                try:
                    await asyncio.wait_for(scenario(cluster, api), 60)
                finally:
                    await asyncio.to_thread(api.api_client.close)

        asyncio.run(main())

    return run
