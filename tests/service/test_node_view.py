"""The controller's node view (``controller.placement: nodes``): free GPUs per node from the
nodes and the pods, the pins it hands out, and its pod watch against the emulated cluster."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Preempt, Rescale, Start
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, KubeApi
from bellows.kube.nodes import pod_gpus
from bellows.kube.placement import Placement
from bellows.service.node_view import NodeView, pod_job, watch_pods
from tests.conftest import REPO, shared_data_dir

GPU = "nvidia.com/gpu"


def _pod(
    uid: str, node: str, gpus: int, *, owner: str = "", kind: str = "PyTorchJob", ns: str = "d"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"kind": kind, "name": owner, "controller": True, "uid": "x"}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {GPU: gpus}}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def _view(running: dict[str, int]) -> NodeView:
    view = NodeView()
    view.set_nodes({"n1": 4, "n2": 4, "n3": 8})
    view.follow(lambda: running)
    return view


def test_free_counts_other_workloads_and_running_jobs_not_halted_ones() -> None:
    running = {"pytorchjob/d/a": 2, "pytorchjob/d/b": 2}
    view = _view(running)
    view.put_pod(_pod("a0", "n1", 1, owner="a"))
    view.put_pod(_pod("a1", "n1", 1, owner="a"))
    view.put_pod(_pod("b0", "n2", 2, owner="b"))
    assert view.free("pytorchjob/d/c")["n2"] == 2
    del running["pytorchjob/d/b"]  # b was halted: its pods are going
    view.put_pod(_pod("x0", "n3", 3))  # no owner Bellows sizes: another workload's
    view.put_pod(_pod("x1", "", 4))  # Pending: holds nothing
    assert view.free("pytorchjob/d/c") == {"n1": 2, "n2": 4, "n3": 5}
    assert view.free("pytorchjob/d/a") == {"n1": 4, "n2": 4, "n3": 5}  # its own count free
    view.remove_pod(_pod("a0", "n1", 1))
    assert view.free("pytorchjob/d/c")["n1"] == 3


def test_a_pin_holds_its_gpus_until_the_pods_are_there_and_a_halt_spends_it() -> None:
    running: dict[str, int] = {}
    view = _view(running)
    assert view.pin("pytorchjob/d/a", 4, 1) == ("n1",)  # best fit: a whole 4-GPU node
    running["pytorchjob/d/a"] = 4
    # before a's pods are seen, b's placement counts a's pin
    assert view.pin("pytorchjob/d/b", 6, 2) == ("n3",)
    running["pytorchjob/d/b"] = 6
    assert view.free("pytorchjob/d/c") == {"n1": 0, "n2": 4, "n3": 2}
    for i in range(4):
        view.put_pod(_pod(f"a{i}", "n1", 1, owner="a"))
    assert view.free("pytorchjob/d/c") == {"n1": 0, "n2": 4, "n3": 2}
    del running["pytorchjob/d/b"]  # halted before its pods came: its pin is spent
    assert view.free("pytorchjob/d/c") == {"n1": 0, "n2": 4, "n3": 8}
    assert view.pin("pytorchjob/d/c", 16, 1) is None  # no room: no pin
    assert view.pin("pytorchjob/d/c", 9, 1) == ("n2", "n3")


def test_no_nodes_no_pin_and_bad_pods_count_nothing() -> None:
    view = NodeView()
    assert view.pin("pytorchjob/d/a", 2, 1) is None
    view.set_nodes({"n1": 4, "n2": 0})
    assert view.nodes == {"n1": 4}
    bad = _pod("z", "n1", 1)
    bad["spec"]["containers"][0]["resources"]["limits"][GPU] = "lots"
    view.put_pod(bad)
    assert view.free("j") == {"n1": 4}
    done = _pod("y", "n1", 2)
    done["status"]["phase"] = "Succeeded"
    view.put_pod(done)
    assert view.free("j") == {"n1": 4}


def test_pod_job_names_the_job_as_the_core_does() -> None:
    assert pod_job(_pod("p", "n", 1, owner="a", ns="team")) == "pytorchjob/team/a"
    assert pod_job(_pod("p", "n", 1, owner="a", kind="MPIJob")) == "mpijob/d/a"
    assert pod_job(_pod("p", "n", 1, owner="a", kind="ReplicaSet")) == ""
    trainjob = _pod("p", "n", 1)
    trainjob["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "t"}
    assert pod_job(trainjob) == "trainjob/d/t"


def _resnet() -> dict[str, dict[str, Any]]:
    text = (REPO / "manifests" / "examples" / "pytorchjob-resnet50.yaml").read_text()
    return {d["kind"]: d for d in yaml.safe_load_all(text)}


async def _submitted(api: KubeApi, docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The example PyTorchJob (suspended) and its profile ConfigMap, created."""
    core = k8s.CoreV1Api(api.api_client)
    await asyncio.to_thread(
        core.create_namespaced_config_map, "default", copy.deepcopy(docs["ConfigMap"])
    )
    custom = k8s.CustomObjectsApi(api.api_client)
    job: dict[str, Any] = await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        "kubeflow.org", "v1", "default", "pytorchjobs", copy.deepcopy(docs["PyTorchJob"]),
    )  # fmt: skip
    return job


