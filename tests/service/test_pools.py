"""One optimizer round per pool: jobs without a queue name in the default pool, each Kueue
ClusterQueue a pool on its GPU nominalQuota, admitting in its queueingStrategy's order.

The LocalQueues and ClusterQueues live in the emulated API server (Kueue's real CRDs, no
Kueue controller); the actuator records the decisions instead of driving the jobs, so that
what is checked is which pool decides what, on how many GPUs."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from bellows.autoscaler import AutoscalerConfig, Decision, Preempt, Reject, Rescale, Start
from bellows.bus.events import JobArrived
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, NotFoundError, Outcome, PyTorchJobKind, keys
from bellows.kube.kueue import CLUSTER_QUEUES, GROUP, KUEUE_QUEUE, LOCAL_QUEUES, VERSION
from bellows.refs import JobKind, JobRef
from bellows.scaling import default_cluster
from bellows.service import runner
from bellows.service.clock import ServiceClock
from bellows.service.config import load_config
from bellows.service.controller import EventsNotTakenError
from bellows.service.metrics import Metrics, MetricsObserver
from bellows.service.pools import Cores, Pools
from bellows.service.queues import QueueChange, QueueIndex, QueueProblem
from tests import waiting
from tests.conftest import shared_data_dir
from tests.service.livecluster import NS, crds

EXAMPLES = Path(__file__).resolve().parents[2] / "manifests" / "examples"
TORCHJOBS = "kubeflow.org/v1/pytorchjobs"
LIMIT_S = 10.0


def _kueue_crds() -> list[Path]:
    files = sorted((shared_data_dir() / "crds" / "kueue-v0.19.2").glob("*.yaml"))
    assert files, "no Kueue CRDs in shared/data/crds/kueue-v0.19.2"
    return files


def _example() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((EXAMPLES / "pytorchjob-resnet50.yaml").read_text()))
    return copy.deepcopy({d["kind"]: d for d in docs})


def torch(name: str, gpus: int, queue: str | None = None) -> dict[str, Any]:
    """A rigid PyTorchJob of ``gpus`` one-GPU workers (batch 64 each), submitted suspended,
    opted in with an inline profile; in LocalQueue ``queue`` when given."""
    example = _example()
    job = example["PyTorchJob"]
    notes = job["metadata"]["annotations"]
    notes.pop(keys.PROFILE_CONFIGMAP)
    notes[keys.PROFILE] = example["ConfigMap"]["data"]["profile.json"]
    notes[keys.ELASTIC] = "false"
    job["metadata"] = {"name": name, "namespace": NS, "annotations": notes}
    if queue is not None:
        job["metadata"]["labels"] = {KUEUE_QUEUE: queue}
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replicas"] = gpus
    env = {e["name"]: e for e in worker["template"]["spec"]["containers"][0]["env"]}
    env["GLOBAL_BATCH_SIZE"]["value"] = str(64 * gpus)
    env["LOCAL_BATCH_SIZE"]["value"] = "64"
    return job


def cluster_queue(
    name: str, quotas: list[int | str], strategy: str = "BestEffortFIFO", **spec: Any
) -> dict[str, Any]:
    """A ClusterQueue with one flavor per quota (GPUs), and a CPU quota beside them."""
    flavors = [
        {
            "name": f"flavor-{i}",
            "resources": [
                {"name": "cpu", "nominalQuota": 64},
                {"name": "nvidia.com/gpu", "nominalQuota": quota},
            ],
        }
        for i, quota in enumerate(quotas)
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "queueingStrategy": strategy,
            "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": flavors}],
            **spec,
        },
    }


def flavor(name: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {},
    }


def local_queue(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"clusterQueue": target},
    }


def key(name: str) -> str:
    return f"pytorchjob/{NS}/{name}"


class Recording(Actuator):
    """Takes every decision and hold at once and remembers it (Events are real)."""

    def __init__(self, api: KubeApi, *, kueue: bool = True) -> None:
        super().__init__(api, kueue=kueue)
        self.decisions: list[Decision] = []
        self.holds: list[str] = []

    async def apply(self, decision: Decision, *, done: float | None = None) -> Outcome:
        self.decisions.append(decision)
        results = {Start: "started", Rescale: "rescaled", Reject: "rejected", Preempt: "preempted"}
        return Outcome(decision.job, results[type(decision)])  # type: ignore[arg-type]

    async def hold(self, job: str, reason: str = "") -> Outcome:
        self.holds.append(job)
        return Outcome(job, "queued")

    def started(self) -> set[str]:
        return {d.job for d in self.decisions if isinstance(d, Start)}


class Kube:
    """The emulated cluster and the calls the tests make on it."""

    def __init__(self, cluster: EmulatedCluster) -> None:
        self.cluster = cluster
        self.api = KubeApi(cluster.api_client())
        self._custom = k8s.CustomObjectsApi(self.api.api_client)

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        group, version = obj["apiVersion"].split("/")
        plural = obj["kind"].lower() + "s"
        namespace = obj["metadata"].get("namespace")
        if namespace is None:
            fn: Callable[..., Any] = self._custom.create_cluster_custom_object
            made: dict[str, Any] = await asyncio.to_thread(fn, group, version, plural, obj)
            return made
        fn = self._custom.create_namespaced_custom_object
        made = await asyncio.to_thread(fn, group, version, namespace, plural, obj)
        assert made["metadata"]["resourceVersion"]
        return made

    async def patch_cluster_queue(self, name: str, patch: dict[str, Any]) -> None:
        await asyncio.to_thread(
            self._custom.patch_cluster_custom_object, GROUP, VERSION, CLUSTER_QUEUES, name, patch
        )

    async def delete_cluster_queue(self, name: str) -> None:
        await asyncio.to_thread(
            self._custom.delete_cluster_custom_object, GROUP, VERSION, CLUSTER_QUEUES, name
        )

    async def delete_local_queue(self, name: str) -> None:
        await asyncio.to_thread(
            self._custom.delete_namespaced_custom_object,
            GROUP, VERSION, NS, LOCAL_QUEUES, name,
        )  # fmt: skip

    async def events(self, name: str) -> list[tuple[str, str]]:
        core = k8s.CoreV1Api(self.api.api_client)
        listed = await asyncio.to_thread(core.list_namespaced_event, NS)
        return [(e.reason, e.type) for e in listed.items if e.involved_object.name == name]

    async def arrival(self, name: str) -> JobArrived:
        obj = await self.api.get_job(PyTorchJobKind(), NS, name)
        assert obj is not None
        ref = JobRef(JobKind.PYTORCHJOB, NS, name, obj["metadata"]["uid"])
        return JobArrived(ref, datetime.now(UTC))


@asynccontextmanager
async def kube(*, kueue_crds: bool = True, kueue: bool = False) -> AsyncIterator[Kube]:
    """The emulated cluster with Kueue's CRDs (and, with ``kueue``, the emulated Kueue)."""
    files = [*crds(), *(_kueue_crds() if kueue_crds else [])]
    async with EmulatedCluster(crds=files, namespaces=(NS,), kueue=kueue) as cluster:
        made = Kube(cluster)
        try:
            yield made
        finally:
            await asyncio.to_thread(made.api.api_client.close)


