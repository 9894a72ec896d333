"""Throughput and TSF tables for many jobs at once: the JSA's vectorized (NumPy) core.

For each job ``j`` and GPU count ``k`` the elastic policy picks the feasible global batch
``b = k*m`` with the highest throughput ``X(b, k) = b / T(b, k)``; the fixed-batch baseline
runs the owner's ``batch_size`` and charges ``ceil(b/k)`` on the slowest GPU. ``TSF = X/X1``
where ``X1`` is the one-GPU throughput at ``min(b_max, m_max)``.

Which per-GPU batches need evaluating: write ``u(m) = t_proc(m)/m`` and ``v = t_ar(k)``; then
``X = k / (u^g + (v/m)^g)^(1/g)``. Where ``t_proc`` is affine with a non-negative intercept
(and below the first profiled point, and above the last) ``u`` never rises with ``m`` while
``v/m`` falls, so moving right never loses: the best ``m`` is a profiled point, the largest
feasible ``m``, or an integer inside a segment whose intercept is negative (``u`` rising there,
which real profiles show near the memory limit). Only those candidates are evaluated, which
keeps the tables exact (equal to the scalar loop over every feasible batch) and small.
"""

from __future__ import annotations

import collections
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from bellows.jobs import JobSpec, SpecError, StepProfile
from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.profiles import ClusterProfile

# The compiled weighing of candidates (bellows/scaling/_batches.c, built at install where a
# C compiler is at hand): the same operations on the same values and the same choices as the
# NumPy chunks of _best_local_batches, visiting only the candidates inside each k's range.
# Without it (or called with ``compiled=False``) the NumPy chunks run.
_compiled_best: Callable[..., None] | None
try:
    from bellows.scaling._batches import best as _compiled_best
except ImportError:  # pragma: no cover - built wherever the suite runs (test_tables)
    _compiled_best = None

__all__ = [
    "TsfTables",
    "candidate_count",
    "processing_seconds_rows",
    "throughput_table",
    "tsf_tables",
]

_CHUNK_ELEMENTS = 1 << 19  # candidate evaluations weighed at once (~4 MiB an array at most)

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class TsfTables:
    """TSF, chosen batch and throughput per job (row) and GPU count (column, 0..width).

    ``values[j, k]`` is ``TSF_j(k)`` (``-inf`` where no batch is feasible, always in column
    0); ``batch[j, k]`` the global batch that achieves it (0 where infeasible);
    ``throughput[j, k]`` the samples/s there (0 where infeasible). Arrays are read-only.
    ``efficiency[j, k]``, when the tables were built with efficiency profiles, is ``E(b)`` at
    the chosen batch (1 for a job without one; ``None`` when no job had one). ``one[j]``, where
    row ``j`` is a goodput row, is the rate its values are relative to: its best goodput on
    one GPU, in reference samples per second (NaN for other rows, whose values are relative to
    the one-GPU throughput at ``x1_batch``; ``None`` when no row is a goodput row).
    """

    values: F64
    batch: I64
    throughput: F64
    efficiency: F64 | None = None
    one: F64 | None = None

    def __post_init__(self) -> None:
        shape = self.values.shape
        if len(shape) != 2 or shape[1] < 1:
            raise SpecError("values", shape, "a 2-D array [jobs, width+1]")
        names = ("batch", "throughput") + (() if self.efficiency is None else ("efficiency",))
        for name in names:
            if getattr(self, name).shape != shape:
                raise SpecError(name, getattr(self, name).shape, f"shape {shape}")
        if self.one is not None and self.one.shape != shape[:1]:
            raise SpecError("one", self.one.shape, f"shape {shape[:1]}")
        for name in ("values", *names, *(() if self.one is None else ("one",))):
            getattr(self, name).setflags(write=False)

    @property
    def goodput(self) -> F64:
        """Reference samples per second at the chosen batch: ``throughput * efficiency``
        (``throughput`` itself where the tables carry no efficiency)."""
        if self.efficiency is None:
            return self.throughput
        return np.asarray(self.throughput * self.efficiency, dtype=np.float64)

    @property
    def width(self) -> int:
        """Largest GPU count a column stands for."""
        return int(self.values.shape[1] - 1)


@dataclass(frozen=True, eq=False)
class _Knots:
    """Profiles padded to one array: ``[n, P]`` points, the last point repeated as padding."""

    m: F64
    t: F64
    count: I64