async def _until(what: str, check: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def test_the_actuator_pins_where_the_view_places_and_the_pods_land_there() -> None:
    """Live: a 4-GPU node half taken by another workload's pod. The view pins a 2-GPU job to
    the fullest node that holds it (beside that pod: kube-scheduler's default scoring alone
    spreads it over the empty nodes), then, resized to 4, to the empty 4-GPU node; the pods
    land where it was pinned."""
    docs = _resnet()
    async with EmulatedCluster(
        crds=sorted((shared_data_dir() / "crds").glob("*.yaml")),
        gpu_nodes={"gpu-node-0": 4, "gpu-node-1": 4, "gpu-node-2": 2},
        compression=1.0,
    ) as kube:
        api = KubeApi(kube.api_client())
        core = k8s.CoreV1Api(api.api_client)
        job = await _submitted(api, docs)
        other = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "other", "namespace": "default"},
            "spec": {
                "nodeName": "gpu-node-1",
                "containers": [{"name": "c", "resources": {"limits": {GPU: 2}}}],
            },
        }
        await asyncio.to_thread(core.create_namespaced_pod, "default", other)
        view = NodeView()
        running: dict[str, int] = {}
        view.follow(lambda: running)
        view.set_nodes({"gpu-node-0": 4, "gpu-node-1": 4, "gpu-node-2": 2})
        watcher = asyncio.create_task(watch_pods(api, view, ("default",)))
        try:
            await _until("the other pod seen", lambda: view.free("x")["gpu-node-1"] == 2)
            name = job["metadata"]["name"]
            ref = f"pytorchjob/default/{name}"
            act = Actuator(api, placement=Placement.NODES, pins=view, halt_timeout_s=10)
            assert (await act.apply(Start(ref, 2, 128))).result == "started"
            running[ref] = 2
            uid = job["metadata"]["uid"]
            # 2 GPUs: the fullest node that holds them is gpu-node-1 (2 free) or gpu-node-2
            # (2 free): the first by name
            await _until("placed", lambda: sum(kube.placer.placement(uid).values()) == 2)
            assert kube.placer.placement(uid) == {"gpu-node-1": 2}
            await _until("the pods seen", lambda: view.free("x")["gpu-node-1"] == 0)
            assert (await act.apply(Preempt(ref, "capacity"))).result == "preempted"
            del running[ref]
            assert (await act.apply(Start(ref, 4, 256))).result == "started"
            running[ref] = 4
            await _until("placed again", lambda: sum(kube.placer.placement(uid).values()) == 4)
            assert kube.placer.placement(uid) == {"gpu-node-0": 4}  # the pin replaced
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await asyncio.to_thread(api.api_client.close)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_holds_nothing(phase: str) -> None:
    view = _view({})
    pod = _pod("p", "n1", 4)
    view.put_pod(pod)
    assert view.free("j")["n1"] == 0
    pod["status"]["phase"] = phase
    view.put_pod(pod)
    assert view.free("j")["n1"] == 4


