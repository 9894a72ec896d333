"""``auto`` in background mode (``RentRule.in_background``, the live controller's): a kernel
not yet compiled compiles on the worker thread while the NumPy engine answers, once, and a
failed compile leaves NumPy answering; inside ``compiling()`` compiles stay in the caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from bellows.optimizer import solving
from bellows.optimizer.solving import Kernel, RentRule, compile_kernel, padded_shape, solve_rows
from tests.optimizer.tracing import BackendCompiles, Traces

DEADLINE_S = 120.0  # for a compile on a loaded 2-core machine (one takes ~0.5-3 s alone)


@pytest.fixture
def rule() -> Iterator[RentRule]:
    """A fresh rent rule that buys every shape at once, with its own band width guesses, the
    calls given it (``rent=rule``); after the test, its worker is drained."""
    fresh = RentRule(compile_s=0.0)
    yield fresh
    assert fresh.wait(DEADLINE_S)


def _table(jobs: int, k_max: int, seed: int) -> np.ndarray:
    rows = np.sort(np.random.default_rng(seed).random((jobs, k_max + 1)), axis=1)
    rows[:, 0] = -np.inf  # every job must be placed
    return rows


def _until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, "the background compile did not finish in time"
        time.sleep(0.01)


def _dense_kernel(rows: np.ndarray, capacity: int) -> Kernel:
    jobs, k_max, width = padded_shape(rows.shape[0], rows.shape[1] - 1, capacity)
    return ("dp", jobs, k_max, width)


class Gated:
    """A compiler that counts its calls and waits for ``release`` before compiling for real
    (or raising ``error``)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[Kernel] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.error = error

    def __call__(self, kernel: Kernel) -> None:
        self.calls.append(kernel)
        self.started.set()
        assert self.release.wait(DEADLINE_S)
        if self.error is not None:
            raise self.error
        compile_kernel(kernel)


def test_numpy_answers_while_the_kernel_compiles_then_jax_without_compiling_again(
    rule: RentRule,
) -> None:
    rows, capacity = _table(45, 7, seed=11), 150  # shape (48, 7, 160): no other test's
    kernel = _dense_kernel(rows, 150)
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background():
        first = solve_rows(rows, capacity, method="auto", rent=rule)
        assert first.path == "numpy"
        assert np.array_equal(first.gpus, exact.gpus)
        assert first.objective == exact.objective
        assert kernel in rule.pending or kernel in rule.ready  # its compile has started
        _until(lambda: kernel in rule.ready)
        with BackendCompiles() as compiles, Traces() as traces:
            later = solve_rows(rows, capacity, method="auto", rent=rule)
            again = solve_rows(rows, capacity, method="auto", rent=rule)
        assert (later.path, again.path) == ("dense", "dense")
        assert compiles.count == 0  # the ahead-of-time compile is the one the call found
        assert traces.count == 0
    assert np.array_equal(later.gpus, exact.gpus)
    assert later.objective == exact.objective
    assert not rule.failed


def test_the_caller_never_waits_and_a_kernel_is_compiled_once(rule: RentRule) -> None:
    gated = Gated()
    rule.compiler = gated
    rows, capacity = _table(10, 6, seed=12), 50
    kernel = _dense_kernel(rows, capacity)
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background():
        answers = [solve_rows(rows, capacity, method="auto", rent=rule) for _ in range(3)]
        assert gated.started.wait(DEADLINE_S)
        answers += [solve_rows(rows, capacity, method="auto", rent=rule) for _ in range(2)]
        # every call returned while the compile was held: none waited for it
        assert [a.path for a in answers] == ["numpy"] * 5
        assert list(rule.pending) == [kernel]
        gated.release.set()
        _until(lambda: kernel in rule.ready)
        answers += [solve_rows(rows, capacity, method="auto", rent=rule) for _ in range(3)]
    assert [a.path for a in answers[5:]] == ["dense"] * 3
    assert gated.calls == [kernel]
    for answer in answers:
        assert np.array_equal(answer.gpus, exact.gpus)


def _band_run(
    rule: RentRule, monkeypatch: pytest.MonkeyPatch, *, guess: int | None
) -> tuple[list[str], list[Kernel]]:
    """Five background calls on the band path (``guess``: a width guessed before), each
    checked against NumPy; their paths, and the kernels compiled."""
    monkeypatch.setattr(solving, "BAND_FROM", 0)  # the band path at a size that compiles fast
    compiled: list[Kernel] = []

    def compiler(kernel: Kernel) -> None:
        compiled.append(kernel)
        compile_kernel(kernel)

    rule.compiler = compiler
    rows, capacity = _table(23, 8, seed=0), 100  # padded (24, 8, 112): the band needs 48
    if guess is not None:
        rule.widths[(24, 9)] = guess
    exact = solve_rows(rows, capacity, method="numpy")
    paths: list[str] = []
    with rule.in_background():
        for _ in range(5):
            answer = solve_rows(rows, capacity, method="auto", rent=rule)
            assert np.array_equal(answer.gpus, exact.gpus)
            paths.append(answer.path)
            if answer.path == "numpy":
                _until(lambda: not rule.pending)
    assert rule.widths[(24, 9)] == 48
    return paths, compiled