def _pack(profiles: Sequence[StepProfile]) -> _Knots:
    width = max(len(p.local_batches) for p in profiles)
    m = np.empty((len(profiles), width))
    t = np.empty((len(profiles), width))
    for j, p in enumerate(profiles):
        size = len(p.local_batches)
        m[j, :size] = p.local_batches
        t[j, :size] = p.seconds
        m[j, size:] = p.local_batches[-1]
        t[j, size:] = p.seconds[-1]
    return _Knots(m, t, np.array([len(p.local_batches) for p in profiles], dtype=np.int64))


def processing_seconds_rows(knots: _Knots, q: F64) -> F64:
    """``t_proc`` of job ``j`` at every per-GPU batch in row ``q[j]``; same rule as the scalar."""
    n = knots.m.shape[0]
    rows = np.arange(n)[:, None]
    first_m, first_t = knots.m[:, :1], knots.t[:, :1]
    last_m = knots.m[np.arange(n), knots.count - 1][:, None]
    last_t = knots.t[np.arange(n), knots.count - 1][:, None]
    below = np.sum(knots.m[:, None, :] <= q[:, :, None], axis=-1) - 1  # [n, Q]
    top = np.maximum(knots.count - 2, 0)[:, None]
    i = np.clip(below, 0, top)
    j = np.minimum(i + 1, (knots.count - 1)[:, None])
    lo_m, hi_m = knots.m[rows, i], knots.m[rows, j]
    lo_t, hi_t = knots.t[rows, i], knots.t[rows, j]
    span = np.where(hi_m > lo_m, hi_m - lo_m, 1.0)
    inside = lo_t + (q - lo_m) / span * (hi_t - lo_t)
    inside = np.where(hi_m > lo_m, inside, lo_t)
    out = np.where(q < first_m, first_t, np.where(q > last_m, last_t * q / last_m, inside))
    return np.asarray(out, dtype=np.float64)


def _allreduce_rows(cluster: ClusterProfile, weights: F64, width: int) -> F64:
    """``t_ar`` for every job (row) and k = 0..width (column); 0 for k <= 1."""
    k = np.arange(width + 1, dtype=np.float64)
    one_node = np.ceil(k / cluster.gpus_per_node) <= 1
    latency = np.where(one_node, cluster.intra_node.latency, cluster.inter_node.latency)
    per_weight = np.where(one_node, cluster.intra_node.per_weight, cluster.inter_node.per_weight)
    steps = np.maximum(k - 1, 0)
    # Same operation order as ClusterProfile.allreduce_seconds, so both agree to the last bit.
    volume = per_weight * weights[:, None] * 2.0 * steps / np.maximum(k, 1)
    return np.asarray(latency * steps + volume, dtype=np.float64)


def _combine(cluster: ClusterProfile, compute: F64, communicate: F64) -> F64:
    g = cluster.overlap
    if g == 1.0:
        return compute + communicate
    mixed = (compute**g + communicate**g) ** (1.0 / g)
    return np.asarray(np.where(communicate > 0, mixed, compute), dtype=np.float64)


@functools.lru_cache(maxsize=4096)  # jobs of one template share a profile and a limit
def _candidates(profile: StepProfile, limit: int) -> tuple[int, ...]:
    """Per-GPU batches (<= limit) that can be best for some k: see the module docstring."""
    ms, ts = profile.local_batches, profile.seconds
    out = {m for m in ms if m <= limit}
    for i in range(len(ms) - 1):
        slope = (ts[i + 1] - ts[i]) / (ms[i + 1] - ms[i])
        if ts[i] - slope * ms[i] < 0:
            out.update(range(ms[i] + 1, min(ms[i + 1], limit + 1)))
    return tuple(sorted(out))


def candidate_count(job: JobSpec) -> int:
    """How many per-GPU batches :func:`tsf_tables` weighs for ``job`` (its elastic cost): a
    table pads every row to its longest, so callers batch jobs of similar counts together."""
    return len(_candidates(job.profile, min(job.m_max, job.b_max))) + 1