def pools_on(
    api: KubeApi,
    actuator: Actuator,
    *,
    queues: QueueIndex | None,
    capacity: int = 16,
    metrics: Metrics | None = None,
) -> Pools:
    clock = ServiceClock(speedup=60.0)
    return Pools(
        api=api,
        core=AutoscalerConfig(),
        cluster=default_cluster(),
        capacity=capacity,
        actuator=actuator,
        reader=JobReader(api, namespace=NS, kueue=queues is not None),
        namespaces=(NS,),
        now=clock.now,
        wall_to_clock=clock.at,
        observer=None if metrics is None else MetricsObserver(metrics),
        queues=queues,
    )


async def until(what: str, check: Callable[[], Awaitable[Any] | Any]) -> Any:
    """``check()``'s value once truthy; fails naming ``what`` after LIMIT_S."""
    return await waiting.until(what, check, LIMIT_S)


def jobs_of(pools: Pools, pool: str | None) -> set[str]:
    controller = pools.controller(pool)
    assert controller is not None, pool
    core = controller.autoscaler
    return {*core.allocations, *core.queued}


def _skipped(metrics: Metrics, reason: str) -> float | None:
    return metrics.registry.get_sample_value("bellows_jobs_skipped", {"reason": reason})


# ----- tests -----------------------------------------------------------------------------------


