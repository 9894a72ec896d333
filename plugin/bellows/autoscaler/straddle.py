"""Counts that would straddle nodes pay for it (issue 29, item 5): a fragmenting count is
priced at the placement it would get, not taken for free.

A caller that knows where the GPUs sit (the simulator with ``--placement nodes``) tells the
core, before a step, the free GPUs of each node and the GPUs each running job holds on each
(:class:`FreeNodes`, a pure value; ``Autoscaler.see_nodes``). A job's *room*
(:func:`rooms`) is the most GPUs it could get on the fewest nodes: the most free on one node,
or all the whole free nodes where that is more, its own GPUs counted free (a move releases
them before the job is placed again). Then, in Bellows mode:

* **Straddling is priced.** A count ``k <= gpus_per_node`` above the room would straddle
  nodes and run at the inter-node link's step time, so its value is scaled by
  ``X(k, b_k, 2 nodes) / X(k, b_k, 1 node)`` (:func:`straddle_ratios`: the JSA's step time
  for that many nodes, at the row's batch for ``k``; :func:`reprice`), and capped at the
  job's best count within the room: GPUs that only come by straddling are worth nothing
  more, since the straddle also leaves two nodes partly held for the jobs after it (priced
  by the step time alone, jobs whose straddle costs 3-5 % took it, and 5-7 % of job-time
  stayed spread on some Pollux workloads). A job with no count within the room (a rigid
  one) is not capped: straddling is all it can do.
* **Beyond a node, whole free nodes.** A count beyond one node that is not whole nodes (6 on
  nodes of 4), or more whole nodes than the room, is not taken while the job has another
  (:func:`whole_nodes`): it would leave nodes partly held, which the JSA's step time does
  not see (beyond one node it is the inter-node link however many nodes).
* **The joint placement.** A round's starts and moves are placed together as the simulator
  places them (:func:`placed_rooms`: movers' GPUs released, then largest first, best fit);
  a job that would find less room than it was priced with is priced with that room and the
  round solves again (a few times at most).
* **Migration.** A running job kept on its count that straddles nodes moves onto one node
  (a restart, at the same count) when the time it gains pays its restart and the joint
  placement has room for it without squeezing another (:func:`migrations`).

A running job's current count is never repriced (it stays where it is). The values stay
per job (separable), so the optimizer stays exact on them. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from bellows.jobs import JobSpec, SpecError
from bellows.scaling import ClusterProfile, step_time

__all__ = [
    "FreeNodes",
    "migrations",
    "placed_rooms",
    "reprice",
    "rooms",
    "straddle_ratios",
    "whole_nodes",
]

F64 = npt.NDArray[np.float64]

Placement = tuple[tuple[int, int], ...]
"""``(node, GPUs)`` for each node a job holds GPUs on (as ``bellows.sim.nodes``)."""


@dataclass(frozen=True)
class FreeNodes:
    """The free GPUs of each node and each running job's GPUs per node, at one instant;
    ``spread``: the jobs of ``held`` on more than one node (``None``: found from ``held``;
    a caller that keeps them passes them, so that a step need not look at every job)."""

    free: tuple[int, ...]
    held: Mapping[str, Placement] = field(default_factory=dict)
    spread: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.spread is None:
            spread = frozenset(name for name, held in self.held.items() if len(held) > 1)
            object.__setattr__(self, "spread", spread)
        for node, gpus in enumerate(self.free):
            if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
                raise SpecError(f"free[{node}]", gpus, "an integer >= 0")
        for name, placement in self.held.items():
            for node, gpus in placement:
                if not 0 <= node < len(self.free) or gpus < 1:
                    raise SpecError(f"held[{name}]", placement, "(node, GPUs >= 1) on known nodes")


class _Free:
    """Free GPUs per node in buckets by count, as ``bellows.sim.nodes.Nodes`` keeps them, so
    that a placement step and a room are ``O(gpus_per_node)``."""

    def __init__(self, free: Sequence[int], gpus_per_node: int) -> None:
        self.g = gpus_per_node
        self.free = list(free)
        self.total = sum(self.free)
        self.buckets: list[dict[int, None]] = [{} for _ in range(gpus_per_node + 1)]
        for node, gpus in enumerate(self.free):
            if gpus > gpus_per_node:
                raise SpecError(f"free[{node}]", gpus, f"at most {gpus_per_node} (a node)")
            self.buckets[gpus][node] = None

    def add(self, node: int, gpus: int) -> None:
        del self.buckets[self.free[node]][node]
        self.free[node] += gpus
        self.total += gpus
        self.buckets[self.free[node]][node] = None

    def most(self) -> int:
        return next((f for f in range(self.g, 0, -1) if self.buckets[f]), 0)

    def room(self) -> int:
        """The most GPUs a job could get on the fewest nodes: the most free on one node, or
        all the whole free nodes where that is more."""
        return max(self.most(), self.g * len(self.buckets[self.g]))

    def take(self, gpus: int) -> None:
        """Place ``gpus`` (at most what is free) as ``Nodes.place`` does."""
        remaining = min(gpus, self.total)
        while remaining:
            fit = None
            if remaining <= self.g:
                fit = next((f for f in range(remaining, self.g + 1) if self.buckets[f]), None)
            take = remaining if fit is not None else self.most()
            node = next(iter(self.buckets[take if fit is None else fit]))
            self.add(node, -take)
            remaining -= take


def rooms(nodes: FreeNodes, names: Sequence[str], gpus_per_node: int) -> npt.NDArray[np.int64]:
    """Each of ``names``' room (the module docstring), its own GPUs counted free."""
    g, free = gpus_per_node, nodes.free
    most = max(free, default=0)
    whole = sum(f == g for f in free)
    out = np.full(len(names), max(most, g * whole), dtype=np.int64)
    for i, name in enumerate(names):
        held = nodes.held.get(name, ())
        if held:
            own = [free[node] + gpus for node, gpus in held]
            more = sum(1 for (node, _), f in zip(held, own, strict=True) if f == g != free[node])
            out[i] = max(most, *own, g * (whole + more))
    return out


