"""Issue 25, item 5: a ClusterQueue's ``namespaceSelector`` is honoured, by the emulated
Kueue as Kueue does and by Bellows' routing. A LocalQueue of a namespace the ClusterQueue
does not select routes nothing into that pool: the job is reported (Event
``QueueUnknown``, the skipped gauge) and left alone, and it joins the pool once the
namespace is labelled to match (the namespaces are watched, not read per job)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from bellows.inputs import SpecError
from bellows.kube.kueue import read_cluster_queue, read_namespace_selector
from bellows.service.metrics import Metrics
from bellows.service.queues import QueueIndex, QueueProblem
from tests.service.livecluster import NS
from tests.service.test_pools import (
    Recording,
    _skipped,
    cluster_queue,
    jobs_of,
    key,
    kube,
    local_queue,
    pools_on,
    torch,
    until,
)

TEAM_A = {"matchLabels": {"team": "team-a"}}


@pytest.mark.parametrize(
    ("selector", "labels", "admits"),
    [
        (None, {}, False),  # null: Kueue's LabelSelectorAsSelector(nil) is Nothing
        (None, {"team": "team-a"}, False),
        ({}, {}, True),  # {}: every namespace
        (TEAM_A, {"team": "team-a"}, True),
        (TEAM_A, {"team": "team-b"}, False),
        (TEAM_A, {}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {},
            True,
        ),
        (
            {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]},
            {"team": "a"},
            False,
        ),
        ({"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}, {"gpu": ""}, True),
        ({"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}, {"gpu": "x"}, False),
        (
            {**TEAM_A, "matchExpressions": [{"key": "gpu", "operator": "Exists"}]},
            {"team": "team-a"},
            False,
        ),  # ANDed
    ],
)
def test_the_selector_reads_as_kubernetes_label_selectors_do(selector, labels, admits):
    assert read_namespace_selector("s", selector).admits(labels) is admits


@pytest.mark.parametrize(
    ("selector", "field"),
    [
        ("team-a", "s"),
        ({"matchLabels": ["team"]}, "s.matchLabels"),
        ({"matchExpressions": [{"key": "t", "operator": "Is", "values": ["a"]}]}, "operator"),
        ({"matchExpressions": [{"key": "t", "operator": "In"}]}, "values"),
        ({"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["a"]}]}, "values"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "key"),
    ],
)
def test_a_malformed_selector_is_an_error_naming_its_field(selector, field):
    with pytest.raises(SpecError, match=field):
        read_namespace_selector("s", selector)
    obj = cluster_queue("q", [4], namespaceSelector=selector)
    with pytest.raises(SpecError, match=r"spec\.namespaceSelector"):
        read_cluster_queue(obj)


async def test_a_queue_that_does_not_select_the_namespace_never_pools_its_job() -> None:
    nobody = cluster_queue("nobody", [4])
    del nobody["spec"]["namespaceSelector"]  # absent (null): no namespace at all
    async with kube(kueue=True) as k:
        for obj in (
            cluster_queue("team-a", [4], namespaceSelector=TEAM_A),
            nobody,
            local_queue("to-a", "team-a"),
            local_queue("to-nobody", "nobody"),
            torch("intruder", 2, queue="to-a"),
            torch("stray", 1, queue="to-nobody"),
        ):
            await k.create(obj)
        # Kueue itself leaves both Workloads pending, as the real scheduler does
        assert k.cluster.kueue is not None
        k.cluster.kueue.reconcile()
        for name in ("intruder", "stray"):
            wl = next(
                w
                for w in k.cluster.store.list_objects(
                    k.cluster.store.resources["kueue.x-k8s.io/v1beta2/workloads"], NS
                )[0]
                if w["metadata"]["name"].startswith(f"pytorchjob-{name}-")
            )
            reserved = {c["type"]: c for c in wl["status"]["conditions"]}["QuotaReserved"]
            assert reserved["status"] == "False"
            assert "namespace doesn't match ClusterQueue selector" in reserved["message"]
        metrics = Metrics()
        actuator = Recording(k.api)
        index = QueueIndex(k.api, namespaces=(NS,))
        pools = pools_on(k.api, actuator, queues=index, metrics=metrics)
        await pools.rebuild()
        for name in ("intruder", "stray"):
            assert all(key(name) not in jobs_of(pools, p) for p in pools.names), name
            assert await k.events(name) == [("QueueUnknown", "Warning")]
        assert _skipped(metrics, "queue-unknown") == 2
        assert actuator.started() == set()
        problem = index.pool_of(torch("x", 1, queue="to-a"))
        assert isinstance(problem, QueueProblem)
        assert "does not admit namespace default" in problem.message
        assert "team In (team-a)" in problem.message
        assert "kubernetes.io/metadata.name=default" in problem.message
        # the admin labels the namespace: the watch sees it, the pool takes the job
        watch = asyncio.create_task(index.watch())
        try:
            k.cluster.label_namespace(NS, {"team": "team-a"})
            await until(
                "the pool takes the job",
                lambda: (
                    pools.controller("team-a") is not None
                    and key("intruder") in jobs_of(pools, "team-a")
                ),
            )
            await until("one job still skipped", lambda: _skipped(metrics, "queue-unknown") == 1)
            await until("the job started", lambda: actuator.started() == {key("intruder")})
            # the label goes again: the job leaves the pool, never written to
            k.cluster.label_namespace(NS, {"team": None})
            await until(
                "the pool lets it go",  # the pool is rebuilt meanwhile: none for a moment
                lambda: (
                    pools.controller("team-a") is not None and jobs_of(pools, "team-a") == set()
                ),
            )
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watch
