"""Per-node placement for the Pollux reference, under Pollux's interference rule.

Pollux allocates GPUs per node and avoids interference between distributed jobs: **at most
one distributed job (a job on more than one node) per node**; jobs on one node may share it
with each other and with one distributed job. :class:`Packer` holds the free GPUs of each
node and where distributed jobs sit:

* :meth:`Packer.keep` re-books a job that keeps its placement (it is not moved, so it does
  not restart);
* :meth:`Packer.place` puts ``k`` GPUs on one node if any has ``k`` free (the fullest that
  does, so that whole nodes stay whole), else on as few nodes as the free GPUs of the nodes
  without a distributed job allow (the fullest node last), and ``None`` if even those do
  not hold ``k``.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from bellows.jobs import SpecError

__all__ = ["Packer", "Placement", "node_sizes"]

Placement = tuple[tuple[int, int], ...]
"""``(node, GPUs)`` for each node a job holds GPUs on (as :data:`bellows.sim.nodes.Placement`)."""


def node_sizes(capacity: int, gpus_per_node: int) -> list[int]:
    """The nodes of a cluster of ``capacity`` GPUs, as the simulator numbers them: whole
    nodes of ``gpus_per_node``, then a partial one."""
    whole, rest = divmod(capacity, gpus_per_node)
    return [gpus_per_node] * whole + ([rest] if rest else [])


class Packer:
    """Free GPUs per node and the nodes a distributed job already holds (module docstring)."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.free = list(sizes)
        self.distributed = [False] * len(self.free)

    def fits(self, placement: Placement) -> bool:
        """Whether ``placement``'s GPUs are all free, on nodes it may share."""
        spread = len(placement) > 1
        return all(gpus <= self.free[node] and not (spread and self.distributed[node])
                   for node, gpus in placement)  # fmt: skip

    def keep(self, placement: Placement) -> None:
        if not self.fits(placement):
            raise SpecError("placement", placement, "GPUs free on nodes it may share")
        self._book(placement)

    def place(self, gpus: int) -> Placement | None:
        """``gpus`` GPUs on one node, else spread under the interference rule (or ``None``)."""
        fits = [n for n, free in enumerate(self.free) if free >= gpus]
        if fits:
            node = min(fits, key=lambda n: (self.free[n], n))
            placement: Placement = ((node, gpus),)
            self._book(placement)
            return placement
        open_ = [n for n, free in enumerate(self.free) if free > 0 and not self.distributed[n]]
        if sum(self.free[n] for n in open_) < gpus:
            return None
        held: list[tuple[int, int]] = []
        remaining = gpus
        while remaining:
            last = [n for n in open_ if self.free[n] >= remaining]
            if last:
                node = min(last, key=lambda n: (self.free[n], n))
                take = remaining
            else:
                node = max(open_, key=lambda n: (self.free[n], -n))
                take = self.free[node]
            open_.remove(node)
            held.append((node, take))
            self.free[node] -= take  # booked below; taken now so the next pick sees it
            remaining -= take
        for node, take in held:
            self.free[node] += take
        placement = tuple(sorted(held))
        self._book(placement)
        return placement

    def _book(self, placement: Placement) -> None:
        for node, gpus in placement:
            self.free[node] -= gpus
            if len(placement) > 1:
                self.distributed[node] = True