async def test_without_kueue_there_is_exactly_one_pool_and_queued_jobs_are_refused() -> None:
    async with kube(kueue_crds=False) as k:  # no Kueue API at all: nothing asks for it
        await k.create(torch("plain", 2))
        await k.create(torch("queued", 2, queue="team-a"))
        actuator = Recording(k.api, kueue=False)
        pools = pools_on(k.api, actuator, queues=None)
        await pools.rebuild()
        assert pools.names == (None,)
        assert pools.controllers == (pools.default,)
        assert pools.queues is None
        assert pools.autoscaler is pools.default.autoscaler  # the progress loop's view
        assert set(pools.autoscaler.allocations) == {key("plain")}
        assert actuator.started() == {key("plain")}
        assert actuator.holds == []  # a suspended job that is not Kueue's is not held
        # the queued job is refused as before, naming the setting that turns cooperation on
        assert await k.events("queued") == [("Refused", "Warning")]
        obj = await k.api.get_job(PyTorchJobKind(), NS, "queued")
        assert obj is not None
        assert "controller.kueue.enabled" in obj["metadata"]["annotations"][keys.STATUS]
        await pools.apply((await k.arrival("plain"), await k.arrival("queued")))
        assert set(pools.held) == {key("plain")}
        assert pools.pending == ()


async def test_each_cluster_queue_is_a_pool_on_its_nominal_quota() -> None:
    async with kube() as k:
        # two flavors of 4 GPUs; borrowing from a cohort is not counted
        a100 = cluster_queue("a100", [4, "4"], cohortName="shared")
        a100["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["borrowingLimit"] = 8
        for obj in (
            a100,
            cluster_queue("t4", [2], "StrictFIFO"),
            local_queue("team-a", "a100"),
            local_queue("team-t", "t4"),
            torch("plain", 2),
            torch("on-a", 2, queue="team-a"),
            torch("on-t", 2, queue="team-t"),
        ):
            await k.create(obj)
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,))
        pools = pools_on(k.api, actuator, queues=index, capacity=16)
        await pools.rebuild()
        assert pools.names == (None, "a100", "t4")
        capacity = {
            p: c.autoscaler.capacity for p, c in zip(pools.names, pools.controllers, strict=True)
        }
        assert capacity == {None: 16, "a100": 8, "t4": 2}
        backfill = {
            p: c.autoscaler.config.backfill
            for p, c in zip(pools.names, pools.controllers, strict=True)
        }
        assert backfill == {None: True, "a100": True, "t4": False}
        # each job in its own pool's core only
        assert jobs_of(pools, None) == {key("plain")}
        assert jobs_of(pools, "a100") == {key("on-a")}
        assert jobs_of(pools, "t4") == {key("on-t")}
        assert actuator.started() == {key("plain"), key("on-a"), key("on-t")}
        # a Kueue job is held (its Workload deactivated) though it was submitted suspended
        assert sorted(actuator.holds) == [key("on-a"), key("on-t")]
        assert sorted(d.job for d in actuator.decisions) == sorted(actuator.started())
        # an event goes to every pool; only the job's own takes it: nothing decided twice
        await pools.apply(tuple([await k.arrival(n) for n in ("plain", "on-a", "on-t")]))
        assert len(actuator.decisions) == 3
        assert len(actuator.holds) == 2
        assert set(pools.held) == {key("plain"), key("on-a"), key("on-t")}
        # the progress loop reads the pools' cores as one
        cores = pools.autoscaler
        assert isinstance(cores, Cores)
        assert set(cores.allocations) == {key("plain"), key("on-a"), key("on-t")}
        assert cores.job(key("on-t")).gpus == 2
        assert cores.estimated_done(key("on-a"), 0.0) >= 0.0
        assert index.pool_of(await k.api.get_job(PyTorchJobKind(), NS, "on-t") or {}) == "t4"


