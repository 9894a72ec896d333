"""What a step's optimizer maximises: the jobs' rows priced for restarts, nodes and the
objective.

:class:`Pricing` gathers the rows of a round's or a fill's jobs into arrays and prices them
(:mod:`bellows.autoscaler.pricing`): each running job's moves by its restart cost (times the
hysteresis, dearer with each move it made), the counts that would straddle nodes at their
step time there (:mod:`bellows.autoscaler.straddle`, Bellows mode on nodes), and the terms
of the configured objective (:mod:`bellows.autoscaler.objectives`); it also names the
straddled running jobs whose move onto one node pays (:meth:`Pricing.paying_migrations`). Pure:
it reads the core's state, and writes only its own caches (``ratios``, ``squeezed``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bellows.autoscaler.config import AutoscalerConfig, restart_s, restart_s_each
from bellows.autoscaler.objectives import Objective, objective_values, shared_remaining, slack
from bellows.autoscaler.pricing import exact, kept, priced
from bellows.autoscaler.progress import RunningJob, done_at_all, shown_left, work_left
from bellows.autoscaler.rows import stacked, template
from bellows.autoscaler.state import State
from bellows.autoscaler.straddle import (
    FreeNodes,
    migrations,
    placed_rooms,
    reprice,
    rooms,
    straddle_ratios,
    whole_nodes,
)
from bellows.scaling import ClusterProfile

__all__ = ["Pricing"]


@dataclass
class Pricing:
    """What one step prices its jobs' rows with (the core makes one per optimization)."""

    s: State
    config: AutoscalerConfig
    cluster: ClusterProfile
    capacity: int
    nodes: FreeNodes | None  # where GPUs sit (Bellows mode); None: all on the fewest nodes
    squeezed: dict[str, int]  # job -> its room in this round's placement (restraddled)
    ratios: dict[tuple[object, ...], np.ndarray]  # straddle ratios by what they depend on
    need: int  # GPUs the running and admitted jobs need at their smallest (Objective.SLACK)
    every_exact: bool  # every row on the exact grid afresh (the core without shortcuts)

    def values(
        self, names: Sequence[str], capacity: int, now: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """Values ``[jobs, width+1]`` (restarts priced), and the same on the exact grid with
        each running job's current k kept on a tie (:func:`exact`): what the DP maximises.

        The rows are gathered in whole arrays (:func:`stacked`), and the running jobs'
        progress and prices computed in whole arrays: a round over a hundred running jobs
        costs a few array operations, not a hundred rounds of Python. Grid rows are computed
        once per TSF row; only priced rows go on the grid here."""
        s = self.s
        rows = [s.rows[n] for n in names]
        width = max(1, min(capacity, max(s.jobs[n].k_max for n in names)))
        lengths = np.array([row.values.size for row in rows], dtype=np.int64)  # rate, grid: same
        values = stacked([row.values for row in rows], lengths, width, -np.inf)
        graded = stacked([row.grid for row in rows], lengths, width, -np.inf)
        runs = [s.running.get(n) for n in names]
        held = [i for i, run in enumerate(runs) if run is not None]
        if not held:
            self.straddled(names, values, graded, runs)
            return self.objective(names, values, graded, runs, now)
        at = np.array(held, dtype=np.int64)
        running = [run for run in runs if run is not None]
        gpus = np.array([run.allocation.gpus for run in running], dtype=np.int64)
        keep = np.where(gpus <= width, gpus, -1)
        hold = max(1.0, self.config.hysteresis)
        penalty = np.array(restart_s_each([s.jobs[names[i]] for i in held], self.config))
        penalty *= hold
        if self.config.restart_growth:  # each earlier move makes the next one dearer
            moved_before = np.array([s.moves.get(names[i], 0) for i in held], dtype=np.float64)
            penalty *= 1.0 + self.config.restart_growth * moved_before
        moving = penalty > 0
        if moving.any():
            work = np.array([s.jobs[names[i]].work for i in held])
            left = shown_left(work, done_at_all(running, now), running)  # the pace it showed
            priced_at = at[moving]
            moved = [rows[i] for i in priced_at.tolist()]
            values[priced_at] = priced(
                values[priced_at],
                stacked([row.rate for row in moved], lengths[priced_at], width, 0.0),
                current=gpus[moving],
                remaining=left[moving],
                restart_s=penalty[moving],
                x1=np.array([row.x1 for row in moved]),
            )
            graded[priced_at] = exact(values[priced_at], np.full(priced_at.size, -1, np.int64))
        kept(graded, at, keep)
        self.straddled(names, values, graded, runs)
        if self.every_exact:
            every = np.full(len(names), -1, dtype=np.int64)
            every[at] = keep
            graded = exact(values, every)
        return self.objective(names, values, graded, runs, now)

    def straddled(
        self,
        names: Sequence[str],
        values: np.ndarray,
        graded: np.ndarray,
        runs: Sequence[RunningJob | None],
    ) -> None:
        """Counts that would straddle nodes priced at their step time there, in place, on the
        grid too (``Autoscaler.see_nodes``; Bellows mode only)."""
        if self.nodes is None:
            return
        ratios = [self.ratio(name) for name in names]
        now = np.array([-1 if r is None else r.allocation.gpus for r in runs], dtype=np.int64)
        room = rooms(self.nodes, names, self.cluster.gpus_per_node)
        if self.squeezed:
            room = np.minimum(room, [self.squeezed.get(n, self.capacity) for n in names])
        whole = whole_nodes(values, self.cluster.gpus_per_node, now, room)
        changed = np.array(sorted(whole.union(reprice(values, room, ratios, now).tolist())))
        if changed.size:
            keep = np.where(now[changed] < values.shape[1], now[changed], -1)
            graded[changed] = exact(values[changed], keep)

    def ratio(self, name: str) -> np.ndarray:
        """The job's :func:`straddle_ratios`, cached by what they depend on."""
        job, row = self.s.jobs[name], self.s.rows[name]
        key = (job.weights, job.profile, row.batch[: self.cluster.gpus_per_node + 1])
        ratio = self.ratios.get(key)
        if ratio is None:
            ratio = self.ratios[key] = straddle_ratios(job, row.batch, self.cluster)
        return ratio

    def with_migrations(
        self, gpus: Mapping[str, int], now: float, *, fill: bool
    ) -> tuple[dict[str, int], frozenset[str]]:
        """``gpus`` and the :meth:`paying_migrations` at the counts their jobs hold (in gain
        order: deterministic), and the jobs that migrate."""
        moved = self.paying_migrations(gpus, now, fill=fill)
        running = self.s.running
        moves = {n: running[n].allocation.gpus for n in moved}
        return {**gpus, **moves}, frozenset(moved)

    def paying_migrations(
        self, gpus: Mapping[str, int], now: float, *, fill: bool
    ) -> tuple[str, ...]:
        """Running jobs kept on their count (in ``gpus``, or any in a fill) that straddle
        nodes and would sit on one node after the step's moves, where the time that gains
        pays their restart: they move (a rescale to the same GPUs: a restart onto one node;
        ``Autoscaler.see_nodes``), best gain first. An ordered tuple, not a set: the simulator
        places equal GPU counts in decision order, and a set's would follow the hash seed."""
        nodes = self.nodes
        assert nodes is not None  # the core asks only when it saw nodes (Bellows mode)
        s, g = self.s, self.cluster.gpus_per_node
        hold = max(1.0, self.config.hysteresis)
        moving = self.moving(gpus)
        gains: list[tuple[float, str, int]] = []
        for name in nodes.spread or ():
            run = s.running.get(name)
            if run is None or name in moving:
                continue
            k = run.allocation.gpus
            if k > g or not (fill or name in gpus):
                continue
            left = float(work_left(s.jobs[name].work, run.done_at(now)))
            rate = float(s.rows[name].rate[k])
            slower = left / (rate * float(self.ratio(name)[k])) - left / rate
            if slower > restart_s(s.jobs[name], self.config) * hold:
                gains.append((slower, name, k))
        if not gains:
            return ()
        best = [(name, k) for _, name, k in sorted(gains, reverse=True)]
        return tuple(migrations(nodes, moving, best, g))

    def moving(self, gpus: Mapping[str, int]) -> dict[str, int]:
        """The jobs of ``gpus`` the step starts or gives another count, with that count."""
        running = self.s.running
        return {name: k for name, k in gpus.items()
                if (run := running.get(name)) is None or run.allocation.gpus != k}  # fmt: skip

    def restraddled(self, gpus: Mapping[str, int]) -> bool:
        """Whether placing the jobs that ``gpus`` starts or moves, as the simulator places
        them, leaves one of them less room than it was priced with, below a node's worth
        (it would straddle): it is then priced with that room (:meth:`straddled`), and the
        round solves again."""
        if self.nodes is None:
            return False
        g = self.cluster.gpus_per_node
        moving = self.moving(gpus)
        found = placed_rooms(self.nodes, moving, g)
        squeezed = False
        for name, room in found.items():
            if room < moving[name] and room < self.squeezed.get(name, self.capacity + 1):
                self.squeezed[name] = room
                squeezed = True
        return squeezed

    def objective(
        self,
        names: Sequence[str],
        values: np.ndarray,
        graded: np.ndarray,
        runs: Sequence[RunningJob | None],
        now: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The priced speedups as the terms of the configured objective
        (:mod:`bellows.autoscaler.objectives`) and on the exact grid, each running job's
        current k kept on a tie; the sum of speedups as it is."""
        objective = self.config.objective
        share = slack(self.need, self.capacity) if objective is Objective.SLACK else 1.0
        if objective is Objective.SPEEDUP or share == 0.0:
            return values, graded
        s = self.s
        remaining = None
        if objective is not Objective.FAIR:
            done = [s.carried.get(n, 0.0) if r is None else r.done_at(now)
                    for n, r in zip(names, runs, strict=True)]  # fmt: skip
            work = np.array([s.jobs[n].work for n in names])
            rate = np.array([s.rows[n].x1 for n in names])
            remaining = shown_left(work, done, runs) / rate  # at the pace each job showed
            kinds: dict[tuple[object, ...], int] = {}  # running jobs of a template: one weight
            groups = np.full(len(names), -1, dtype=np.int64)
            for i, (name, run) in enumerate(zip(names, runs, strict=True)):
                if run is not None:
                    groups[i] = kinds.setdefault(template(s.jobs[name]), len(kinds))
            remaining = shared_remaining(remaining, groups)
        terms = objective_values(
            values, objective, remaining, share=share, exponent=self.config.remaining_exponent
        )
        keep = np.array([-1 if r is None or r.allocation.gpus >= terms.shape[1]
                         else r.allocation.gpus for r in runs], dtype=np.int64)  # fmt: skip
        return terms, exact(terms, keep)