def test_a_first_band_call_compiles_the_width_the_numpy_bounds_give(
    rule: RentRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, compiled = _band_run(rule, monkeypatch, guess=None)
    # one kernel, the width the calls need: not FIRST_WIDTH (64) and then that one
    assert paths == ["numpy", "band", "band", "band", "band"]
    assert compiled == [("banded", 24, 8, 48)]


def test_band_widths_compile_in_the_background(
    rule: RentRule, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths, compiled = _band_run(rule, monkeypatch, guess=64)
    # the stale guess compiles; run, it finds the band narrower and guesses that next time:
    # that width compiles too, and from then on the band path runs
    assert paths == ["numpy", "band", "numpy", "band", "band"]
    assert compiled == [("banded", 24, 8, 64), ("banded", 24, 8, 48)]


def test_a_failed_compile_leaves_numpy_answering(rule: RentRule) -> None:
    gated = Gated(error=RuntimeError("no memory for XLA"))
    gated.release.set()
    rule.compiler = gated
    rows, capacity = _table(11, 6, seed=13), 50
    kernel = _dense_kernel(rows, capacity)
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background():
        first = solve_rows(rows, capacity, method="auto", rent=rule)
        _until(lambda: kernel in rule.failed)
        later = [solve_rows(rows, capacity, method="auto", rent=rule) for _ in range(3)]
        with rule.compiling():  # not retried in the caller either
            later.append(solve_rows(rows, capacity, method="auto", rent=rule))
    later.append(solve_rows(rows, capacity, method="auto", rent=rule))  # nor with background off
    assert [a.path for a in [first, *later]] == ["numpy"] * 6
    for answer in [first, *later]:
        assert np.array_equal(answer.gpus, exact.gpus)
    assert rule.failed == {kernel: "RuntimeError: no memory for XLA"}
    assert gated.calls == [kernel]
    assert kernel not in rule.ready
    assert not rule.pending


def test_inside_compiling_the_caller_compiles_even_in_background(rule: RentRule) -> None:
    gated = Gated()
    rule.compiler = gated
    rows, capacity = _table(12, 6, seed=14), 50
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background(), rule.compiling():
        answer = solve_rows(rows, capacity, method="auto", rent=rule)
    assert answer.path == "dense"
    assert np.array_equal(answer.gpus, exact.gpus)
    assert _dense_kernel(rows, capacity) in rule.ready
    assert gated.calls == []  # the worker was never asked
    assert not rule.pending


def test_compiling_waits_for_the_worker_instead_of_compiling_twice(rule: RentRule) -> None:
    gated = Gated()
    rule.compiler = gated
    rows, capacity = _table(13, 6, seed=15), 50
    kernel = _dense_kernel(rows, capacity)
    with rule.in_background():
        assert solve_rows(rows, capacity, method="auto", rent=rule).path == "numpy"
        assert gated.started.wait(DEADLINE_S)
        threading.Timer(0.2, gated.release.set).start()  # while the caller waits below
        with rule.compiling():
            answer = solve_rows(rows, capacity, method="auto", rent=rule)
    assert answer.path == "dense"
    assert gated.calls == [kernel]
    assert kernel in rule.ready


def test_without_background_the_caller_compiles_as_before(rule: RentRule) -> None:
    gated = Gated()
    rule.compiler = gated
    rows, capacity = _table(14, 6, seed=16), 50
    exact = solve_rows(rows, capacity, method="numpy")
    answer = solve_rows(rows, capacity, method="auto", rent=rule)
    assert answer.path == "dense"  # bought at once (compile_s 0), compiled in the call
    assert np.array_equal(answer.gpus, exact.gpus)
    assert gated.calls == []
    assert not rule.pending
    assert rule.ready == {_dense_kernel(rows, capacity)}


def test_forced_jax_methods_compile_in_the_caller_even_in_background(rule: RentRule) -> None:
    gated = Gated()
    rule.compiler = gated
    rows, capacity = _table(15, 6, seed=17), 50
    with rule.in_background():
        assert solve_rows(rows, capacity, method="dense", rent=rule).path == "dense"
    assert gated.calls == []


def test_a_delegating_rule_has_its_compiler_compile_in_the_caller(rule: RentRule) -> None:
    gated = Gated()
    gated.release.set()
    rule.compiler, rule.delegate = gated, True
    rows, capacity = _table(16, 6, seed=18), 50
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background(), rule.compiling():
        answer = solve_rows(rows, capacity, method="auto", rent=rule)
        again = solve_rows(rows, capacity, method="auto", rent=rule)
    assert (answer.path, again.path) == ("dense", "dense")
    assert np.array_equal(answer.gpus, exact.gpus)
    assert gated.calls == [_dense_kernel(rows, capacity)]  # once, in the caller
    assert not rule.pending


def test_a_delegated_compile_that_fails_leaves_numpy_answering(rule: RentRule) -> None:
    gated = Gated(error=RuntimeError("the child was killed"))
    gated.release.set()
    rule.compiler, rule.delegate = gated, True
    rows, capacity = _table(17, 6, seed=19), 50
    kernel = _dense_kernel(rows, capacity)
    exact = solve_rows(rows, capacity, method="numpy")
    with rule.in_background(), rule.compiling():
        answer = solve_rows(rows, capacity, method="auto", rent=rule)
    assert answer.path == "numpy"
    assert np.array_equal(answer.gpus, exact.gpus)
    assert rule.failed == {kernel: "RuntimeError: the child was killed"}
    # a forced JAX path still runs: its call compiles the kernel itself
    assert solve_rows(rows, capacity, method="dense", rent=rule).path == "dense"
    assert gated.calls == [kernel]
