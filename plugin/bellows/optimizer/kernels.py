"""JAX kernels: the windowed allocation DP with its backtrack, and the band bounds.

Factories capture the static (padded) sizes as keyword-only ints and return pure functions;
:mod:`bellows.optimizer.solving` jits them once per size bucket. All arithmetic is float64
(callers trace and run them under ``jax.enable_x64``): the DP must be exact, and float32
(24-bit mantissa) cannot even hold a sum of 1000 TSF values to 1e-3.

**Windowed DP.** Layer ``j`` keeps ``E_j(g)`` (best value of rows ``0..j`` using exactly ``g``
GPUs) only for ``g`` in a window ``[offsets[j], offsets[j] + width)``; everything outside is
``-inf``. With ``width = capacity + 1`` and zero offsets it is the plain dense DP. The band
bounds (:func:`make_bands`) prove that every state of every optimal allocation lies in a much
narrower window, so on large instances ``width`` is a small fraction of the capacity and the
work drops by as much, while the result stays exactly the dense one (same allocation, same
ties: see ``docs/optimizer.md``).

Why ``where(c > best, c, best)`` and not ``jnp.maximum``: XLA lowers ``maximum`` to the
NaN-propagating ``llvm.maximum``, which x86 cannot vectorize; compare-and-select vectorizes
(about 2x faster here). No value is NaN, so they agree.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax

__all__ = ["BandFn", "BandedFn", "DpFn", "make_banded", "make_bands", "make_dp"]

Array = Any  # jax.Array; jax ships no stubs mypy can follow here
DpFn = Callable[[Array, Array, Array], tuple[Array, Array]]
BandFn = Callable[[Array, Array, Array], tuple[Array, Array, Array]]
BandedFn = Callable[[Array, Array], tuple[Array, Array, Array]]


def make_dp(*, jobs: int, k_max: int, width: int) -> DpFn:
    """The DP over ``jobs`` rows of ``k_max + 1`` columns, each layer a ``width`` window.

    The returned ``solve(values, offsets, capacity)`` takes ``values`` f64 ``[jobs, k_max+1]``
    (padding rows ``[0, -inf, ...]``), ``offsets`` int32 ``[jobs]`` (window start of each
    layer, in GPUs) and ``capacity`` int32 ``[]``; it returns ``(gpus, objective)``: int32
    ``[jobs]`` and f64 ``[]`` (``-inf`` when nothing is feasible).
    """
    cols = k_max + 1
    edge = width + k_max  # padding that makes every out-of-window read land on -inf

    def layer(
        carry: tuple[Array, Array], inputs: tuple[Array, Array]
    ) -> tuple[tuple[Array, Array], tuple[Array, Array]]:
        prev, prev_offset = carry  # [width], []
        value_row, offset = inputs  # [k_max+1], []
        pad = jnp.full((edge,), -jnp.inf, prev.dtype)
        extended = jnp.concatenate([pad, prev, pad])  # [3*width + 2*k_max]
        # seg[i] = E_{j-1}(offset - k_max + i); a start beyond either end clamps into the
        # padding, which is right: the whole read then lies outside the previous window.
        start = offset - k_max - prev_offset + edge
        seg = lax.dynamic_slice(extended, (start,), (width + k_max,))  # [width+k_max]
        best = seg[k_max:] + value_row[0]  # [width]
        for k in range(1, cols):
            candidate = seg[k_max - k : k_max - k + width] + value_row[k]
            best = jnp.where(candidate > best, candidate, best)
        return (best, offset), (prev, prev_offset)

    def back(g: Array, inputs: tuple[Array, Array, Array]) -> tuple[Array, Array]:
        prev, prev_offset, value_row = inputs  # [width], [], [k_max+1]
        index = g - jnp.arange(cols) - prev_offset  # [k_max+1] positions of E_{j-1}(g-k)
        inside = (index >= 0) & (index < width)  # explicit: take() wraps negative indices
        read = jnp.where(inside, jnp.take(prev, jnp.clip(index, 0, width - 1)), -jnp.inf)
        candidates = read + value_row
        k = jnp.argmax(candidates).astype(jnp.int32)  # first maximum: the smallest k
        return g - k, k

    def solve(values: Array, offsets: Array, capacity: Array) -> tuple[Array, Array]:
        start = jnp.where(jnp.arange(width) == 0, 0.0, -jnp.inf)  # E_0, window at 0
        (last, last_offset), (prevs, prev_offsets) = lax.scan(
            layer, (start, jnp.int32(0)), (values, offsets)
        )  # prevs [jobs, width]: E_{j-1} window of each layer j
        g_abs = last_offset + jnp.arange(width)
        final = jnp.where(g_abs <= capacity, last, -jnp.inf)  # [width]
        used = jnp.argmax(final)  # first maximum: the fewest GPUs in total
        _, gpus = lax.scan(
            back,
            last_offset + used.astype(jnp.int32),
            (prevs, prev_offsets, values),
            reverse=True,
        )
        return gpus, final[used]

    return solve


def make_bands(*, jobs: int, k_max: int, steps: int = 16, fine: int = 12) -> BandFn:
    """Bounds that confine every optimal allocation's DP states to a band per layer.

    ``bands(values, capacity, margin)`` returns ``(low, high, lower_bound)``: f64 ``[jobs]``
    real-valued limits on ``g`` (GPUs used by rows ``0..j``) and the value of a feasible
    allocation. Why it is exact: for any ``lam >= 0`` and any allocation, rows ``0..j``
    using ``g`` GPUs are worth at most ``lam*g + sum_{i<=j} D_i(lam)`` and the later rows,
    within ``capacity - g``, at most ``mu*(capacity-g) + sum_{i>j} D_i(mu)``, where
    ``D_i(lam) = max_k values[i,k] - lam*k``. A state on an optimal path has the two sum
    to at least the optimum >= ``lower_bound``; each pair ``(lam, mu)`` with ``lam != mu``
    is then a linear inequality on ``g``: ``lam > mu`` bounds it below, ``lam < mu`` above.
    The multipliers sit around the dual optimum ``lam*`` (geometric bisection, ``steps``
    halvings of the log-bracket), at ``lam* (1 +- 2**-i)``, ``i = 1..fine``, where the bounds
    are tightest. ``lower_bound`` is the Lagrangian allocation at the least multiplier found
    that fits. ``margin`` absorbs float rounding. Every row must have a finite column.
    """
    cols = k_max + 1
    ks = jnp.arange(cols)

    def choose(columns: Array, lam: Array) -> tuple[Array, Array]:
        """Each row's Lagrangian choice at ``lam`` (smallest k on ties): GPUs, worth."""
        # Column-major ([k_max+1, jobs]): reducing over k then runs across rows, which XLA
        # vectorizes; reducing the short minor axis does not (about 2x slower, measured).
        tilted = columns - lam * ks[:, None]  # [k_max+1, jobs]
        top = jnp.max(tilted, axis=0)  # [jobs]
        # min over tying k instead of argmax: two plain reductions, which XLA does faster
        k = jnp.min(jnp.where(tilted == top, ks[:, None], cols), axis=0)  # [jobs]
        return k, top + lam * k

    def limits(
        head: Array, tail: Array, lams: Array, mus: Array, need: Array
    ) -> tuple[Array, Array]:
        """Per row, ``(need - head[lam] - tail[mu]) / (lam - mu)`` for all pairs, and slopes."""
        slope = lams[:, None] - mus[None, :]  # [a, b]
        rhs = need - head[:, :, None] - tail[:, None, :]  # [jobs, a, b]
        return rhs / jnp.where(slope == 0, 1.0, slope)[None], slope

    def bands(values: Array, capacity: Array, margin: Array) -> tuple[Array, Array, Array]:
        columns = values.T  # [k_max+1, jobs]
        cap = capacity.astype(values.dtype)
        bottom = jnp.min(jnp.where(jnp.isfinite(values), values, jnp.inf), axis=1)
        steep = jnp.max(jnp.max(values, axis=1) - bottom) + 1.0  # every row at its fewest
        floor_exp = -40.0  # multipliers below steep * 2**-40 are as good as 0

        def halve(_: Array, bounds: tuple[Array, Array]) -> tuple[Array, Array]:
            lo, hi = bounds  # exponents: usage(steep*2**lo) > capacity >= usage(steep*2**hi)
            mid = 0.5 * (lo + hi)
            fits = choose(columns, steep * 2.0**mid)[0].sum() <= capacity
            return jnp.where(fits, lo, mid), jnp.where(fits, mid, hi)

        def search(_: Array) -> Array:
            # unrolled: XLA CPU pays tens of microseconds per while-loop iteration
            bounds = (jnp.asarray(floor_exp), jnp.zeros(()))
            _, top_exp = lax.fori_loop(0, steps, halve, bounds, unroll=True)
            return steep * 2.0**top_exp

        free = choose(columns, jnp.zeros(()))[0].sum() <= capacity
        # lam* = 0 when capacity does not bind (every row can take its best count)
        star = lax.cond(free, lambda _: jnp.zeros(()), search, None)
        lower_bound = choose(columns, star)[1].sum()
        scale = 2.0 ** -jnp.arange(1, fine + 1, dtype=values.dtype)
        above = jnp.concatenate([star[None], star * (1.0 + scale), (star * 2.0)[None], steep[None]])
        below = jnp.concatenate([star[None], star * (1.0 - scale), jnp.zeros(1)])
        lams = jnp.concatenate([above, below])  # [m]
        d = jnp.max(values[:, None, :] - lams[None, :, None] * ks, axis=2)  # [jobs, m]
        # cumsum, not associative_scan (log-depth slices): sums equal to rounding far below
        # the margin, and XLA compiles it in a third less memory and time (the band kernel
        # at 896 rows: +256 -> +190 MiB of RSS, 3.3 -> 2.3 s; issue 11's controller peak)
        head = jnp.cumsum(d, axis=0)  # [jobs, m] rows 0..j
        tail = d.sum(axis=0) - head + lams * cap  # [jobs, m] rows j+1.. (+ their capacity)
        need = lower_bound - margin
        split = above.shape[0]
        ratio, slope = limits(head[:, :split], tail[:, split:], above, below, need)
        low = jnp.max(jnp.where(slope[None] > 0, ratio, -jnp.inf), axis=(1, 2))  # [jobs]
        ratio, slope = limits(head[:, split:], tail[:, :split], below, above, need)
        high = jnp.min(jnp.where(slope[None] < 0, ratio, jnp.inf), axis=(1, 2))  # [jobs]
        return low, high, lower_bound

    return bands


