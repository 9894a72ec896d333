"""Where a job's pods go: the fewest nodes the free GPUs allow, the fullest among them.

The one placement rule of Bellows, in the simulator (``bellows.sim.nodes.Nodes.place``,
one GPU at a time on uniform nodes) and live (the controller pins a job it sizes to the
nodes this rule picks from its node view, ``bellows.service.node_view``):

* repeatedly, if one node has room for all the pods left, the one with the *least* room
  that does takes them all (best fit: whole nodes stay whole for the jobs that need them);
* else the node with the *most* room takes as many as it holds.

Room is counted in pods: a node with ``free`` GPUs holds ``free // gpus_per_pod`` pods of
the job. Ties go to the first node by name. That is the fewest nodes the free GPUs allow;
more than ``ceil(gpus / gpus_per_node)`` only where the free GPUs are fragmented. Pure: no
I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping

from bellows.jobs import SpecError

__all__ = ["best_fit"]


def best_fit(free: Mapping[str, int], pods: int, gpus_per_pod: int = 1) -> dict[str, int] | None:
    """GPUs per node for ``pods`` pods of ``gpus_per_pod`` GPUs on nodes with ``free`` GPUs
    (by name), by the rule above; ``None`` when they do not fit."""
    for name, value, least in (("pods", pods, 1), ("gpus_per_pod", gpus_per_pod, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise SpecError(name, value, f"an integer >= {least}")
    room = {n: f // gpus_per_pod for n, f in sorted(free.items()) if f >= gpus_per_pod}
    if sum(room.values()) < pods:
        return None
    placed: dict[str, int] = {}
    left = pods
    while left:
        fits = [n for n, r in room.items() if r >= left]
        if fits:
            node = min(fits, key=lambda n: room[n])  # the first by name among ties
            take = left
        else:
            node = max(room, key=lambda n: room[n])
            take = room[node]
        placed[node] = take * gpus_per_pod
        del room[node]
        left -= take
    return dict(sorted(placed.items()))
