"""``bellows status`` on nodes of several GPU types (issue 39): the cluster line counts the
GPUs per type, from the nodes' ``nvidia.com/gpu.product`` label."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

from bellows.cli.status import _capacity, cluster_text
from bellows.emulator import gpu_node
from bellows.kube.statuses import cluster_line

PRODUCT = "nvidia.com/gpu.product"


class _Nodes:
    """An API that lists ``nodes`` (one page), as ``KubeApi.list_nodes`` does."""

    def __init__(self, nodes: Sequence[dict[str, Any]]) -> None:
        self._nodes = list(nodes)

    async def list_nodes(self, selector: str | None = None) -> AsyncIterator[tuple[list[Any], str]]:
        yield self._nodes, "1"


def test_the_cluster_line_counts_the_gpus_of_each_type() -> None:
    nodes = [
        gpu_node("t4-0", 4, labels={PRODUCT: "Tesla-T4"}),
        gpu_node("a100-0", 8, labels={PRODUCT: "NVIDIA-A100-SXM4-40GB"}),
        gpu_node("plain", 2),
        gpu_node("down", 8, labels={PRODUCT: "Tesla-T4"}, ready=False),  # takes no pods
    ]
    total, by_type = asyncio.run(_capacity(_Nodes(nodes)))
    assert total == 14
    assert by_type == {"": 2, "NVIDIA-A100-SXM4-40GB": 8, "Tesla-T4": 4}
    line = cluster_line(total, [], "bellows", by_type)
    text = cluster_text(line)
    assert text.startswith("cluster: 14 GPUs (other 2, NVIDIA-A100-SXM4-40GB 8, Tesla-T4 4),")
    assert line.as_dict()["capacityByType"] == by_type


def test_nodes_without_a_type_show_the_line_as_before() -> None:
    total, by_type = asyncio.run(_capacity(_Nodes([gpu_node("a", 4), gpu_node("b", 4)])))
    assert (total, by_type) == (8, {})
    line = cluster_line(total, [], "bellows", by_type)
    assert cluster_text(line).startswith("cluster: 8 GPUs, 0 in use")
    assert "capacityByType" not in line.as_dict()
