"""The simulated cluster's nodes: where each running job's GPUs sit (issue 29, item 5).

The cluster is ``capacity`` GPUs on nodes of ``gpus_per_node`` (the cluster profile's, the
one the JSA prices with), the last one partial when the capacity is not a multiple.
:meth:`Nodes.place` puts ``k`` GPUs on as few nodes as the free GPUs allow, and among those
the fullest ones (best fit, so that whole nodes stay whole for the jobs that need them):

* repeatedly, if one node has ``remaining`` GPUs free, the one with the fewest free that
  does takes them all; else the node with the most free GPUs gives all it has.

That is the fewest nodes the free GPUs allow; it is more than ``ceil(k / gpus_per_node)``
only where the free GPUs are fragmented (a job of 2 on two nodes with one free GPU each).
Jobs never move while they run: a rescale is a restart, and the restarted job is placed
afresh. A capacity drop takes free GPUs, emptiest nodes first; GPUs still held when it comes
are owed and taken as they are freed (the core halts jobs to fit the new capacity in the
same instant's round). Pure: no I/O, no clock.
"""

from __future__ import annotations

from bellows.jobs import SpecError

__all__ = ["Nodes", "Placement", "packed"]

Placement = tuple[tuple[int, int], ...]
"""``(node, GPUs)`` for each node a job holds GPUs on."""


def packed(gpus: int, per_node: int) -> tuple[tuple[int, int], ...]:
    """``gpus`` on the fewest nodes of ``per_node``: ``(node, GPUs)`` pairs, full first."""
    return tuple((n, min(per_node, gpus - n * per_node)) for n in range(-(-gpus // per_node)))


class Nodes:
    """Free GPUs per node, in buckets by free count so that each step is ``O(gpus_per_node)``."""

    def __init__(self, capacity: int, gpus_per_node: int) -> None:
        for name, value, least in (("capacity", capacity, 0), ("gpus_per_node", gpus_per_node, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise SpecError(name, value, f"an integer >= {least}")
        self.per_node = gpus_per_node
        self.size: list[int] = []  # GPUs each node has (a drop may shrink one)
        self.free: list[int] = []
        # free count -> nodes with that many free, in insertion order (dicts as ordered sets)
        self.buckets: list[dict[int, None]] = [{} for _ in range(gpus_per_node + 1)]
        self.owed = 0  # GPUs a capacity drop took that were still held
        self.grow(capacity)

    @property
    def capacity(self) -> int:
        return sum(self.size) - self.owed

    def fewest(self, gpus: int) -> int:
        """Nodes ``gpus`` GPUs need at the least: ``ceil(gpus / gpus_per_node)``."""
        return -(-gpus // self.per_node)

    def _set(self, node: int, free: int) -> None:
        del self.buckets[self.free[node]][node]
        self.free[node] = free
        self.buckets[free][node] = None

    def _add_node(self, size: int) -> None:
        node = len(self.size)
        self.size.append(size)
        self.free.append(size)
        self.buckets[size][node] = None

    def place(self, gpus: int) -> Placement:
        """Take ``gpus`` free GPUs on as few nodes as they allow (see the module docstring)."""
        if gpus < 1 or gpus > sum(self.free):
            raise SpecError("gpus", gpus, f"1 to the {sum(self.free)} free GPUs")
        held: list[tuple[int, int]] = []
        remaining = gpus
        while remaining:
            fit = next((f for f in range(remaining, self.per_node + 1) if self.buckets[f]), None)
            if fit is not None and remaining <= self.per_node:
                node, take = next(iter(self.buckets[fit])), remaining
            else:
                most = next(f for f in range(self.per_node, 0, -1) if self.buckets[f])
                node, take = next(iter(self.buckets[most])), most
            self._set(node, self.free[node] - take)
            held.append((node, take))
            remaining -= take
        return tuple(sorted(held))

    def take(self, placement: Placement) -> Placement:
        """Take exactly ``placement``'s GPUs (a policy that places jobs itself, as the Pollux
        reference does); every node must have that many free, else nothing is taken."""
        for node, gpus in placement:
            if not 0 <= node < len(self.free) or not 1 <= gpus <= self.free[node]:
                free = self.free[node] if 0 <= node < len(self.free) else 0
                raise SpecError(f"placement[{node}]", gpus, f"1 to the {free} GPUs free there")
        if len({node for node, _ in placement}) != len(placement):
            raise SpecError("placement", placement, "each node once")
        for node, gpus in placement:
            self._set(node, self.free[node] - gpus)
        return tuple(sorted(placement))

    def release(self, placement: Placement) -> None:
        """Give a placement's GPUs back (paying what a capacity drop still owes first)."""
        for node, gpus in placement:
            repay = min(self.owed, gpus)
            self.owed -= repay
            self.size[node] -= repay
            self._set(node, self.free[node] + gpus - repay)

    def grow(self, gpus: int) -> None:
        """Add ``gpus`` GPUs: repay what is owed, refill shrunk nodes, then new nodes."""
        repay = min(self.owed, gpus)
        self.owed -= repay
        gpus -= repay
        for node, size in enumerate(self.size):
            if gpus and size < self.per_node:
                add = min(self.per_node - size, gpus)
                self.size[node] += add
                self._set(node, self.free[node] + add)
                gpus -= add
        while gpus:
            add = min(self.per_node, gpus)
            self._add_node(add)
            gpus -= add

    def shrink(self, gpus: int) -> None:
        """Remove ``gpus`` GPUs: free ones on the emptiest nodes, the rest owed."""
        while gpus:
            most = next((f for f in range(self.per_node, 0, -1) if self.buckets[f]), None)
            if most is None:
                self.owed += gpus
                return
            node = next(iter(self.buckets[most]))
            take = min(most, gpus)
            self.size[node] -= take
            self._set(node, most - take)
            gpus -= take

    def resize(self, capacity: int) -> None:
        """Change the cluster to ``capacity`` GPUs."""
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise SpecError("capacity", capacity, "an integer >= 0")
        change = capacity - self.capacity
        if change > 0:
            self.grow(change)
        elif change < 0:
            self.shrink(-change)
