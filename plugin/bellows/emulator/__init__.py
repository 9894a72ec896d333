"""A strict, in-process Kubernetes API server and Kubeflow operators, for tests and demos.

Why not ``kmock``: kmock 0.8 assigns no ``resourceVersion``/``uid``, never answers 409,
ignores selectors, answers PUT with 404, and its watch yields nothing to kubernetes 35/36
clients; teaching it all of that leaves little of kmock, and it is a pytest plugin living
in the test's loop, while ``bellows demo`` needs the same server at run time. So this is a
small server on aiohttp that implements exactly those semantics (see ``docs/kube.md``).
"""

from __future__ import annotations

from bellows.emulator.cluster import EmulatedCluster
from bellows.emulator.faults import FaultRule, Faults, Injected
from bellows.emulator.kueue import EmulatedKueue, Fight
from bellows.emulator.nodes import gpu_node, uniform_nodes
from bellows.emulator.operator import EmulatedOperator, Progress
from bellows.emulator.store import ApiError, Store
from bellows.emulator.typed import typed_nodes

__all__ = [
    "ApiError",
    "EmulatedCluster",
    "EmulatedKueue",
    "EmulatedOperator",
    "FaultRule",
    "Faults",
    "Fight",
    "Injected",
    "Progress",
    "Store",
    "gpu_node",
    "typed_nodes",
    "uniform_nodes",
]