@pytest.mark.parametrize(
    ("strategy", "backfilled"), [("StrictFIFO", False), ("BestEffortFIFO", True)]
)
async def test_the_queueing_strategy_sets_the_admission_order(
    strategy: str, backfilled: bool
) -> None:
    """Four GPUs: the first job takes three, the second (two) does not fit; the third (one)
    fits beside the first only if it may pass the second."""
    async with kube() as k:
        await k.create(cluster_queue("gpus", [4], strategy))
        await k.create(local_queue("team", "gpus"))
        for name, gpus in (("a-first", 3), ("b-second", 2), ("c-third", 1)):
            await k.create(torch(name, gpus, queue="team"))
        actuator = Recording(k.api)
        pools = pools_on(k.api, actuator, queues=QueueIndex(k.api, namespaces=(NS,)))
        await pools.rebuild()
        controller = pools.controller("gpus")
        assert controller is not None
        running = set(controller.autoscaler.allocations)
        expected = {key("a-first"), key("c-third")} if backfilled else {key("a-first")}
        assert running == expected
        assert actuator.started() == expected
        assert key("b-second") in controller.autoscaler.queued


async def test_a_quota_change_resizes_only_its_pool() -> None:
    async with kube() as k:
        await k.create(cluster_queue("gpus", [4]))
        await k.create(local_queue("team", "gpus"))
        await k.create(torch("first", 3, queue="team"))
        await k.create(torch("second", 2, queue="team"))
        await k.create(torch("plain", 2))
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,), retry_s=(0.05, 0.2))
        changes: list[QueueChange] = []

        async def heard(change: QueueChange) -> None:
            changes.append(change)

        index.subscribe(heard)
        pools = pools_on(k.api, actuator, queues=index, capacity=16)
        await pools.rebuild()
        gpus = pools.controller("gpus")
        assert gpus is not None
        assert set(gpus.autoscaler.allocations) == {key("first")}
        watch = asyncio.create_task(index.watch())
        try:
            # raised: the waiting job starts on the new quota; the default pool is untouched
            await k.patch_cluster_queue(
                "gpus",
                {"spec": {"resourceGroups": cluster_queue("gpus", [5])["spec"]["resourceGroups"]}},
            )
            await until("quota 5", lambda: gpus.autoscaler.capacity == 5)
            assert pools.controller("gpus") is gpus  # the same core, resized
            await until("second started", lambda: key("second") in gpus.autoscaler.allocations)
            assert pools.default.autoscaler.capacity == 16
            # lowered below what runs: the newest job is halted (Kueue evicts nothing itself)
            await k.patch_cluster_queue(
                "gpus",
                {"spec": {"resourceGroups": cluster_queue("gpus", [3])["spec"]["resourceGroups"]}},
            )
            await until("quota 3", lambda: gpus.autoscaler.capacity == 3)

            def preempted() -> list[str]:
                return [d.job for d in actuator.decisions if isinstance(d, Preempt)]

            await until("a job preempted", preempted)  # the round runs after the resize
            assert preempted() == [key("second")]
            assert set(gpus.autoscaler.allocations) == {key("first")}
            quotas = [(c.cluster_queue, None if c.view is None else c.view.gpus) for c in changes]
            assert quotas == [("gpus", 5), ("gpus", 3)]
        finally:
            watch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await watch


async def test_cluster_queues_that_come_and_go_add_and_drop_pools() -> None:
    async with kube() as k:
        await k.create(cluster_queue("gpus", [4]))
        await k.create(local_queue("team", "gpus"))
        await k.create(torch("first", 3, queue="team"))
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,), retry_s=(0.05, 0.2))
        pools = pools_on(k.api, actuator, queues=index, capacity=16)
        await pools.rebuild()
        watch = asyncio.create_task(index.watch())
        try:
            # a new ClusterQueue, then its LocalQueue, then a job in it: a pool, rebuilt
            await k.create(torch("later", 1, queue="late"))
            await k.create(cluster_queue("spare", [2], "StrictFIFO"))
            await until("spare pool", lambda: "spare" in pools.names)
            spare = pools.controller("spare")
            assert spare is not None
            assert spare.autoscaler.capacity == 2
            assert spare.autoscaler.config.backfill is False
            await k.create(local_queue("late", "spare"))
            await until("later adopted", lambda: key("later") in spare.autoscaler.allocations)
            # a strategy change: a new core in the same pool, which adopts its jobs
            await k.patch_cluster_queue("spare", {"spec": {"queueingStrategy": "BestEffortFIFO"}})
            await until("rebuilt", lambda: pools.controller("spare") not in (None, spare))
            rebuilt = pools.controller("spare")
            assert rebuilt is not None
            assert rebuilt.autoscaler.config.backfill is True
            assert set(rebuilt.autoscaler.allocations) == {key("later")}
            # deleted: its pool goes; the others stay
            await k.delete_cluster_queue("spare")
            await until("spare dropped", lambda: "spare" not in pools.names)
            assert pools.names == (None, "gpus")
            assert isinstance(index.pool_of(torch("x", 1, queue="late")), QueueProblem)
        finally:
            watch.cancel()
            with pytest.raises(asyncio.CancelledError):
                await watch