def test_a_resized_job_counts_where_it_is_pinned_and_a_finished_one_nothing() -> None:
    running = {"pytorchjob/d/a": 2}
    view = _view(running)
    view.put_pod(_pod("a0", "n1", 1, owner="a"))
    view.put_pod(_pod("a1", "n1", 1, owner="a"))
    assert view.free("pytorchjob/d/c")["n1"] == 2
    running["pytorchjob/d/a"] = 8
    assert view.pin("pytorchjob/d/a", 8, 1) == ("n3",)
    # its old pods on n1 are going (halted for the resize): counted where it is pinned
    assert view.free("pytorchjob/d/c") == {"n1": 4, "n2": 4, "n3": 0}
    del running["pytorchjob/d/a"]  # it finished before the watch told its pods gone
    assert view.free("pytorchjob/d/c") == {"n1": 4, "n2": 4, "n3": 8}


def test_a_job_bellows_only_queues_but_that_runs_holds_its_gpus() -> None:
    """Kueue may admit a job before Bellows sizes it: Bellows queues it, its pods run."""
    view = _view({})
    view.put_pod(_pod("q0", "n1", 3, owner="q"))
    assert view.free("pytorchjob/d/c")["n1"] == 1


def test_a_round_places_its_claims_at_once_largest_first_their_old_pods_going() -> None:
    running = {"pytorchjob/d/a": 2, "pytorchjob/d/b": 4, "pytorchjob/d/c": 3}
    view = _view(running)
    for i in range(2):  # a runs on 2 GPUs, one on each 4-GPU node: it is resized to 4
        view.put_pod(_pod(f"a{i}", f"n{i + 1}", 1, owner="a"))
    view.put_pod(_pod("x", "n3", 4))  # another workload's, on the 8-GPU node
    view.place_round([("pytorchjob/d/c", 3), ("pytorchjob/d/a", 4), ("pytorchjob/d/b", 4)])
    # a and b (4 each, by name) first: whole 4-GPU nodes, a's old pods counted gone;
    # then c on what is left of the 8-GPU node
    assert view.pin("pytorchjob/d/a", 4, 1) == ("n1",)
    assert view.pin("pytorchjob/d/b", 4, 1) == ("n2",)
    assert view.pin("pytorchjob/d/c", 3, 1) == ("n3",)
    assert view.free("pytorchjob/d/z") == {"n1": 0, "n2": 0, "n3": 1}
    # a later size than the round's is placed afresh
    assert view.pin("pytorchjob/d/c", 1, 1) == ("n3",)
    assert view.free("pytorchjob/d/z") == {"n1": 0, "n2": 0, "n3": 3}


def test_a_namespaces_list_replaces_that_namespaces_pods_only() -> None:
    view = _view({})
    view.put_pod(_pod("a", "n1", 1, ns="team-a"))
    view.put_pod(_pod("b", "n1", 2, ns="team-b"))
    view.replace_pods([_pod("c", "n2", 1, ns="team-a")], "team-a")
    assert view.free("j") == {"n1": 2, "n2": 3, "n3": 8}
    view.replace_pods([])  # every namespace's: none left
    assert view.free("j") == {"n1": 4, "n2": 4, "n3": 8}


def test_free_nodes_tells_the_core_where_the_gpus_sit() -> None:
    running = {"pytorchjob/d/a": 2, "pytorchjob/d/b": 3}
    view = NodeView(gpus_per_node=4)
    view.set_nodes({"n1": 4, "n2": 4})
    view.follow(lambda: running)
    view.put_pod(_pod("a0", "n1", 1, owner="a"))
    view.put_pod(_pod("a1", "n2", 1, owner="a"))
    view.put_pod(_pod("x", "n2", 1))  # another workload's
    assert view.pin("pytorchjob/d/b", 3, 1) == ("n1",)
    seen = view.free_nodes()
    assert seen is not None
    assert seen.free == (0, 2)
    assert dict(seen.held) == {"pytorchjob/d/a": ((0, 1), (1, 1)), "pytorchjob/d/b": ((0, 3),)}
    assert seen.spread == frozenset({"pytorchjob/d/a"})
    view.set_nodes({"n1": 4, "n2": 8})  # a node the core's profile has no price for
    assert view.free_nodes() is None
    assert NodeView().free_nodes() is None  # no nodes yet