def make_banded(*, jobs: int, k_max: int, width: int) -> BandedFn:
    """Band bounds, per-layer windows and the windowed DP, in one dispatch.

    ``banded(values, capacity)`` returns ``(gpus, objective, needed)``; the result is exact
    only if ``needed <= width`` (``needed``: the widest window the bounds allow). Otherwise
    the caller runs it again with a wider ``width``: guessing the width from the previous
    call saves a host round trip per call, which is a third of the time at 500 jobs.
    """
    bands = make_bands(jobs=jobs, k_max=k_max)
    solve = make_dp(jobs=jobs, k_max=k_max, width=width)

    def banded(values: Array, capacity: Array) -> tuple[Array, Array, Array]:
        finite = jnp.isfinite(values)  # [jobs, k_max+1]
        least = jnp.argmax(finite, axis=1).astype(jnp.int32)  # fewest GPUs of each row
        most = (k_max - jnp.argmax(finite[:, ::-1], axis=1)).astype(jnp.int32)
        # rounding in the bound sums is ~jobs * 1e-16 of this; 1e-9 is far on the safe side
        margin = 1e-9 * (1.0 + jnp.max(jnp.where(finite, jnp.abs(values), 0.0), axis=1).sum())
        low, high, _ = bands(values, capacity, margin)
        used_min = jnp.cumsum(least, dtype=jnp.int32)  # rows 0..j use at least this
        used_max = jnp.cumsum(most, dtype=jnp.int32)  # ... and at most this
        after_min = used_min[-1] - used_min  # the later rows need at least this
        cap = capacity.astype(values.dtype)
        low = jnp.ceil(jnp.clip(low, -1.0, cap + 1.0)).astype(jnp.int32) - 1
        high = jnp.floor(jnp.clip(high, -1.0, cap + 1.0)).astype(jnp.int32) + 1
        lo = jnp.maximum(low, used_min)  # [jobs]
        hi = jnp.minimum(jnp.minimum(high, used_max), capacity - after_min)  # [jobs]
        # lo > hi could only come from float trouble: ask for more than any width then
        needed = jnp.where(jnp.any(lo > hi), 2**31 - 1, jnp.max(hi - lo) + 1)
        gpus, objective = solve(values, lo, capacity)
        return gpus, objective, needed

    return banded