def straddle_ratios(job: JobSpec, batch: Sequence[int], cluster: ClusterProfile) -> F64:
    """``[min(g, len(batch)-1) + 1]``: per count ``k`` up to a node, the job's throughput on
    two nodes over one at batch ``batch[k]`` (1 where there is no batch, and at ``k <= 1``)."""
    width = min(cluster.gpus_per_node, len(batch) - 1)
    out = np.ones(width + 1)
    for k in range(2, width + 1):
        if batch[k] > 0:
            one = step_time(job, k, batch[k], cluster, nodes=1)
            out[k] = one / step_time(job, k, batch[k], cluster, nodes=2)
    return out


def reprice(
    values: F64,
    room: npt.NDArray[np.int64],
    ratios: Sequence[F64],
    current: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Scale, in place, each row's counts above its ``room`` (up to a node, the ratios'
    length) by its ``ratios``, and cap them at the best of the counts within the room and
    its ``current`` count (-1: none), which is left as it is; returns the rows changed. The
    cap: GPUs that only come by straddling are worth nothing more (a job with no count
    within the room is not capped: straddling is all it can do)."""
    changed = []
    for i, ratio in enumerate(ratios):
        first, last = int(room[i]) + 1, min(ratio.size, values.shape[1]) - 1
        if first > last:
            continue
        cols = np.arange(first, last + 1)
        cols = cols[(cols != current[i]) & (ratio[cols] < 1.0)]
        if cols.size:
            values[i, cols] *= ratio[cols]
            packed = values[i, 1:first]  # worth within its room, or where it stays
            if first <= current[i] < values.shape[1]:
                packed = np.append(packed, values[i, current[i]])
            if packed.size and np.isfinite(packed).any():
                values[i, cols] = np.minimum(values[i, cols], packed.max())
            changed.append(i)
    return np.array(changed, dtype=np.int64)


def placed_rooms(nodes: FreeNodes, moving: Mapping[str, int], gpus_per_node: int) -> dict[str, int]:
    """The room each of ``moving`` (job -> GPUs it will be placed on) finds when they are
    placed as the simulator places a round's starts and rescales: every one's own GPUs
    released first, then the largest first, each on the fewest nodes the free GPUs allow
    (best fit: a node with room for what is left, the fullest such; else the emptiest gives
    all it has). Its room when its turn comes."""
    free = _Free(nodes.free, gpus_per_node)
    for name in moving:
        for node, gpus in nodes.held.get(name, ()):
            free.add(node, gpus)
    out: dict[str, int] = {}
    for name, k in sorted(moving.items(), key=lambda item: -item[1]):
        out[name] = free.room()
        free.take(k)
    return out


def migrations(
    nodes: FreeNodes,
    moving: Mapping[str, int],
    candidates: Sequence[tuple[str, int]],
    gpus_per_node: int,
) -> list[str]:
    """Which ``candidates`` (straddled running jobs and their GPUs, best gain first) to move
    onto one node, on top of a round's ``moving`` jobs: each in turn if, placed with them
    (:func:`placed_rooms`), it finds room for all its GPUs on one node and every job that
    had room still has it."""
    chosen: list[str] = []
    plan = dict(moving)
    fits = {n for n, room in placed_rooms(nodes, plan, gpus_per_node).items()
            if room >= plan[n] or plan[n] > gpus_per_node}  # fmt: skip
    for name, gpus in candidates:
        trial = {**plan, name: gpus}
        found = placed_rooms(nodes, trial, gpus_per_node)
        if found[name] >= gpus and all(found[n] >= trial[n] or trial[n] > gpus_per_node
                                       for n in fits):  # fmt: skip
            plan = trial
            fits.add(name)
            chosen.append(name)
    return chosen


def whole_nodes(
    values: F64,
    gpus_per_node: int,
    current: npt.NDArray[np.int64],
    room: npt.NDArray[np.int64],
) -> set[int]:
    """Set, in place, each row's counts beyond one node that are not whole nodes (6 on nodes
    of 4), or more whole nodes than its ``room``, to ``-inf``, but not its ``current`` count
    (-1: none), in rows that keep another feasible count; returns the rows changed. Such a
    count leaves nodes partly held, and the JSA prices it as if it did not."""
    k = np.arange(values.shape[1])
    wide = k > gpus_per_node
    if not wide.any():
        return set()
    odd = wide[None, :] & ((k % gpus_per_node != 0)[None, :] | (k[None, :] > room[:, None]))
    drop = odd & np.isfinite(values) & (k[None, :] != current[:, None])
    rows = np.flatnonzero(drop.any(axis=1))
    rows = rows[np.isfinite(np.where(drop[rows], -np.inf, values[rows])[:, 1:]).any(axis=1)]
    values[rows[:, None], k[None, :]] = np.where(drop[rows], -np.inf, values[rows])
    return set(rows.tolist())