async def test_a_job_whose_local_queue_moves_changes_pool_and_can_come_back() -> None:
    """A LocalQueue's clusterQueue is immutable: it moves by being deleted and created
    again. The pool the job leaves forgets it (and is renewed, so that it can take the job
    back later); the pool it joins takes it."""
    async with kube() as k:
        for obj in (
            cluster_queue("a", [4]),
            cluster_queue("b", [4]),
            local_queue("team", "a"),
            torch("mover", 2, queue="team"),
        ):
            await k.create(obj)
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,))
        pools = pools_on(k.api, actuator, queues=index)
        await pools.rebuild()
        assert set(jobs_of(pools, "a")) == {key("mover")}
        for times, (there, other) in enumerate((("b", "a"), ("a", "b")), start=1):
            await k.delete_local_queue("team")
            await index.sync()  # what the watch does: the pool lets the job go, renewed
            assert all(jobs_of(pools, p) == set() for p in pools.names)
            await pools.apply((await k.arrival("mover"),))  # its queue is gone: said once
            await pools.apply((await k.arrival("mover"),))
            unknown = [e for e in await k.events("mover") if e[0] == "QueueUnknown"]
            assert unknown == [("QueueUnknown", "Warning")] * times
            await k.create(local_queue("team", there))
            await index.sync()  # the pool the queue joins takes the job
            assert jobs_of(pools, there) == {key("mover")}, there
            assert jobs_of(pools, other) == set(), other
            assert not any(c.stale for c in pools.controllers)
            await pools.apply((await k.arrival("mover"),))  # taken there only
            assert jobs_of(pools, there) == {key("mover")}, there
        assert [d.job for d in actuator.decisions] == [key("mover")] * 3  # once per pool


async def test_a_job_whose_queue_cannot_be_read_is_reported_once_and_left_alone() -> None:
    async with kube() as k:
        for obj in (
            cluster_queue("gpus", [4]),
            local_queue("team", "gpus"),
            local_queue("orphan", "gone"),  # its ClusterQueue does not exist
            torch("no-local-queue", 1, queue="nowhere"),
            torch("no-cluster-queue", 1, queue="orphan"),
            torch("fine", 1, queue="team"),
        ):
            await k.create(obj)
        metrics = Metrics()
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,))
        pools = pools_on(k.api, actuator, queues=index, metrics=metrics)
        await pools.rebuild()
        lost = ("no-local-queue", "no-cluster-queue")
        for name in lost:
            assert await k.events(name) == [("QueueUnknown", "Warning")]
            assert all(key(name) not in jobs_of(pools, p) for p in pools.names)
        assert _skipped(metrics, "queue-unknown") == 2
        assert actuator.started() == {key("fine")}
        assert actuator.holds == [key("fine")]  # never the jobs left alone
        # redelivered: still one Event each, still counted once
        await pools.apply(tuple([await k.arrival(n) for n in (*lost, "fine")]))
        for name in lost:
            assert await k.events(name) == [("QueueUnknown", "Warning")]
        assert _skipped(metrics, "queue-unknown") == 2
        # never written to: only their creation (and the operator's status) in the log
        writes = [
            w
            for w in k.cluster.store.writes
            if w[1] == TORCHJOBS and w[3] in lost and not w[0].endswith("/status")
        ]
        assert sorted(writes) == sorted(("create", TORCHJOBS, NS, n) for n in lost)
        # the missing LocalQueue appears: its pool takes the job, no longer counted
        await k.create(local_queue("nowhere", "gpus"))
        await index.sync()  # what the watch does when it sees the LocalQueue
        assert key("no-local-queue") in jobs_of(pools, "gpus")
        assert _skipped(metrics, "queue-unknown") == 1
        await pools.apply((await k.arrival("no-local-queue"),))  # taken once
        assert actuator.started() == {key("fine"), key("no-local-queue")}
        assert len(actuator.decisions) == 2
        # the message says what is missing
        problem = index.pool_of(torch("x", 1, queue="orphan"))
        assert isinstance(problem, QueueProblem)
        assert "ClusterQueue gone" in problem.message