def tsf_tables(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    *,
    fixed_batch: bool,
    width: int | None = None,
    efficiency: Sequence[EfficiencyProfile | None] | None = None,
    progress: Sequence[float] | None = None,
    compiled: bool = True,
) -> TsfTables:
    """TSF tables ``[len(jobs), width+1]`` under the elastic policy or the fixed-batch baseline.

    ``width`` defaults to the largest ``k_max``; columns above a job's ``k_max`` are ``-inf``.
    Rigid jobs (``elastic=False``) have one finite entry, at ``(gpus, batch_size)``.

    ``efficiency[j]`` (with ``progress[j]``, the reference samples job ``j`` has made, 0 when
    not given) makes row ``j`` a goodput row: per k the batch maximising ``X * E(b)`` and
    ``values`` that goodput over the job's best one-GPU goodput (``one``). Rows without a profile,
    and every row when ``efficiency`` is ``None`` or all ``None``, are today's, bit for bit.
    ``compiled``: weigh the candidate batches in the compiled loop where it is built
    (``False``: in NumPy chunks, the same bits).
    """
    if efficiency is not None and len(efficiency) != len(jobs):
        raise SpecError("efficiency", f"{len(efficiency)} profiles", f"{len(jobs)}, one per job")
    if progress is not None and len(progress) != len(jobs):
        raise SpecError("progress", f"{len(progress)} values", f"{len(jobs)}, one per job")
    if efficiency is None or all(e is None for e in efficiency):
        return _throughput_tables(
            jobs, cluster, fixed_batch=fixed_batch, width=width, compiled=compiled
        )
    if width is None:
        width = max((job.k_max for job in jobs), default=1)
    return _goodput_tables(
        jobs, cluster, fixed_batch=fixed_batch, width=width, efficiency=efficiency,
        progress=progress, compiled=compiled,
    )  # fmt: skip


