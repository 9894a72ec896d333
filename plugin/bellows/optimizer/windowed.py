"""The lean NumPy engine: band bounds, per-layer windows, and a windowed DP with compact choices.

What ``method="numpy"`` runs, and so what the live controller runs: it never imports JAX
(whose import alone costs ~125 MiB of RSS). It returns exactly what
:func:`bellows.optimizer.reference.solve_reference` returns (same allocation, same objective,
same ties) in a fraction of its time and memory:

* **Bounds** (:func:`band_bounds`): a NumPy port of :func:`bellows.optimizer.kernels.make_bands`
  (the same Lagrangian argument, multipliers and margin; see its docstring): every state
  ``(j, g)`` (rows ``0..j`` using ``g`` GPUs) of every optimal allocation has
  ``low_j <= g <= high_j``.
* **Windows** (:func:`windows`): those bounds widened by one GPU each side, as
  :func:`bellows.optimizer.kernels.make_banded` does, and intersected with reachability (rows
  ``0..j`` use at least the sum of their smallest counts, at most the sum of their largest,
  and leave the later rows their smallest counts). Without bounds (small tables, where they
  cost more than they save, or bounds that contradict themselves from float trouble) the
  window is the reachable range: the dense DP, less states no optimal path can visit.
* **DP** (:func:`solve_windowed`): ``E_j(g) = max_k E_{j-1}(g-k) + values[j, k]`` for ``g``
  in layer ``j``'s window only (``-inf`` outside), with two float rows alive. For each state it
  keeps the *choice*, the smallest ``k`` attaining the max, as one byte (two when
  ``k_max >= 256``), not the float: the backtrack reads one choice per row.

Why it is exact: a state on an optimal allocation has, as ``E_j(g)``, the value of a prefix
whose states are on an optimal allocation too, so inside the windows; its windowed ``E_j(g)``
is the dense one (the same float additions in the same order), and every other candidate is
at most its dense value. So the first maximum of the last layer (the fewest GPUs in total)
and the smallest maximizing ``k`` of every state on the backtrack are the dense DP's, bit for
bit. A cheap guard besides: if the windowed optimum is below the bounds' feasible value (less
the margin) or its backtrack leaves a window, which a band missing the optimum (rounding
beyond the 1e-9 margin) may cause, the DP reruns on the reachable windows.

**A layer** is a ``[width, ks]`` block of candidates ``E_{j-1}(g - k) + values[j, k]``: a
strided view of the previous row (no copy) plus the value row, over only the counts that are
finite for the row and reach the previous window. Its ``argmax`` along ``ks`` is the first
maximum, i.e. the smallest ``k``, which is what ``where(c > best)`` gives (only strictly
better replaces); the maxima are gathered from it. Wide windows over few counts use the
transposed ``[ks, width]`` block instead (contiguous rows: max, then the first ``k`` equal to
it), which is faster there. Per layer it is a handful of NumPy calls, which is the cost on the
narrow bands of real tables; see ``docs/optimizer.md`` for the figures.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import as_strided

from bellows.optimizer.errors import Counts, Values, finite_counts

# The compiled layers (bellows/optimizer/_windowed.c, built at install where a C compiler is
# at hand): the same DP and backtrack, bit for bit, without a NumPy call per layer. Without
# them (or called with ``compiled=False``) the NumPy layers of _Dp run.
_Run = Callable[..., tuple[bool, float]]
_compiled_run: _Run | None
try:
    from bellows.optimizer._windowed import run as _compiled_run
except ImportError:  # pragma: no cover - built wherever the suite runs (test_compiled_layers)
    _compiled_run = None

__all__ = [
    "BANDS_FROM",
    "Windows",
    "band_bounds",
    "best_count",
    "choice_dtype",
    "solve_windowed",
    "windows",
]

Row = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Index = npt.NDArray[np.intp]

# The bounds cost ~50 passes over the table; below this many reachable DP cells (window
# widths times columns, summed) the plain reachable windows are as fast (measured).
BANDS_FROM = 400_000
# Tables up to this many cells evaluate every row at every multiplier (see _Tilts).
SMALL_TABLE = 8192
# Elements of one candidate block (a layer is cut into blocks of at most this many).
CHUNK = 1 << 16
# Choices are staged as intp (what argmax writes) and cast to the compact type in bulk.
STAGE = 1 << 14
# From this window width a layer gathers its maxima from the argmax instead of reducing again.
GATHER_FROM = 8
# Row offsets kept per block shape for the gather, at most this many in all (~0.5 MiB).
FIRSTS_KEPT = 1 << 16
# Layers at least this many times wider than their counts use the transposed block, if
# they are over at most TRANSPOSE_SPAN counts or at least TRANSPOSE_WIDE wide: in between
# its six calls cost more than the [width, ks] block's three (the 400-GPU bursty replay's
# DPs, widths up to 400 over 9 counts: 0.80 -> 0.63 s; at 4 000 GPUs it wins, 79 vs 105 ms).
TRANSPOSE_FROM = 16
TRANSPOSE_SPAN = 4
TRANSPOSE_WIDE = 2048
# ndarray.max goes through two Python wrappers to reach this very ufunc reduction; a layer
# calls it once, ~300 000 times in a long replay (issue 11)
_MAX = np.maximum.reduce


def choice_dtype(k_max: int) -> type[np.unsignedinteger[Any]]:
    """The smallest unsigned integer type that holds every count ``0..k_max``."""
    if k_max <= 0xFF:
        return np.uint8
    if k_max <= 0xFFFF:
        return np.uint16
    return np.uint32


class _Tilts:
    """Lagrangian choices and maxima of a table's rows at given multipliers.

    A row's choice ``k(lam)`` (the smallest ``k`` maximizing ``values[k] - lam*k``) does not
    grow with ``lam``, so a row whose choices at two multipliers agree makes that choice at
    every multiplier between them: only the other rows are evaluated there. The bisection and
    the multipliers ``lam*(1 +- 2**-i)`` nest that way, which saves most passes over the table.
    """

    def __init__(self, rows: Values) -> None:
        self.rows = rows
        self.ks = np.arange(rows.shape[1], dtype=np.float64)
        self.every = np.arange(rows.shape[0])
        self.buffer = np.empty_like(rows)

    def choose(self, lam: float, left: Index, right: Index) -> Index:
        """Choices at ``lam``, given those at a multiplier ``<= lam`` (left) and ``>=`` (right)."""
        chosen = right.copy()
        # on a small table telling the rows apart costs more than evaluating them all
        small = self.rows.size <= SMALL_TABLE
        moving = self.every if small else np.flatnonzero(left != right)
        if moving.size > 0.75 * chosen.size:  # most rows: no gather
            np.subtract(self.rows, lam * self.ks, out=self.buffer)
            self.buffer.argmax(axis=1, out=chosen)
        elif moving.size:
            tilted = self.buffer[: moving.size]
            np.take(self.rows, moving, axis=0, out=tilted)
            np.subtract(tilted, lam * self.ks, out=tilted)
            chosen[moving] = tilted.argmax(axis=1)  # first maximum: the smallest k
        return chosen

    def maxima(self, lam: float, chosen: Index) -> Row:
        """``D_i(lam) = max_k values[i, k] - lam * k``, from the choices at ``lam``."""
        maxima: Row = self.rows[self.every, chosen] - lam * self.ks[chosen]
        return maxima


def band_bounds(
    rows: Values, capacity: int, margin: float, *, steps: int = 16, fine: int = 12
) -> tuple[Row, Row, float]:
    """``(low, high, lower_bound)``: real limits on ``g`` per row, and a feasible value.

    The NumPy port of :func:`bellows.optimizer.kernels.make_bands` (the same multipliers and
    the same argument): every state ``(j, g)`` of every allocation worth at least
    ``lower_bound - margin`` has ``low[j] <= g <= high[j]``; ``lower_bound`` is the value of
    the Lagrangian allocation at the dual optimum ``lam*``, which fits. Every row must have a
    finite column and the rows' smallest counts must fit in ``capacity``.
    """
    tilts = _Tilts(rows)
    least = np.argmax(np.isfinite(rows), axis=1)  # the choice at lam = steep
    at_zero = np.argmax(rows, axis=1)  # the choice at lam = 0
    bottom = np.min(np.where(np.isfinite(rows), rows, np.inf), axis=1)
    steep = float(np.max(np.max(rows, axis=1) - bottom)) + 1.0  # every row at its fewest
    star, at_star = 0.0, at_zero  # lam* = 0 when capacity does not bind
    if int(at_zero.sum()) > capacity:  # geometric bisection:
        low_exp, high_exp = -40.0, 0.0  # usage(steep*2**low) > capacity >= usage(steep*2**high)
        left, right = at_zero, least
        for _ in range(steps):
            mid = 0.5 * (low_exp + high_exp)
            chosen = tilts.choose(steep * 2.0**mid, left, right)
            if int(chosen.sum()) <= capacity:
                high_exp, right = mid, chosen
            else:
                low_exp, left = mid, chosen
        star, at_star = steep * 2.0**high_exp, right
    lower_bound = float(rows[tilts.every, at_star].sum())
    scale = 2.0 ** -np.arange(1, fine + 1, dtype=np.float64)
    above = np.concatenate([[star], star * (1.0 + scale), [star * 2.0, steep]])
    below = np.concatenate([[star], star * (1.0 - scale), [0.0]])
    d_above = np.empty((above.size, rows.shape[0]))  # D_i(lam), one row per multiplier
    d_below = np.empty((below.size, rows.shape[0]))
    d_above[0] = d_below[0] = tilts.maxima(star, at_star)
    d_above[-1] = tilts.maxima(steep, least)
    d_below[-1] = tilts.maxima(0.0, at_zero)
    outer = tilts.choose(star * 2.0, at_star, least)
    d_above[-2] = tilts.maxima(star * 2.0, outer)
    inner = at_zero
    for i in range(1, fine + 1):  # towards lam* from both sides: nested brackets
        outer = tilts.choose(float(above[i]), at_star, outer)
        d_above[i] = tilts.maxima(float(above[i]), outer)
        inner = tilts.choose(float(below[i]), inner, at_star)
        d_below[i] = tilts.maxima(float(below[i]), inner)
    low, high = _limits(
        (above, d_above), (below, d_below), capacity=capacity, need=lower_bound - margin
    )
    return low, high, lower_bound


def _limits(
    above: tuple[Row, Values], below: tuple[Row, Values], *, capacity: int, need: float
) -> tuple[Row, Row]:
    """The limits on ``g`` from every pair of multipliers ``lam`` (above) ``> mu`` (below).

    With ``head_j`` the sum of ``D`` over rows ``0..j`` and ``tail_j`` that over the later
    rows plus the multiplier times ``capacity``: ``(lam - mu) g >= need - head_j(lam) -
    tail_j(mu)`` bounds ``g`` below, ``(mu - lam) g >= need - head_j(mu) - tail_j(lam)`` above.
    """
    (lam, d_lam), (mu, d_mu) = above, below
    head_lam = np.cumsum(d_lam, axis=1)  # [multipliers, jobs]: rows 0..j
    head_mu = np.cumsum(d_mu, axis=1)
    tail_lam = d_lam.sum(axis=1)[:, None] - head_lam + (lam * float(capacity))[:, None]
    tail_mu = d_mu.sum(axis=1)[:, None] - head_mu + (mu * float(capacity))[:, None]
    slope = lam[:, None] - mu[None, :]  # [above, below]
    pairs = (slope > 0)[:, :, None]
    slope = np.where(slope > 0, slope, 1.0)[:, :, None]
    jobs = d_lam.shape[1]
    low = np.empty(jobs)
    high = np.empty(jobs)
    step = max(1, CHUNK // slope.size)
    for c0 in range(0, jobs, step):
        c = slice(c0, min(jobs, c0 + step))
        ratio = (need - tail_mu[:, c])[None] - head_lam[:, None, c]  # [above, below, rows]
        ratio /= slope
        np.copyto(ratio, -np.inf, where=~pairs)
        ratio.max(axis=(0, 1), out=low[c])
        ratio = (need - head_mu[:, c])[None] - tail_lam[:, None, c]
        ratio /= -slope
        np.copyto(ratio, np.inf, where=~pairs)
        ratio.min(axis=(0, 1), out=high[c])
    return low, high


class Windows(NamedTuple):
    """Per-layer windows and the value they assume.

    ``lo[j]..hi[j]``: the GPUs rows ``0..j`` may use. Every optimal allocation's states lie
    inside when the optimum is at least ``floor`` (``-inf`` without bounds; with them, the
    value of a feasible allocation less the margin, so always, barring float trouble).
    """

    lo: Ints
    hi: Ints
    floor: float


def windows(rows: Values, capacity: int, *, bands: bool | None = None) -> Windows:
    """The windows of :func:`solve_windowed`; ``bands`` as there.

    Every row must have a finite column and their smallest counts must fit in ``capacity``.
    """
    return _windows(rows, capacity, finite_counts(rows), bands=bands)


def _windows(
    rows: Values, capacity: int, counts: tuple[Ints, Ints], *, bands: bool | None
) -> Windows:
    least, most = counts
    used_min = np.cumsum(least)  # rows 0..j use at least this
    used_max = np.cumsum(most)  # ... and at most this
    after_min = used_min[-1] - used_min  # the later rows need at least this
    lo = used_min
    hi = np.minimum(used_max, capacity - after_min)
    if bands is None:
        bands = int((hi - lo + 1).sum()) * rows.shape[1] >= BANDS_FROM
    if not bands:
        return Windows(lo, hi, -np.inf)
    finite = np.isfinite(rows)
    # rounding in the bound sums is ~jobs * 1e-16 of this; 1e-9 is far on the safe side
    margin = 1e-9 * (1.0 + float(np.max(np.where(finite, np.abs(rows), 0.0), axis=1).sum()))
    with np.errstate(invalid="ignore", over="ignore"):
        low, high, lower_bound = band_bounds(rows, capacity, margin)
    low = np.where(np.isnan(low), -np.inf, low)  # NaN (sums overflowing) bounds nothing
    high = np.where(np.isnan(high), np.inf, high)
    top = float(capacity) + 1.0
    band_lo = np.maximum(np.ceil(np.clip(low, -1.0, top)).astype(np.int64) - 1, lo)
    band_hi = np.minimum(np.floor(np.clip(high, -1.0, top)).astype(np.int64) + 1, hi)
    if not np.isfinite(lower_bound) or (band_lo > band_hi).any():
        return Windows(lo, hi, -np.inf)  # float trouble: no band, still exact
    return Windows(band_lo, band_hi, lower_bound - margin)


def solve_windowed(
    rows: Values,
    capacity: int,
    *,
    bands: bool | None = None,
    counts: Counts | None = None,
    compiled: bool = True,
) -> tuple[Ints, float]:
    """Optimal allocation of validated, feasible ``rows`` and its objective (the DP's sum).

    Equal, bit for bit, to :func:`bellows.optimizer.reference.solve_reference`. ``bands``:
    narrow the windows with :func:`band_bounds` (True), keep the reachable ranges (False), or
    by size (None: bounds from :data:`BANDS_FROM` reachable cells). Every row must have a
    finite column and the rows' smallest counts must fit in ``capacity`` (the caller checks;
    raising :class:`~bellows.optimizer.errors.Infeasible` is theirs). ``counts``: the rows'
    :func:`~bellows.optimizer.errors.finite_counts`, if the caller has them. ``compiled``:
    run the compiled layers where they are built (``False``: the NumPy layers, the same bits).
    """
    jobs = rows.shape[0]
    if jobs == 0:
        return np.zeros(0, dtype=np.int64), 0.0
    least, most = finite_counts(rows) if counts is None else counts
    capacity = min(capacity, int(most.sum()))  # GPUs beyond every row's largest count: idle
    if jobs == 1:  # most fills of a simulation (issue 11): the DP's one layer, directly
        return _one_row(rows[0], int(least[0]), capacity)
    window = _windows(rows, capacity, (least, most), bands=bands)
    solved = _solve(rows, capacity, window, least, most, compiled=compiled)
    if window.floor > -np.inf and (solved is None or solved[1] < window.floor):
        # the optimum left the band (rounding beyond the margin): again, without it
        reach = _windows(rows, capacity, (least, most), bands=False)
        solved = _solve(rows, capacity, reach, least, most, compiled=compiled)
    if solved is None:  # pragma: no cover - the reachable windows hold every feasible path
        raise AssertionError("the windowed DP lost every allocation of a feasible table")
    return solved


def best_count(row: Row, least: int, capacity: int) -> int:
    """What the DP gives a table of one row: its first largest value over
    ``least..capacity`` (the fewest GPUs on a tie). ``least`` is the row's smallest finite
    column and must be at most ``capacity``; columns past the row are not allowed."""
    return least + int(np.argmax(row[least : capacity + 1]))


def _one_row(row: Row, least: int, capacity: int) -> tuple[Ints, float]:
    """The DP's one layer: :func:`best_count`, its value added to the empty prefix's 0.0."""
    k = best_count(row, least, capacity)
    return np.array([k], dtype=np.int64), float(row[k] + 0.0)


class _Layers(NamedTuple):
    """What the DP's layers share, compiled or not: per layer its window, where its choices
    start, and the counts it tries (finite for the row, reaching the previous window)."""

    lo: Ints
    hi: Ints
    firsts: Ints
    lasts: Ints
    starts: Ints  # [jobs + 1]


def _layers(window: Windows, least: Ints, most: Ints) -> _Layers:
    lo = np.ascontiguousarray(window.lo, dtype=np.int64)
    hi = np.ascontiguousarray(window.hi, dtype=np.int64)
    starts = np.zeros(lo.size + 1, dtype=np.int64)
    np.cumsum(hi - lo + 1, out=starts[1:])
    prev_lo = np.concatenate([[0], lo[:-1]])
    prev_hi = np.concatenate([[0], hi[:-1]])
    firsts = np.maximum(least, lo - prev_hi)
    lasts = np.minimum(most, hi - prev_lo)
    return _Layers(lo, hi, firsts, lasts, starts)


def _solve(
    rows: Values, capacity: int, window: Windows, least: Ints, most: Ints, *, compiled: bool
) -> tuple[Ints, float] | None:
    """The windowed DP and its backtrack: compiled where built (and ``compiled``), else in
    NumPy layers."""
    layers = _layers(window, least, most)
    if not compiled or _compiled_run is None:
        return _Dp(rows, capacity, layers, most).run()
    # what each state keeps: its choice less the row's first count, compact
    choices = np.empty(int(layers.starts[-1]), dtype=choice_dtype(int(most.max())))
    gpus = np.empty(rows.shape[0], dtype=np.int64)
    table = np.ascontiguousarray(rows, dtype=np.float64)
    found, objective = _compiled_run(table, *layers, choices, gpus)  # the order of run()
    return (gpus, objective) if found else None


class _Dp:
    """The windowed DP over ``rows`` and its backtrack in NumPy layers (see the module
    docstring): what runs where the compiled layers are not built."""

    def __init__(self, rows: Values, capacity: int, layers: _Layers, most: Ints) -> None:
        lo, hi = layers.lo, layers.hi
        self.rows = rows
        self.lo, self.hi = lo, hi
        widths = hi - lo + 1
        self.starts = layers.starts  # each layer's choices
        self.firsts, self.lasts = layers.firsts, layers.lasts
        # what each state keeps: its choice less the row's first count, compact
        self.choices = np.zeros(int(self.starts[-1]), dtype=choice_dtype(int(most.max())))
        cols = rows.shape[1]
        self.pad = cols - 1  # E_j(g) lives at [g + pad]: reads reach down to g - k_max
        size = capacity + 1 + self.pad
        self.buffers = (np.full(size, -np.inf), np.full(size, -np.inf))
        step = self.buffers[0].itemsize
        # by_rows[i][x, m] = by_ks[i][m, x] = buffers[i][x - m]: m counts back from x (the
        # DP reads only x - m >= 0); views, never written through
        self.by_rows = [
            as_strided(buf, (size, cols), (step, -step), writeable=False) for buf in self.buffers
        ]
        self.by_ks: dict[int, Values] = {}  # made when a layer first needs one
        widest = int(widths.max())
        self.scratch = np.empty(min(widest * cols, max(CHUNK, cols)))
        self.stage = np.empty(max(STAGE, widest), dtype=np.intp)  # choices not yet cast
        self.ramp = np.arange(min(widest, self.scratch.size), dtype=np.intp)
        self.flat = np.empty_like(self.ramp)
        weight_type = choice_dtype(cols)
        self.weights = np.arange(cols, 0, -1, dtype=weight_type)  # [cols - span + m]: span - m
        self.equal = np.empty(self.scratch.size, dtype=np.bool_)
        self.weighted = np.empty(self.scratch.size, dtype=weight_type)
        self.top = np.empty(self.ramp.size, dtype=weight_type)
        self.blocks: dict[tuple[int, int], tuple[Values, Index | None, Index]] = {}
        self.kept = 0  # row offsets kept in blocks

    def run(self) -> tuple[Ints, float] | None:
        """The optimal allocation and objective; None if no optimum lies in the windows."""
        rows, buffers, stage, choices, pad = (
            self.rows, self.buffers, self.stage, self.choices, self.pad
        )  # fmt: skip
        jobs = rows.shape[0]
        buffers[0][pad] = 0.0  # E_{-1}: no rows, no GPUs
        held = [[pad, pad + 1], [pad, pad]]  # [start, end) each buffer holds; -inf elsewhere
        staged = 0  # stage[0] is choices[staged]
        layers = zip(
            range(jobs),
            (self.lo + pad).tolist(),
            (self.hi + pad + 1).tolist(),
            self.firsts.tolist(),
            self.lasts.tolist(),
            self.starts[:-1].tolist(),
            rows,
            strict=True,
        )
        scratch, views = self.scratch, self.by_rows
        blocks = self.blocks
        for j, low, end, first, last, start, value_row in layers:
            side = j & 1  # the previous layer's buffer
            new, old = buffers[side ^ 1], held[side ^ 1]
            new[old[0] : old[1]].fill(-np.inf)  # layer j-2 was there
            old[0], old[1] = low, end
            width = end - low
            if start + width - staged > stage.size:  # cast the staged choices, in bulk
                np.copyto(choices[staged:start], stage[: start - staged], casting="unsafe")
                staged = start
            picked = stage[start - staged : start - staged + width]
            span = last - first + 1
            if span <= 1:
                picked.fill(0)
                if span == 1:  # one count: a shifted copy
                    prev = buffers[side][low - first : end - first]
                    np.add(prev, value_row[first], out=new[low:end])
                continue  # (no count: nothing reaches the window, it stays -inf)
            # candidates of the state at window position r: prev at x + r, m counts back
            x, values, out = low - first, value_row[first : last + 1], new[low:end]
            if width >= TRANSPOSE_FROM * span and (
                span <= TRANSPOSE_SPAN or width >= TRANSPOSE_WIDE
            ):
                self._by_ks(side, x, values, out, picked)
            elif width * span > scratch.size:
                self._by_rows(side, x, values, out, picked)
            else:  # the common case, inline: one [width, ks] block
                block, firsts, at = blocks.get((width, span)) or self._shaped(width, span)
                np.add(views[side][x : x + width, :span], values, out=block)
                block.argmax(axis=1, out=picked)  # first maximum: the smallest k
                if width < GATHER_FROM:
                    _MAX(block, axis=1, out=out)
                elif firsts is None:  # past FIRSTS_KEPT shapes
                    self._gather(block, picked, out)
                else:  # out[r] = block[r, picked[r]], the row offsets kept
                    np.add(firsts, picked, out=at)
                    scratch.take(at, out=out)
        total = int(self.starts[-1])
        np.copyto(choices[staged:total], stage[: total - staged], casting="unsafe")
        final = buffers[jobs & 1][int(self.lo[-1]) + pad : int(self.hi[-1]) + pad + 1]
        used = int(np.argmax(final))  # first maximum: the fewest GPUs in total
        objective = float(final[used])
        gpus = self._backtrack(int(self.lo[-1]) + used)
        return None if gpus is None or objective == -np.inf else (gpus, objective)

    def _shaped(self, width: int, span: int) -> tuple[Values, Index | None, Index]:
        """A ``[width, span]`` view of the scratch, each row's first index in it (kept for
        the first FIRSTS_KEPT indices' worth of shapes, else made per layer), and where to
        gather; kept for the layers of the same shape."""
        block = self.scratch[: width * span].reshape(width, span)
        firsts = None
        if self.kept + width <= FIRSTS_KEPT:
            firsts, self.kept = self.ramp[:width] * span, self.kept + width
        shaped = self.blocks[width, span] = (block, firsts, self.flat[:width])
        return shaped

    def _by_rows(self, side: int, x: int, values: Row, out: Row, picked: Index) -> None:
        """A layer as ``[width, ks]`` blocks: argmax along ks, then gather the maxima."""
        span, view, scratch = values.size, self.by_rows[side], self.scratch
        rows = scratch.size // span
        for r0 in range(0, out.size, rows):
            r1 = min(out.size, r0 + rows)
            block = scratch[: (r1 - r0) * span].reshape(r1 - r0, span)
            np.add(view[x + r0 : x + r1, :span], values, out=block)
            block.argmax(axis=1, out=picked[r0:r1])  # first maximum: the smallest k
            self._gather(block, picked[r0:r1], out[r0:r1])

    def _gather(self, block: Values, index: Index, out: Row) -> None:
        """``out[r] = block[r, index[r]]``."""
        count, span = block.shape
        at = self.flat[:count]
        np.multiply(self.ramp[:count], span, out=at)
        np.add(at, index, out=at)
        self.scratch.take(at, out=out)

    def _by_ks(self, side: int, x: int, values: Row, out: Row, picked: Index) -> None:
        """A wide layer as ``[ks, width]`` blocks: max, then the first k that attains it."""
        view = self.by_ks.get(side)
        if view is None:
            buf = self.buffers[side]
            shape, strides = (self.rows.shape[1], buf.size), (-buf.itemsize, buf.itemsize)
            view = self.by_ks[side] = as_strided(buf, shape, strides, writeable=False)
        span, scratch = values.size, self.scratch
        weight = self.weights[self.weights.size - span :, None]  # span - m
        columns = scratch.size // span
        for r0 in range(0, out.size, columns):
            r1 = min(out.size, r0 + columns)
            count = r1 - r0
            block = scratch[: span * count].reshape(span, count)
            np.add(view[:span, x + r0 : x + r1], values[:, None], out=block)
            best = out[r0:r1]
            block.max(axis=0, out=best)
            hit = self.equal[: span * count].reshape(span, count)
            np.equal(block, best, out=hit)
            scored = self.weighted[: span * count].reshape(span, count)
            np.multiply(hit.view(np.uint8), weight, out=scored)
            top = self.top[:count]
            scored.max(axis=0, out=top)  # span - (the first m attaining the max)
            np.subtract(span, top, out=picked[r0:r1])

    def _backtrack(self, used: int) -> Ints | None:
        """GPUs per row from the choices, ``used`` GPUs in all; None if it leaves a window."""
        lows, highs = self.lo.tolist(), self.hi.tolist()
        firsts, starts = self.firsts.tolist(), self.starts.tolist()
        choices = memoryview(self.choices.data)  # reads Python ints, not NumPy scalars
        gpus = [0] * len(lows)
        g = used
        for j in range(len(lows) - 1, -1, -1):
            if not lows[j] <= g <= highs[j]:
                return None
            k = choices[starts[j] + g - lows[j]] + firsts[j]
            gpus[j] = k
            g -= k
        return np.array(gpus, dtype=np.int64) if g == 0 else None
