"""``allocate``: pad to size buckets, pick a path, run the jitted kernels, unpad.

Shapes are padded to quarter-octave buckets (at most 25 % padding) so that repeated calls at
similar sizes reuse one compiled kernel: rows to a bucket of ``n`` (padding rows take 0 GPUs
at value 0), columns to a bucket of ``k_max`` (``-inf``), the DP window to a bucket of its
width. Capacity is a traced scalar, never a shape.

Paths (``method``): ``"numpy"`` (the lean NumPy engine of :mod:`bellows.optimizer.windowed`:
the same band bounds, a windowed DP that keeps one small choice per state; it never imports
JAX), ``"dense"`` (the JAX DP over every GPU count), ``"band"`` (the JAX DP confined to the
provably optimal band, see :func:`bellows.optimizer.kernels.make_bands`; bounds and DP run in
one dispatch at a width guessed from the last call (the first call of a size: from the NumPy
bounds), and again, wider, if the guess was short;
it falls back to dense when the band is no narrower), and ``"auto"``, which picks by size and
counts what compiling costs (below). All return the same allocation.

``"auto"`` and compile cost: a JAX kernel is compiled once per padded shape, and that first
call costs seconds (XLA; 4 to 24 s measured on the 2-core machine, see docs/optimizer.md)
where the NumPy engine solves a simulator-sized round in milliseconds. So ``auto`` rents
before it buys, per padded shape: it runs the NumPy engine and adds up what each call would
have saved on JAX — its estimated time (``NUMPY_S_PER_CELL`` per DP cell) less the least a
compiled JAX call costs (``JAX_CALL_S``, its dispatch) — until that reaches ``COMPILE_S``,
the measured cost of one compile, and only then goes to JAX (the ski-rental rule: never
worse than twice the better of the two choices made in hindsight). A call NumPy finishes
sooner than a JAX dispatch saves nothing on JAX, and pays no rent. A shape the rule has
bought goes to JAX at once, and inside :meth:`RentRule.compiling` (a controller's start-up
rehearsal) every shape is compiled at once. The rule is a value its owner passes in
(``rent=``): the live controller's runner owns one for the process, with its worker; each
simulated core makes its own (:class:`bellows.autoscaler.Autoscaler`); a call given none
starts from a fresh one. Below ``NUMPY_BELOW``
cells the NumPy engine beats even a compiled JAX dispatch. Whichever path runs, the
allocation is the same.

Compiling in the background (:meth:`RentRule.in_background`, the live controller's mode):
there ``auto`` never compiles in the caller. A call that needs a kernel not compiled yet (a
shape the rent rule has just bought, a new band width, the dense fallback) starts its
compile on one worker thread, ahead of time for exactly the arguments the calls pass (so
they find it in ``jax.jit``'s cache), and is answered by the NumPy engine meanwhile; the
calls after the compile run the kernel. Each kernel is compiled once; one whose compile
fails stays with NumPy (:attr:`RentRule.failed`). Inside :meth:`RentRule.compiling` compiles
stay in the caller, and ``"dense"``/``"band"`` always compile in the caller: there the call's
jit compiles, or, with :attr:`RentRule.delegate`, the rule's ``compiler`` (the caller waits
for it; the live controller's compiles in a child process, so that XLA's working memory is
never the controller's, and the call then loads the kernel from the persistent cache).

JAX (and :mod:`bellows.optimizer.kernels`) is imported the first time a JAX path runs, not
before: importing it costs ~125 MiB of RSS, which a process on the NumPy engine (``"numpy"``,
or ``"auto"`` where no shape pays for a compile, as in most simulations) never pays.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from bellows.jobs import SpecError
from bellows.optimizer.errors import (
    Counts,
    Infeasible,
    Values,
    check_capacity,
    check_values,
    finite_counts,
)
from bellows.optimizer.windowed import solve_windowed, windows

if TYPE_CHECKING:
    from bellows.optimizer import kernels

__all__ = [
    "Kernel",
    "Method",
    "RentRule",
    "Solution",
    "allocate",
    "bucket",
    "compile_kernel",
    "padded_shape",
    "solve_rows",
]

Method = Literal["auto", "numpy", "dense", "band"]
METHODS: tuple[str, ...] = ("auto", "numpy", "dense", "band")

# "auto" thresholds, in DP cells n*(capacity+1)*(k_max+1) (see docs/optimizer.md).
# Below NUMPY_BELOW the NumPy engine (~0.1 ms) beats a JAX dispatch; above, the compiled JAX
# paths win at every size measured (the engine's per-row NumPy calls cost ~5 us a row).
NUMPY_BELOW = 800
BAND_FROM = 8_000_000  # from here the band pass (about 1 ms) pays for itself
# The rent rule (module docstring), on the 2-core machine: the NumPy engine on its compiled
# layers took 7.2 ms at 1.3e7 cells (200 jobs x 1 000 GPUs x k_max 64, TSF table of
# benchmarks/optimizer.py), ~0.55 ns a cell (2.7 ms, 1 ns a cell, at 100 x 400 x 64; on its
# NumPy layers 16.6 ms, 1.3 ns, and before them 42.7 ms); the first call of a new JAX shape
# took 4.3 s (dense) to 24 s (band), of which ~1.5 s is importing JAX. COMPILE_S is the low
# end, so a long run still reaches JAX.
NUMPY_S_PER_CELL = 6e-10
COMPILE_S = 2.0
# The least a compiled JAX call costs on the 2-core machine, whatever its size: 0.41-0.54 ms
# (dense, 50 jobs x 40 GPUs x k_max 8, and admit's 20 x 40 x 8; benchmarks/optimizer.py),
# 1.6 ms a call in the ITP Bellows-mode replay. A NumPy call estimated below it saves
# nothing on JAX: without it, that replay's 5 490 calls of one ~1e6-cell shape (0.6 ms
# estimated, ~0.15 ms run) bought the shape, and every call after took 1.6 ms (issue 11).
JAX_CALL_S = 4e-4
Gpus = npt.NDArray[np.int64]
Shape = tuple[int, int, int]  # padded (rows, k_max, dense width): one compiled kernel set
Kernel = tuple[Literal["dp", "banded"], int, int, int]  # kind, padded rows, k_max, width


@dataclass(frozen=True)
class Solution:
    """An optimal allocation, its objective (the DP's sum) and the path that found it."""

    gpus: Gpus
    objective: float
    path: Literal["numpy", "dense", "band", "trivial"]


def bucket(size: int, *, minimum: int) -> int:
    """Smallest ``m * 2**e >= size`` with ``m`` in 4..8: quarter-octave steps."""
    size = max(size, minimum)
    shift = max(size.bit_length() - 3, 0)
    return -(-size // (1 << shift)) << shift


@functools.lru_cache(maxsize=128)
def _dp(jobs: int, k_max: int, width: int) -> kernels.DpFn:
    import jax  # noqa: PLC0415 - lazy: only the JAX paths pay for it

    from bellows.optimizer import kernels  # noqa: PLC0415

    fn: kernels.DpFn = jax.jit(kernels.make_dp(jobs=jobs, k_max=k_max, width=width))
    return fn


@functools.lru_cache(maxsize=64)
def _banded(jobs: int, k_max: int, width: int) -> kernels.BandedFn:
    import jax  # noqa: PLC0415 - lazy: only the JAX paths pay for it

    from bellows.optimizer import kernels  # noqa: PLC0415

    fn: kernels.BandedFn = jax.jit(kernels.make_banded(jobs=jobs, k_max=k_max, width=width))
    return fn


def _jitted(kernel: Kernel) -> Any:
    """The jitted function of ``kernel`` (typed loosely: the AOT ``lower`` is used too)."""
    kind, jobs, k_max, width = kernel
    return (_dp if kind == "dp" else _banded)(jobs, k_max, width)


def compile_kernel(kernel: Kernel) -> None:
    """Compile ``kernel`` ahead of time for exactly the argument types its calls pass
    (``_solve_jax``: float64 values, int32 offsets and capacity, under ``enable_x64``), so
    that the calls find it in ``jax.jit``'s cache and do not compile again."""
    import jax  # noqa: PLC0415 - lazy: only the JAX paths pay for it

    struct: Any = jax.ShapeDtypeStruct
    kind, jobs, k_max, _ = kernel
    values = struct((jobs, k_max + 1), np.float64)
    capacity = struct((), np.int32)
    with jax.enable_x64(True):  # thread-local: the caller's thread is left as it is
        if kind == "dp":
            offsets = struct((jobs,), np.int32)
            _jitted(kernel).lower(values, offsets, capacity).compile()
        else:
            _jitted(kernel).lower(values, capacity).compile()


FIRST_WIDTH = 64  # the band width guessed where the NumPy bounds cannot tell (below)


def padded_shape(rows: int, k_max: int, capacity: int) -> Shape:
    """The padded shape (rows, k_max, dense width) one JAX call of this size compiles for."""
    return (bucket(rows, minimum=8), bucket(k_max, minimum=1), bucket(capacity + 1, minimum=8))


@dataclass
class RentRule:
    """``auto``'s choice past ``NUMPY_BELOW`` (the module docstring): per padded shape, the
    estimated NumPy seconds spent so far, and the shapes bought (sent to JAX); per kernel,
    whether it is compiled, compiling in the background, or failed to compile there; per
    (rows, columns) bucket, the band width the last banded call needed (the next call's
    guess). Whoever starts the worker (:meth:`in_background`) owns it and passes the rule
    to the calls that may use it."""

    compile_s: float = COMPILE_S
    s_per_cell: float = NUMPY_S_PER_CELL
    jax_call_s: float = JAX_CALL_S
    spent: dict[Shape, float] = field(default_factory=dict)
    compiled: set[Shape] = field(default_factory=set)  # bought: kernels compiled or compiling
    buying: int = 0  # > 0 inside :meth:`compiling`
    background: int = 0  # > 0 inside :meth:`in_background`
    ready: set[Kernel] = field(default_factory=set)  # compiled in this process
    pending: dict[Kernel, Future[None]] = field(default_factory=dict)  # on the worker
    failed: dict[Kernel, str] = field(default_factory=dict)  # its compile's error: NumPy
    widths: dict[tuple[int, int], int] = field(default_factory=dict)  # band width guesses
    compiler: Callable[[Kernel], None] = compile_kernel  # what the worker runs (tests swap it)
    # True: a kernel a caller compiles (:meth:`may_run`) is compiled by ``compiler`` too, in
    # the caller, before the call runs it; False: by the call's own jit
    delegate: bool = False
    _worker: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def uses_jax(self, shape: Shape, cells: int) -> bool:
        """Whether this call goes to JAX; if not, what JAX would have saved on it (its NumPy
        estimate less a JAX dispatch, if more) is added to the rent."""
        if shape in self.compiled or self.buying:
            return True
        spent = self.spent.get(shape, 0.0)
        if spent >= self.compile_s:
            return True
        self.spent[shape] = spent + max(0.0, self.s_per_cell * cells - self.jax_call_s)
        return False

    def mark_compiled(self, shape: Shape) -> None:
        """Record that ``shape`` is bought (``auto`` then sends it to JAX at once)."""
        self.compiled.add(shape)

    def may_run(self, kernel: Kernel, *, inline: bool = False) -> bool:
        """Whether a call may run ``kernel`` now; ``inline``: it may compile it itself.

        A compiled kernel runs. In background mode, outside :meth:`compiling` and unless
        ``inline``, one not compiled does not: its compile starts on the worker thread (once;
        not again after it failed) and the caller answers with NumPy. Otherwise the caller
        compiles it as it runs it (after waiting for the worker, if that is compiling it:
        never twice), except a kernel whose compile failed: that one is left to NumPy, not
        retried (only an ``inline`` call, a forced ``"dense"``/``"band"``, compiles it).
        With :attr:`delegate`, the caller has ``compiler`` compile it first; if that fails,
        the kernel is failed as on the worker (an ``inline`` call still compiles it itself).
        """
        with self._lock:
            if kernel in self.ready:
                return True
            future = self.pending.get(kernel)
            if self.background and not self.buying and not inline:
                if future is None and kernel not in self.failed:
                    self._start(kernel)
                return False
        if future is not None:  # compiling on the worker: wait for it (it may be cancelled)
            with contextlib.suppress(Exception):
                future.result()
            with self._lock:
                if self.pending.get(kernel) is future:  # cancelled before it started
                    del self.pending[kernel]
        if self.delegate and kernel not in self.ready and kernel not in self.failed:
            self._compile(kernel)  # the owner's compiler, in the caller: records ready or failed
        with self._lock:
            if kernel in self.failed and not inline:
                return False
            self.ready.add(kernel)  # compiled by the time the caller's call returns
            return True

    def _start(self, kernel: Kernel) -> None:
        """Queue ``kernel``'s compile on the worker (called holding the lock)."""
        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bellows-xla")
        self.pending[kernel] = self._worker.submit(self._compile, kernel)

    def _compile(self, kernel: Kernel) -> None:
        """The worker's task: compile ``kernel``, then record it ready or failed."""
        try:
            self.compiler(kernel)
        except Exception as err:  # any failure: the kernel stays with NumPy
            with self._lock:
                self.failed[kernel] = f"{type(err).__name__}: {err}"
                self.pending.pop(kernel, None)
            return
        with self._lock:
            self.ready.add(kernel)
            self.pending.pop(kernel, None)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the background compiles queued now; whether
        none is left pending."""
        with self._lock:
            futures = list(self.pending.values())
        concurrent.futures.wait(futures, timeout=timeout)
        with self._lock:
            return not self.pending

    @contextlib.contextmanager
    def compiling(self) -> Iterator[None]:
        """Inside, ``auto`` buys at once: every shape past ``NUMPY_BELOW`` goes to JAX and is
        compiled now (a controller's start-up rehearsal, so that its rounds find them)."""
        self.buying += 1
        try:
            yield
        finally:
            self.buying -= 1

    @contextlib.contextmanager
    def in_background(self) -> Iterator[None]:
        """Inside, ``auto`` compiles on a worker thread and NumPy answers until the kernel is
        ready (the module docstring): a live controller's rounds never wait for XLA. On
        leaving the last, compiles not started are dropped; one under way runs out."""
        self.background += 1
        try:
            yield
        finally:
            self.background -= 1
            if not self.background:
                self._stop()

    def _stop(self) -> None:
        """Let the worker go: queued compiles are dropped (to be queued again if met)."""
        with self._lock:
            worker, self._worker = self._worker, None
            if worker is not None:
                worker.shutdown(wait=False, cancel_futures=True)
            for kernel, future in list(self.pending.items()):
                if future.cancelled():
                    del self.pending[kernel]


def _pad(rows: Values, jobs: int, k_max: int) -> Values:
    padded = np.full((jobs, k_max + 1), -np.inf)  # [jobs, k_max+1]
    padded[: rows.shape[0], : rows.shape[1]] = rows
    padded[rows.shape[0] :, 0] = 0.0  # padding rows: no GPUs, worth nothing
    return padded


def solve_rows(
    rows: Values,
    capacity: int,
    *,
    method: Method = "auto",
    counts: Counts | None = None,
    rent: RentRule | None = None,
    compiled: bool = True,
) -> Solution:
    """Optimal GPUs per row and objective for validated ``rows``; Infeasible if none fits.
    ``counts``: the rows' :func:`~bellows.optimizer.errors.finite_counts`, if the caller has
    them; ``rent``: the rule ``auto`` and the JAX paths keep their state in (``None``: a
    fresh one, for this call only); ``compiled``: whether the NumPy engine runs its compiled
    layers (``False``: its NumPy layers, the same result)."""
    n, cols = rows.shape
    least, most = finite_counts(rows) if counts is None else counts
    needed = int(least.sum())
    if needed > capacity:
        raise Infeasible(needed, capacity)
    if n == 0:
        return Solution(np.zeros(0, dtype=np.int64), 0.0, "trivial")
    # No row can use more than its largest allowed count: capacity beyond their sum is idle.
    capacity = min(capacity, int(most.sum()))
    cells = n * (capacity + 1) * cols
    rule = RentRule() if rent is None else rent
    if method == "numpy" or (
        method == "auto"
        and (cells < NUMPY_BELOW or not rule.uses_jax(padded_shape(n, cols - 1, capacity), cells))
    ):
        solved = solve_windowed(rows, capacity, counts=(least, most), compiled=compiled)
        return Solution(*solved, "numpy")
    band = method == "band" or (method == "auto" and cells >= BAND_FROM)
    try:
        return _solve_jax(rows, capacity, rule, band=band, inline=method != "auto")
    except _Compiling:  # "auto" in background mode: NumPy answers while the kernel compiles
        solved = solve_windowed(rows, capacity, counts=(least, most), compiled=compiled)
        return Solution(*solved, "numpy")


class _Compiling(Exception):  # noqa: N818 - a signal, not an error
    """A kernel this call needs is not compiled; its compile runs on the worker thread."""


def _runnable(kernel: Kernel, rent: RentRule, *, inline: bool) -> Any:
    """``kernel``'s jitted function, if this call may run it (:meth:`RentRule.may_run`)."""
    if not rent.may_run(kernel, inline=inline):
        raise _Compiling
    return _jitted(kernel)


def _solve_jax(
    rows: Values, capacity: int, rent: RentRule, *, band: bool, inline: bool
) -> Solution:
    """The JAX paths on validated, feasible ``rows`` (capacity already cut to what fits).

    Raises :class:`_Compiling` when a kernel is not compiled and this call may not compile
    it (``inline`` False, in background mode: see :meth:`RentRule.may_run`).
    """
    n, cols = rows.shape
    shape = padded_shape(n, cols - 1, capacity)
    jobs, k_max, dense = shape
    rent.mark_compiled(shape)
    key = (jobs, k_max + 1)
    if band and key not in rent.widths:
        rent.widths[key] = _first_width(rows, capacity, dense)
    width = min(rent.widths[key], dense) if band else dense
    # the first kernel is checked before JAX is imported: the caller waits for no import
    _runnable(("banded" if width < dense else "dp", jobs, k_max, width), rent, inline=inline)
    import jax  # noqa: PLC0415 - lazy: only the JAX paths pay for it

    padded = _pad(rows, jobs, k_max)
    with jax.enable_x64(True):
        if band:
            banded = _banded_solve(padded, capacity, dense, rent, inline=inline)
            if banded is not None:
                return Solution(banded[0][:n], banded[1], "band")
        gpus, objective = _runnable(("dp", jobs, k_max, dense), rent, inline=inline)(
            padded, np.zeros(jobs, dtype=np.int32), np.int32(capacity)
        )
        return Solution(np.asarray(gpus)[:n].astype(np.int64), float(objective), "dense")


def _first_width(rows: Values, capacity: int, dense: int) -> int:
    """The band width a (rows, columns) bucket's first call guesses: the one the NumPy
    engine's bounds give this call (:func:`~bellows.optimizer.windowed.windows`, the
    kernel's bounds to rounding), so that the first kernel compiled is the one the calls
    run, not a ``FIRST_WIDTH`` kernel and then another; ``FIRST_WIDTH`` where the bounds
    cannot tell (float trouble). A guess too narrow costs a second call, as before."""
    window = windows(rows, capacity, bands=True)
    if window.floor == -np.inf:
        return min(FIRST_WIDTH, dense)
    return bucket(min(int((window.hi - window.lo).max()) + 1, dense), minimum=8)


def _banded_solve(
    padded: Values, capacity: int, dense: int, rent: RentRule, *, inline: bool
) -> tuple[Gpus, float] | None:
    """The band path, guessing the width from the last call; None: no narrower than dense."""
    key = (padded.shape[0], padded.shape[1])
    width = min(rent.widths.get(key, FIRST_WIDTH), dense)
    while width < dense:
        kernel: Kernel = ("banded", padded.shape[0], padded.shape[1] - 1, width)
        run = _runnable(kernel, rent, inline=inline)
        gpus, objective, needed = run(padded, np.int32(capacity))
        fits = int(needed) <= width
        # remember the width this instance needed (narrower or wider) for the next call
        rent.widths[key] = bucket(min(int(needed), dense), minimum=8)
        if fits:
            return np.asarray(gpus).astype(np.int64), float(objective)
        width = rent.widths[key]
    return None


def allocate(
    values: object,
    capacity: object,
    *,
    method: Method = "auto",
    rent: RentRule | None = None,
    compiled: bool = True,
) -> Gpus:
    """GPUs per job maximizing ``sum_j values[j, gpus[j]]`` with ``sum(gpus) <= capacity``.

    ``values``: float ``[n_jobs, k_max+1]``, ``values[j, k]`` the worth of giving job ``j``
    exactly ``k`` GPUs, ``-inf`` where not allowed (``-inf`` in column 0: the job must be
    placed). Returns int64 ``[n_jobs]``; exact, ties broken as ``docs/optimizer.md`` says.
    Raises :class:`Infeasible` when no allocation has a finite sum, and
    :class:`bellows.jobs.SpecError` (a ValueError) for a bad shape, NaN, ``+inf`` or a
    negative capacity. ``rent`` and ``compiled``: as :func:`solve_rows` takes them (a caller
    that calls again passes its rule, so ``auto`` rents across its calls and the band path
    keeps its width guesses).
    """
    array = check_values(values)
    cap = check_capacity(capacity)
    if method not in METHODS:
        raise SpecError("method", method, " or ".join(repr(m) for m in METHODS))
    if cap > 2**30:
        raise SpecError("capacity", cap, "at most 2**30 GPUs")
    return solve_rows(array, cap, method=method, rent=rent, compiled=compiled).gpus
