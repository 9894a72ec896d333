"""The controller on nodes of several GPU types: the cluster it decides over
(:mod:`bellows.service.typed_cluster`), and its node view placing each job on its type's nodes
and telling a typed core where each type's GPUs sit."""

from __future__ import annotations

from typing import Any

from bellows.scaling import default_cluster
from bellows.scaling.gpu_types import sia_mix
from bellows.service.capacity import _Teller
from bellows.service.node_view import NodeView
from bellows.service.typed_cluster import products, typed_cluster

GPU = "nvidia.com/gpu"


def _pod(uid: str, node: str, owner: str, gpus: int = 1) -> dict[str, Any]:
    owners = [{"kind": "PyTorchJob", "name": owner, "controller": True}]
    meta = {"uid": uid, "name": uid, "namespace": "d", "ownerReferences": owners}
    spec = {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": {GPU: gpus}}}]}
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running"}}


NODES = {"a-0": 8, "t-0": 4, "t-1": 4, "u-0": 4}
TYPES = {"a-0": "a100", "t-0": "t4", "t-1": "t4", "u-0": ""}


def test_the_typed_cluster_is_the_listed_nodes_with_each_types_allreduce_model() -> None:
    typed = typed_cluster(NODES, TYPES, {"Tesla-T4": "t4", "NVIDIA-A100-SXM4-40GB": "a100"},
                          default_cluster())  # fmt: skip
    assert typed is not None
    assert typed.names == ("a100", "t4")  # the untyped node is not decided over
    assert typed.capacities == (8, 8)
    sia = {t.name: t.cluster for t in sia_mix().types}
    assert typed.type("t4").cluster == sia["t4"]  # Sia's fit for a type it measured
    assert typed.type("t4").product == "Tesla-T4"
    assert typed.type("a100").product == "NVIDIA-A100-SXM4-40GB"
    other = typed_cluster({"x-0": 2, "t-0": 4}, {"x-0": "h100", "t-0": "t4"}, {},
                          default_cluster())  # fmt: skip
    assert other is not None
    h100 = other.type("h100")
    assert h100.product == "h100"  # a label value not mapped is its own type
    assert h100.cluster.gpus_per_node == 2  # the configured profile, at the type's node
    assert h100.cluster.intra_node == default_cluster().intra_node
    assert typed_cluster({"t-0": 4, "t-1": 4}, {"t-0": "t4", "t-1": "t4"}, {},
                         default_cluster()) is None  # one type: one pool  # fmt: skip


def test_a_type_two_label_values_name_has_no_one_selector() -> None:
    names = {"n1": "a100", "n2": "a100"}
    both = {"NVIDIA-A100-SXM4-40GB": "a100", "NVIDIA-A100-80GB": "a100"}
    assert products(names, both) == {}  # only a node pin places such a type's jobs
    assert products(names, {"NVIDIA-A100-80GB": "a100"}) == {"a100": "NVIDIA-A100-80GB"}


def _view(running: dict[str, int]) -> NodeView:
    view = NodeView(gpus_per_node=8)
    view.set_nodes(NODES)
    view.set_node_types(TYPES, {"a100": 8, "t4": 4})
    view.follow(lambda: running)
    return view


def test_a_job_given_a_type_is_placed_on_that_types_nodes_only() -> None:
    running = {"pytorchjob/d/a": 2, "pytorchjob/d/b": 2}
    view = _view(running)
    assert view.pin("pytorchjob/d/a", 2, 1, gpu_type="t4") == ("t-0",)
    assert view.pin("pytorchjob/d/b", 2, 1, gpu_type="a100") == ("a-0",)
    view.place_round([("pytorchjob/d/c", 6), ("pytorchjob/d/d", 4)],
                     {"pytorchjob/d/c": "a100", "pytorchjob/d/d": "t4"})  # fmt: skip
    assert view.pin("pytorchjob/d/c", 6, 1) == ("a-0",)
    assert view.pin("pytorchjob/d/d", 4, 1) == ("t-1",)
    assert view.pin("pytorchjob/d/e", 8, 1, gpu_type="t4") is None  # no room on the type


def test_each_type_is_told_to_the_core_apart_and_a_job_reads_its_type_from_its_pods() -> None:
    running = {"pytorchjob/d/a": 2, "pytorchjob/d/b": 3}
    view = _view(running)
    view.put_pod(_pod("a0", "t-0", "a"))
    view.put_pod(_pod("a1", "t-1", "a"))
    view.put_pod(_pod("b0", "a-0", "b", 3))
    seen = view.free_nodes_by_type()
    assert seen is not None
    assert set(seen) == {"a100", "t4"}  # untyped nodes are no type's
    assert seen["t4"].free == (3, 3)
    assert dict(seen["t4"].held) == {"pytorchjob/d/a": ((0, 1), (1, 1))}
    assert seen["a100"].free == (5,)
    assert dict(seen["a100"].held) == {"pytorchjob/d/b": ((0, 3),)}
    assert view.job_type("pytorchjob/d/a") == "t4"
    assert view.job_type("pytorchjob/d/b") == "a100"
    assert view.job_type("pytorchjob/d/c") is None  # no pod bound
    view.put_pod(_pod("b1", "t-0", "b"))  # across two types: not one type's
    assert view.job_type("pytorchjob/d/b") is None
    view.set_node_types(TYPES, {"a100": 4, "t4": 4})  # a node larger than its type's
    assert set(view.free_nodes_by_type() or {}) == {"t4"}


async def test_a_split_between_types_that_keeps_the_total_is_told_again() -> None:
    """The capacity watch tells the total again when only the GPUs per type moved (a T4
    node gone as an A100 node came), so that a typed core takes the new split."""
    told: list[int] = []
    split: list[dict[str, int]] = []

    async def on_change(total: int) -> None:
        told.append(total)

    teller = _Teller(on_change, lambda gpus: split.append(dict(gpus)))
    await teller.tell(16, {"a100": 8, "t4": 8})
    await teller.tell(16, {"a100": 8, "t4": 8})  # nothing moved: nothing told
    await teller.tell(16, {"a100": 12, "t4": 4})
    assert told == [16, 16]
    assert split == [{"a100": 8, "t4": 8}, {"a100": 12, "t4": 4}]
    quiet = _Teller(on_change)  # no one listens per type: the total alone decides
    await quiet.tell(16, {"t4": 16})
    await quiet.tell(16, {"t4": 8, "a100": 8})
    assert told == [16, 16, 16]