async def test_events_some_pool_could_not_read_come_back_once() -> None:
    async with kube() as k:
        await k.create(cluster_queue("gpus", [4]))
        await k.create(local_queue("team", "gpus"))
        await k.create(torch("fine", 1, queue="team"))
        actuator = Recording(k.api)
        pools = pools_on(k.api, actuator, queues=QueueIndex(k.api, namespaces=(NS,)))
        await pools.rebuild()
        arrival = await k.arrival("fine")

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise ConnectionError("API server away")

        k.api.get_job = broken  # type: ignore[method-assign]
        with pytest.raises(EventsNotTakenError) as err:
            await pools.apply((arrival,))
        # every pool failed to read it; the pump gets it back once
        assert [event for event, _ in err.value.failures] == [arrival]


async def test_the_index_lists_every_namespace_when_none_is_named() -> None:
    async with kube() as k:
        await k.create(cluster_queue("gpus", [2, 2]))
        await k.create(local_queue("team", "gpus"))
        index = QueueIndex(k.api)
        assert isinstance(index.pool_of(torch("x", 1, queue="team")), QueueProblem)  # unread
        await index.sync()
        assert index.local_queue(NS, "team") == "gpus"
        view = index.cluster_queue("gpus")
        assert view is not None
        assert (view.gpus, view.strategy, view.backfill) == (4, "BestEffortFIFO", True)
        assert index.pool_of(torch("x", 1)) is None
        assert index.pool_of(torch("x", 1, queue="team")) == "gpus"
        items, _ = await k.api.list_kueue(LOCAL_QUEUES, None)
        assert [i["metadata"]["name"] for i in items] == ["team"]
        assert set(index.cluster_queues) == {"gpus"}


async def test_without_kueue_crds_the_index_says_what_to_install() -> None:
    async with kube(kueue_crds=False) as k:
        with pytest.raises(NotFoundError, match="install Kueue"):
            await QueueIndex(k.api, namespaces=(NS,)).sync()


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_runner_builds_the_pools_the_setting_asks_for(enabled: bool) -> None:
    """The real actuator, beside the emulated Kueue (which makes the job's Workload)."""
    async with kube(kueue=True) as k:
        for obj in (flavor("flavor-0"), flavor("flavor-1"), cluster_queue("gpus", [2, 2])):
            await k.create(obj)
        await k.create(local_queue("team", "gpus"))
        await k.create(torch("queued", 2, queue="team"))
        config = load_config(
            overrides=[
                f"namespaces={NS}",
                "controller.capacity.gpus=8",
                "controller.haltTimeoutSeconds=10",
                f"controller.kueue.enabled={str(enabled).lower()}",
            ]
        )
        pools = await runner._started_controller(
            config, api_client=k.api.api_client, api=k.api, clock=ServiceClock(),
            cluster=default_cluster(), metrics=Metrics(), stop=asyncio.Event(),
        )  # fmt: skip
        assert pools is not None
        if enabled:
            assert pools.queues is not None
            assert pools.names == (None, "gpus")
            gpus = pools.controller("gpus")
            assert gpus is not None
            assert gpus.autoscaler.capacity == 4
            assert set(gpus.autoscaler.allocations) == {key("queued")}
            # started through its Workload: Kueue admitted it and resumed it at Bellows' size

            async def resumed() -> bool:
                obj = await k.api.get_job(PyTorchJobKind(), NS, "queued") or {}
                return obj["spec"]["runPolicy"].get("suspend") is False

            await until("the job resumed by Kueue", resumed)
        else:
            assert pools.queues is None
            assert pools.names == (None,)
            assert pools.default.autoscaler.capacity == 8
            assert await k.events("queued") == [("Refused", "Warning")]