async def test_a_move_at_the_same_size_halts_and_lands_the_job_on_one_node() -> None:
    """A straddled job the core moves (a Rescale to its own size) is moved: halted, then
    resumed pinned where the view places it."""
    docs = _resnet()
    async with EmulatedCluster(
        crds=sorted((shared_data_dir() / "crds").glob("*.yaml")),
        gpu_nodes={"gpu-node-0": 4, "gpu-node-1": 4},
        compression=1.0,
    ) as kube:
        api = KubeApi(kube.api_client())
        job = await _submitted(api, docs)
        name, uid = job["metadata"]["name"], job["metadata"]["uid"]
        ref = f"pytorchjob/default/{name}"
        # started without a view or packing: the default scoring spreads its two pods
        spread = Actuator(api, placement=Placement.NONE, halt_timeout_s=10)
        assert (await spread.apply(Start(ref, 2, 128))).result == "started"
        await _until("placed", lambda: sum(kube.placer.placement(uid).values()) == 2)
        assert len(kube.placer.placement(uid)) == 2
        view = NodeView(gpus_per_node=4)
        running = {ref: 2}
        view.follow(lambda: running)
        view.set_nodes({"gpu-node-0": 4, "gpu-node-1": 4})
        watcher = asyncio.create_task(watch_pods(api, view, ("default",)))
        try:
            await _until(
                "its pods seen", lambda: view.free("x") == {"gpu-node-0": 3, "gpu-node-1": 3}
            )
            act = Actuator(api, placement=Placement.NODES, pins=view, halt_timeout_s=10)
            view.place_round([(ref, 2)])
            outcome = await act.apply(Rescale(ref, 2, 128, 2, 128, "moved onto one node"))
            assert outcome.result == "rescaled"
            await _until(
                "moved onto one node",
                lambda: kube.placer.placement(uid) == {"gpu-node-0": 2},
            )
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            await asyncio.to_thread(api.api_client.close)


def test_a_preferred_pin_gives_way_to_the_pods_wherever_they_land() -> None:
    running = {"pytorchjob/d/k": 2}
    view = _view(running)
    assert view.pin("pytorchjob/d/k", 2, 1, required=False) == ("n1",)
    view.put_pod(_pod("k0", "n2", 1, owner="k"))
    assert view.free("pytorchjob/d/z")["n1"] == 2  # half there: the pin still holds
    view.put_pod(_pod("k1", "n3", 1, owner="k"))  # Kueue's job landed elsewhere
    assert view.free("pytorchjob/d/z") == {"n1": 4, "n2": 3, "n3": 7}


def test_pod_gpus_counts_as_the_scheduler_does() -> None:
    def c(**resources: Any) -> dict[str, Any]:
        return {"name": "c", "resources": resources}

    assert pod_gpus({"containers": [c(limits={GPU: 2}), c(requests={GPU: "1"})]}) == 3
    assert (
        pod_gpus({"containers": [c(limits={GPU: 1})], "initContainers": [c(limits={GPU: 4})]}) == 4
    )
    assert pod_gpus({"containers": [c(limits={"cpu": "2"})]}) == 0
    with pytest.raises(ValueError, match=GPU):
        pod_gpus({"containers": [c(limits={GPU: "lots"})]})


def test_a_tenants_pod_speaks_only_for_its_own_namespace() -> None:
    """A tenant may create pods naming any owner: the job they count for is in the pod's
    own namespace, never another tenant's."""
    running = {"pytorchjob/team-a/train": 4}
    view = _view(running)
    view.put_pod(_pod("t0", "n1", 4, owner="train", ns="team-a"))
    forged = _pod("f0", "n3", 4, owner="train", ns="team-b")  # names team-a's job's name
    assert pod_job(forged) == "pytorchjob/team-b/train"
    view.put_pod(forged)
    seen = view.free_nodes()
    assert seen is not None
    assert dict(seen.held) == {"pytorchjob/team-a/train": ((0, 4),)}  # not moved to n3
    assert view.free("pytorchjob/team-c/x") == {"n1": 0, "n2": 4, "n3": 4}  # a foreign pod