def _throughput_tables(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    *,
    fixed_batch: bool,
    width: int | None,
    compiled: bool,
) -> TsfTables:
    """The tables of :func:`tsf_tables` without efficiency (the paper's premise)."""
    if width is None:
        width = max((job.k_max for job in jobs), default=1)
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise SpecError("width", width, "an integer >= 1")
    n = len(jobs)
    if n == 0:
        empty = np.zeros((0, width + 1))
        return TsfTables(empty, np.zeros((0, width + 1), dtype=np.int64), empty.copy())
    knots = _pack([job.profile for job in jobs])
    col = np.arange(width + 1, dtype=np.int64)[None, :]  # [1, width+1]
    k_max = np.array([job.k_max for job in jobs], dtype=np.int64)[:, None]
    m_max = np.array([job.m_max for job in jobs], dtype=np.int64)[:, None]
    tar = _allreduce_rows(cluster, np.array([float(job.weights) for job in jobs]), width)
    x1_batch = np.array([[float(job.x1_batch)] for job in jobs])
    x1 = (x1_batch / processing_seconds_rows(knots, x1_batch))[:, 0]  # [n]

    # Fixed-batch baseline, and every rigid job under either policy: one batch per row.
    fixed_b = np.array([job.batch_size for job in jobs], dtype=np.int64)[:, None]
    local = -(-fixed_b // np.maximum(col, 1))  # [n, width+1] ceil(b/k)
    ok_fixed = (col >= 1) & (col <= k_max) & (col <= fixed_b) & (local <= m_max)
    rigid = np.array([not job.elastic for job in jobs])[:, None]
    gpus = np.array([job.gpus for job in jobs], dtype=np.int64)[:, None]
    ok_fixed = np.where(rigid, col == gpus, ok_fixed)
    t_fixed = _combine(cluster, processing_seconds_rows(knots, local.astype(np.float64)), tar)
    x_fixed = np.where(ok_fixed, fixed_b / t_fixed, 0.0)
    b_fixed = np.where(ok_fixed, fixed_b, 0)
    if fixed_batch:
        return _finish(x_fixed, b_fixed, ok_fixed, x1)

    # Elastic: per k, the best of the candidate per-GPU batches plus the largest feasible one.
    b_min = np.array([job.b_min for job in jobs], dtype=np.int64)[:, None]
    b_max = np.array([job.b_max for job in jobs], dtype=np.int64)[:, None]
    kk = np.maximum(col, 1)
    lo = np.maximum(1, -(-b_min // kk))  # [n, width+1]
    hi = np.minimum(m_max, b_max // kk)
    feasible = (col >= 1) & (col <= k_max) & (lo <= hi)
    x_best, m_best = _best_local_batches(
        jobs, cluster, knots, tar=tar, lo=lo, hi=hi, feasible=feasible, compiled=compiled
    )
    b_best = col * m_best
    x_el = np.where(rigid, x_fixed, np.where(feasible, x_best, 0.0))
    b_el = np.where(rigid, b_fixed, np.where(feasible, b_best, 0))
    return _finish(x_el, b_el, np.where(rigid, ok_fixed, feasible), x1)


def _best_local_batches(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    knots: _Knots,
    *,
    tar: F64,
    lo: I64,
    hi: I64,
    feasible: npt.NDArray[np.bool_],
    compiled: bool,
) -> tuple[F64, I64]:
    """Per job and k, the highest throughput over the candidate per-GPU batches and the
    batch that gives it (the first maximum, as one argmax over every candidate).

    ``t_proc`` depends on the per-GPU batch alone, so it is computed once per job and
    candidate (``[n, c]``) and only the combination with ``t_ar`` runs per GPU count; the
    largest feasible ``m`` (``hi``, one per k) is the last candidate and is weighed after
    the others. Only the candidates inside each k's batch range are weighed: by the compiled
    loop (``_batches.c``, where built), else in NumPy chunks, so that memory stays bounded
    whatever a profile holds (about a quarter of the job x k x candidate block is usable on
    real traces). Every value is the one the scalar rule gives, to the last bit.
    """
    n, columns = lo.shape
    col = np.arange(columns, dtype=np.int64)[None, :]
    lists = [_candidates(job.profile, min(job.m_max, job.b_max)) for job in jobs]
    size = max(len(c) for c in lists)
    cand = np.zeros((n, size), dtype=np.int64)  # 0 pads: never usable (m >= 1)
    for j, c in enumerate(lists):
        cand[j, : len(c)] = c
    t_cand = processing_seconds_rows(knots, np.maximum(cand, 1).astype(np.float64))  # [n, c]
    mix = _Mixer(cluster, tar, t_cand)
    if compiled and _compiled_best is not None:
        x_best = np.full((n, columns), -np.inf)
        m_best = np.zeros((n, columns), dtype=np.int64)
        sizes = np.array([len(c) for c in lists], dtype=np.int64)
        _compiled_best(
            cand, sizes, *(np.ascontiguousarray(a) for a in mix.arrays()),
            np.ascontiguousarray(lo), np.ascontiguousarray(hi), np.ascontiguousarray(feasible),
            mix.g, x_best, m_best,
        )  # fmt: skip
    else:
        x_best, m_best = _weigh_in_chunks(cand, mix, lo=lo, hi=hi, feasible=feasible)
    usable_hi = (hi >= lo) & (hi >= 1) & feasible
    m_hi = np.where(usable_hi, hi, 1).astype(np.float64)  # [n, columns]
    t_hi = processing_seconds_rows(knots, m_hi)
    x_hi = np.where(usable_hi, col * m_hi / _combine(cluster, t_hi, tar), -np.inf)
    better = x_hi > x_best
    return np.where(better, x_hi, x_best), np.where(better, hi, m_best)


def _weigh_in_chunks(
    cand: I64, mix: _Mixer, *, lo: I64, hi: I64, feasible: npt.NDArray[np.bool_]
) -> tuple[F64, I64]:
    """The best rate over the candidates inside each (job, k)'s range and its per-GPU batch
    (``-inf`` and 0 where none is), in NumPy chunks of candidates: the first maximum, as one
    argmax over every candidate would give."""
    n, columns = lo.shape
    size = cand.shape[1]
    x_best = np.full(n * columns, -np.inf)  # [n, columns], flat
    m_best = np.zeros(n * columns, dtype=np.int64)
    chunk = max(1, _CHUNK_ELEMENTS // (n * columns))
    for first in range(0, size, chunk):
        m = cand[:, None, first : first + chunk]  # [n, 1, c]
        usable = (m >= lo[:, :, None]) & (m <= hi[:, :, None]) & (m >= 1) & feasible[:, :, None]
        # only the usable (job, k, candidate) triples (about a quarter on real traces), in
        # (job, k, candidate) order: the same operations on the same values as the whole
        # [n, columns, c] block, where the others were -inf
        job, k, at_c = np.nonzero(usable)
        if job.size == 0:
            continue
        m_used = cand[job, first + at_c]
        t_iter = mix.iteration_at(job, k, first + at_c)
        x = k.astype(np.float64) * m_used.astype(np.float64) / t_iter
        # per (job, k): the first maximum over its candidates (argmax's rule)
        group = job * columns + k
        starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
        peak = np.maximum.reduceat(x, starts)
        hits = np.flatnonzero(x == np.repeat(peak, np.diff(np.r_[starts, x.size])))
        firsts = hits[np.r_[True, group[hits[1:]] != group[hits[:-1]]]]  # one per group
        at = group[starts]
        better = x[firsts] > x_best[at]
        x_best[at[better]] = x[firsts[better]]
        m_best[at[better]] = m_used[firsts[better]]
    return x_best.reshape(n, columns), m_best.reshape(n, columns)


class _Mixer:
    """:func:`_combine` of per-candidate ``t_proc`` (``[n, c]``) with per-k ``t_ar``
    (``[n, k]``) at chosen (job, k, candidate) triples, the powers of each taken once per
    entry before they are gathered (the same operations on the same values: same bits)."""

    def __init__(self, cluster: ClusterProfile, tar: F64, t_cand: F64) -> None:
        self.g = cluster.overlap
        self.tar, self.t_cand = tar, t_cand
        self.tar_g = tar if self.g == 1.0 else tar**self.g
        self.t_cand_g = t_cand if self.g == 1.0 else t_cand**self.g

    def arrays(self) -> tuple[F64, F64, F64, F64]:
        """``t_proc`` at the candidates and its g-th power, ``t_ar`` and its g-th power."""
        return self.t_cand, self.t_cand_g, self.tar, self.tar_g

    def iteration_at(self, job: I64, k: I64, cand: I64) -> F64:
        """:func:`_combine` of ``t_proc`` of job ``job[i]``'s candidate ``cand[i]`` with its
        ``t_ar`` at ``k[i]``."""
        compute = self.t_cand[job, cand]
        tar = self.tar[job, k]
        if self.g == 1.0:
            return np.asarray(compute + tar, dtype=np.float64)
        # float_power: the C library's pow, as the compiled loop calls it (NumPy's power
        # takes SIMD routines where the CPU has them, which differ in the last bit)
        mixed = np.float_power(self.t_cand_g[job, cand] + self.tar_g[job, k], 1.0 / self.g)
        return np.asarray(np.where(tar > 0, mixed, compute), dtype=np.float64)


def _finish(x: F64, b: I64, ok: npt.NDArray[np.bool_], x1: F64) -> TsfTables:
    values = np.where(ok, x / x1[:, None], -np.inf)
    return TsfTables(
        values=np.ascontiguousarray(values, dtype=np.float64),
        batch=np.ascontiguousarray(np.where(ok, b, 0), dtype=np.int64),
        throughput=np.ascontiguousarray(np.where(ok, x, 0.0), dtype=np.float64),
    )


GOODPUT_EXACT = 256  # per-GPU batches up to which a goodput row weighs every integer


def _goodput_tables(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    *,
    fixed_batch: bool,
    width: int,
    efficiency: Sequence[EfficiencyProfile | None],
    progress: Sequence[float] | None,
    compiled: bool = True,
) -> TsfTables:
    """The tables with the rows of jobs that carry an efficiency profile made goodput rows.

    Efficiency falls with the batch while throughput rises, so the best batch may lie
    between the profiled points: every feasible ``m`` of each k is weighed up to
    ``GOODPUT_EXACT``, a fine geometric grid beyond (:func:`_goodput_candidates`), with
    throughput by the same rule as :func:`throughput_table`, for all goodput rows at once
    (:func:`_goodput_rows`). The other rows are :func:`_throughput_tables`' (computed for
    them alone); a fixed-batch or rigid row keeps its batch and its values (E is the same at
    every k), only its efficiency is set.
    """
    n = len(jobs)
    done = [0.0] * n if progress is None else [float(p) for p in progress]
    good = [
        j for j, (job, e) in enumerate(zip(jobs, efficiency, strict=True))
        if e is not None and not fixed_batch and job.elastic
    ]  # fmt: skip
    chosen = set(good)
    rest = [j for j in range(n) if j not in chosen]
    base = _throughput_tables([jobs[j] for j in rest], cluster, fixed_batch=fixed_batch,
                              width=width, compiled=compiled)  # fmt: skip
    values = np.full((n, width + 1), -np.inf)
    batch = np.zeros((n, width + 1), dtype=np.int64)
    rate = np.zeros((n, width + 1))
    gain = np.ones((n, width + 1))
    one = np.full(n, np.nan)
    values[rest], batch[rest], rate[rest] = base.values, base.batch, base.throughput
    for j in rest:
        profile = efficiency[j]
        if profile is not None:
            e = float(profile.efficiency(jobs[j].batch_size, done[j]))
            gain[j] = np.where(batch[j] > 0, e, 1.0)
    if good:
        profiles = [efficiency[j] for j in good]
        rows = _goodput_rows(
            [jobs[j] for j in good], cluster, [p for p in profiles if p is not None],
            [done[j] for j in good], width,
        )  # fmt: skip
        values[good], batch[good], rate[good], gain[good], one[good] = rows
    return TsfTables(values=values, batch=batch, throughput=rate, efficiency=gain, one=one)


@functools.lru_cache(maxsize=4096)
def _goodput_candidates(profile: StepProfile, top: int) -> tuple[int, ...]:
    """Per-GPU batches a goodput row weighs: every ``m <= top`` when ``top <= GOODPUT_EXACT``,
    else the profiled points and ``GOODPUT_EXACT`` geometric steps over ``[1, top]`` (4 %
    apart: goodput is smooth in ``m`` there, so the best of them is within about 0.1 % of
    the best integer)."""
    if top <= GOODPUT_EXACT:
        return tuple(range(1, top + 1))
    grid = np.rint(np.geomspace(1.0, float(top), GOODPUT_EXACT)).astype(np.int64)
    points = np.array([m for m in profile.local_batches if m <= top], dtype=np.int64)
    return tuple(
        np.unique(np.concatenate([grid, points, np.array([top], dtype=np.int64)])).tolist()
    )


def _goodput_rows(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    profiles: Sequence[EfficiencyProfile],
    done: Sequence[float],
    width: int,
) -> tuple[F64, I64, F64, F64, F64]:
    """Goodput rows ``[len(jobs), width+1]``: values, batch, throughput and efficiency, and
    the rate the values are relative to ``[len(jobs)]``.

    Per job and k, the feasible ``b = k*m`` with the highest goodput among the candidates
    (:func:`_goodput_candidates`, plus each k's smallest and largest feasible ``m``; the
    smallest such ``m``); ``values`` that goodput over ``one``, the job's best one-GPU
    goodput (the best feasible, or the goodput at ``x1_batch`` where it is higher or one GPU
    fits no batch). Not at ``x1_batch`` alone: a prior that finds large batches inefficient
    would lower that reference below what one GPU does, and so raise every speedup the row
    states, buying GPUs by pessimism (tests/hostile/test_efficiency_priors.py).

    What does not depend on the progress (each candidate's throughput and the batch's factor
    of the noise scale, a :class:`_Block`) is computed for many jobs at once and kept per
    template (:data:`_BLOCKS`: a job is weighed again at each step of its progress); only
    ``E`` and the choice run per row. The same operations on the same values as one job at a
    time, so the same bits (a seeded test holds them to a job-by-job search).
    """
    n = len(jobs)
    keys = [_block_key(job, cluster, p, width) for job, p in zip(jobs, profiles, strict=True)]
    blocks = {key: _BLOCKS.get(key) for key in keys}
    missing = [j for j, key in enumerate(keys) if blocks[key] is None and keys.index(key) == j]
    lists = {j: _goodput_candidates(jobs[j].profile, min(jobs[j].m_max, jobs[j].b_max))
             for j in missing}  # fmt: skip
    first = 0
    while first < len(missing):
        last, size = first + 1, len(lists[missing[first]])
        while (
            last < len(missing)
            and (last + 1 - first) * width * (max(size, len(lists[missing[last]])) + 2)
            <= _CHUNK_ELEMENTS
        ):
            size = max(size, len(lists[missing[last]]))
            last += 1
        part = missing[first:last]
        made = _blocks(
            [jobs[j] for j in part], cluster, [profiles[j] for j in part],
            [lists[j] for j in part], width=width,
        )  # fmt: skip
        for j, block in zip(part, made, strict=True):
            blocks[keys[j]] = block
            _BLOCKS.put(keys[j], block)
        first = last
    values = np.full((n, width + 1), -np.inf)
    batch = np.zeros((n, width + 1), dtype=np.int64)
    rate = np.zeros((n, width + 1))
    gain = np.ones((n, width + 1))
    one = np.zeros(n)
    for j, key in enumerate(keys):
        found = blocks[key]
        assert found is not None  # every missing block was found above
        row = _choose(found, jobs[j], profiles[j], done[j])
        values[j, 1:], batch[j, 1:], rate[j, 1:], gain[j, 1:], one[j] = row
    return values, batch, rate, gain, one


@dataclass(frozen=True, eq=False)
class _Block:
    """One job's candidates ``[K, c]`` (k = 1..width, candidates, then the k's bounds) and
    what of its goodput does not depend on the progress: ``m``, whether it is feasible
    (``ok``), ``b = k*m``, the throughput ``x``, the batch as E takes it (``bf``, 1 where not
    feasible) and the noise scale's batch factor there; ``x1`` the one-GPU throughput."""

    m: I64
    ok: npt.NDArray[np.bool_]
    b: I64
    x: F64
    bf: F64
    factor: F64
    x1: float

    @property
    def size(self) -> int:
        return int(self.m.size)


def _block_key(
    job: JobSpec, cluster: ClusterProfile, profile: EfficiencyProfile, width: int
) -> tuple[object, ...]:
    """What a :class:`_Block` depends on."""
    return (
        job.profile, job.b_min, job.b_max, job.k_max, job.m_max, job.weights, job.x1_batch,
        cluster, profile.reference_batch, profile.batch_exponent, width,
    )  # fmt: skip


class _Blocks:
    """The most recently used blocks, ``budget`` candidate cells in all (a few MiB)."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.held = 0
        self.blocks: collections.OrderedDict[tuple[object, ...], _Block] = collections.OrderedDict()

    def get(self, key: tuple[object, ...]) -> _Block | None:
        block = self.blocks.get(key)
        if block is not None:
            self.blocks.move_to_end(key)
        return block

    def put(self, key: tuple[object, ...], block: _Block) -> None:
        if block.size > self.budget or key in self.blocks:
            return
        self.blocks[key] = block
        self.held += block.size
        while self.held > self.budget:
            _, old = self.blocks.popitem(last=False)
            self.held -= old.size


_NO_M = np.iinfo(np.int64).max  # above every candidate
_BLOCKS = _Blocks(1 << 20)  # a cache of pure results, like the lru_caches above


def _blocks(
    jobs: Sequence[JobSpec],
    cluster: ClusterProfile,
    profiles: Sequence[EfficiencyProfile],
    lists: Sequence[tuple[int, ...]],
    *,
    width: int,
) -> list[_Block]:
    """The :class:`_Block` of each of a few jobs, computed in one ``[jobs, k, c]`` array."""
    n = len(jobs)
    size = max(len(c) for c in lists)
    cand = np.zeros((n, 1, size), dtype=np.int64)  # 0 pads: never feasible (m >= 1)
    for j, c in enumerate(lists):
        cand[j, 0, : len(c)] = c
    k = np.arange(1, width + 1, dtype=np.int64)[None, :, None]  # [1, K, 1]
    top = _column([min(job.m_max, job.b_max) for job in jobs])
    lo = np.maximum(1, -(-_column([job.b_min for job in jobs]) // k))  # [n, K, 1]
    hi = np.minimum(top, _column([job.b_max for job in jobs]) // k)
    m = np.concatenate([np.broadcast_to(cand, (n, width, size)), lo, hi], axis=2)
    ok = (m >= lo) & (m <= hi) & (m >= 1) & (k <= _column([job.k_max for job in jobs]))
    knots = _pack([job.profile for job in jobs])
    # t_proc depends on m alone: once per candidate and per bound, then laid out as m is
    at_m = np.concatenate([cand[:, 0], lo[..., 0], hi[..., 0]], axis=1).astype(np.float64)
    t_m = processing_seconds_rows(knots, at_m)
    t_proc = np.concatenate(
        [np.broadcast_to(t_m[:, None, :size], (n, width, size)),
         t_m[:, size : size + width, None], t_m[:, size + width :, None]],
        axis=2,
    )  # fmt: skip
    tar = _allreduce_rows(cluster, np.array([float(job.weights) for job in jobs]), width)
    b = k * m
    tar_k = np.ascontiguousarray(tar[:, 1:])[..., None]  # [n, K, 1]
    x = b / _combine(cluster, t_proc, np.broadcast_to(tar_k, b.shape))
    bf = np.asarray(np.where(ok, b, 1), dtype=np.float64)
    factor = np.empty_like(bf)
    groups: dict[tuple[int, float], list[int]] = {}  # rows of one batch factor
    for j, profile in enumerate(profiles):
        groups.setdefault((profile.reference_batch, profile.batch_exponent), []).append(j)
    for rows in groups.values():
        factor[rows] = profiles[rows[0]].batch_factor(np.ascontiguousarray(bf[rows]))
    x1_batch = np.array([[float(job.x1_batch)] for job in jobs])
    t1 = processing_seconds_rows(knots, x1_batch)[:, 0]
    return [
        _Block(m[j].copy(), ok[j].copy(), b[j].copy(), x[j].copy(), bf[j].copy(),
               factor[j].copy(), job.x1_batch / float(t1[j]))
        for j, job in enumerate(jobs)
    ]  # fmt: skip


def _choose(
    block: _Block, job: JobSpec, profile: EfficiencyProfile, done: float
) -> tuple[F64, I64, F64, F64, float]:
    """One goodput row at ``done`` (columns k = 1..width): values, batch, throughput, E,
    and the rate the values are relative to (:func:`_goodput_rows`)."""
    phi = np.asarray(
        profile.at_progress(np.asarray(done, dtype=np.float64)) * block.factor, dtype=np.float64
    )
    e = (phi + profile.reference_batch) / (phi + block.bf)
    good = np.where(block.ok, block.x * e, -np.inf)
    peak = good.max(axis=1, keepdims=True)
    rows = np.arange(good.shape[0])
    at = np.argmin(np.where(block.ok & (good == peak), block.m, _NO_M), axis=1)
    hit = block.ok[rows, at]  # at the smallest m of the best goodput
    x_k = np.where(hit, block.x[rows, at], 0.0)
    b_k = np.where(hit, block.b[rows, at], 0)
    e_k = np.where(hit, e[rows, at], 1.0)
    g1 = max(block.x1 * float(profile.efficiency(job.x1_batch, done)), float(peak[0, 0]))
    ok_k = b_k > 0
    return (
        np.where(ok_k, x_k * e_k / g1, -np.inf), b_k, np.where(ok_k, x_k, 0.0),
        np.where(ok_k, e_k, 1.0), g1,
    )  # fmt: skip


def _column(values: Sequence[int]) -> I64:
    """One integer per job as a ``[n, 1, 1]`` array."""
    return np.array(values, dtype=np.int64)[:, None, None]


def throughput_table(job: JobSpec, cluster: ClusterProfile) -> F64:
    """``X(b, k)`` of one job for every ``b = k*m``: array ``[k_max+1, M+1]`` indexed ``[k, m]``.

    ``M = min(m_max, b_max)``; entries are samples/s where ``(k*m, k)`` is feasible for the
    elastic policy and 0 elsewhere (rigid jobs: only ``(gpus, batch_size)``, indexed at
    ``m = ceil(batch_size/gpus)``).
    """
    top = min(job.m_max, job.b_max)
    k = np.arange(job.k_max + 1, dtype=np.int64)[:, None]
    m = np.arange(top + 1, dtype=np.int64)[None, :]
    if job.elastic:
        ok = (k >= 1) & (m >= 1) & (k * m >= job.b_min) & (k * m <= job.b_max)
        batch = k * m
    else:
        ok = (k == job.gpus) & (m == math.ceil(job.batch_size / job.gpus))
        batch = np.full_like(k * m, job.batch_size)
    knots = _pack([job.profile])
    grid_m = np.broadcast_to(np.maximum(m, 1), ok.shape).astype(np.float64)
    t_proc = processing_seconds_rows(knots, grid_m.reshape(1, -1)).reshape(ok.shape)
    tar = _allreduce_rows(cluster, np.array([float(job.weights)]), job.k_max)[0][:, None]
    t_iter = _combine(cluster, t_proc, np.broadcast_to(tar, t_proc.shape))
    return np.asarray(np.where(ok, batch / t_iter, 0.0), dtype=np.float64)
