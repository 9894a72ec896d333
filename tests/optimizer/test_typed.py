"""``allocate_typed`` (issue 39 item 2): exact against brute force and the whole 0-1 program,
today's DP bit for bit on one type, bad input refused by name."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.jobs import SpecError
from bellows.optimizer import Infeasible, allocate, typed
from bellows.optimizer.typed import (
    TypedAllocation,
    allocate_typed,
    allocate_typed_reference,
)

CELLS = st.sampled_from([-np.inf, -np.inf, 0.0, 0.5, 1.0, 1.5, 2.5, 4.0, 0.3, 3.1])


def brute_typed(values: np.ndarray, caps: list[int]) -> float | None:
    """The best objective over every choice of (type, count) per job; None: infeasible."""
    n, types, width = values.shape
    options = []
    for j in range(n):
        mine = [(-1, 0)] if np.isfinite(values[j, 0, 0]) else []
        mine += [(t, k) for t in range(types) for k in range(1, width)
                 if np.isfinite(values[j, t, k])]  # fmt: skip
        options.append(mine)
    best: float | None = None
    for pick in itertools.product(*options):
        used = [0] * types
        for t, k in pick:
            if t >= 0:
                used[t] += k
        if any(u > c for u, c in zip(used, caps, strict=True)):
            continue
        total = sum(values[j, max(t, 0), k] for j, (t, k) in enumerate(pick))
        if best is None or total > best:
            best = total
    return best


def _holds(values: np.ndarray, caps: list[int], got: TypedAllocation) -> None:
    """``got`` is an allocation of ``values`` within ``caps`` whose objective is its sum."""
    n = values.shape[0]
    assert got.types.shape == got.gpus.shape == (n,)
    assert ((got.types >= 0) == (got.gpus > 0)).all()
    for t, cap in enumerate(caps):
        assert got.gpus[got.types == t].sum() <= cap
    worth = values[np.arange(n), np.maximum(got.types, 0), got.gpus]
    assert np.isfinite(worth).all()
    assert got.objective == pytest.approx(float(worth.sum()), abs=1e-9)


@st.composite
def typed_tables(draw: st.DrawFn) -> tuple[np.ndarray, list[int]]:
    jobs = draw(st.integers(0, 4))
    types = draw(st.integers(2, 3))
    width = draw(st.sampled_from([2, 4]))
    cells = draw(st.lists(CELLS, min_size=jobs * types * width, max_size=jobs * types * width))
    values = np.array(cells, dtype=float).reshape(jobs, types, width)
    nothing = draw(st.lists(st.sampled_from([0.0, -np.inf, 0.2]), min_size=jobs, max_size=jobs))
    values[:, :, 0] = np.array(nothing, dtype=float)[:, None]
    caps = draw(st.lists(st.integers(0, 5), min_size=types, max_size=types))
    return values, caps


@settings(max_examples=200, deadline=None)
@given(typed_tables())
def test_the_allocation_is_brute_force_s_best_or_infeasible_exactly_when_it_is(
    case: tuple[np.ndarray, list[int]],
) -> None:
    values, caps = case
    best = brute_typed(values, caps)
    for solve in (allocate_typed, allocate_typed_reference):
        try:
            got = solve(values, caps)
        except Infeasible:
            assert best is None, solve
            continue
        assert best is not None, solve
        _holds(values, caps, got)
        assert got.objective == pytest.approx(best, abs=1e-6), solve


def _random(seed: int, jobs: int, types: int, k_max: int) -> np.ndarray:
    """Concave speedups, a speed per job and type, k_max per job, some jobs required."""
    rng = np.random.default_rng(seed)
    k = np.arange(k_max + 1, dtype=float)
    power = rng.uniform(0.3, 0.95, jobs)
    speed = rng.uniform(0.2, 3.0, (jobs, types))
    values = speed[:, :, None] * k[None, None, :] ** power[:, None, None]
    values[:, :, 0] = 0.0
    top = rng.integers(1, k_max + 1, (jobs, types))
    values[k[None, None, :] > top[:, :, None]] = -np.inf
    least = rng.integers(1, 3, jobs)
    small = (k[None, None, :] < least[:, None, None]) & (k[None, None, :] > 0)
    values[np.broadcast_to(small, values.shape)] = -np.inf
    values[rng.random(jobs) < 0.1, :, 0] = -np.inf  # a few must be placed
    return values


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_medium_instances_match_the_whole_program(seed: int) -> None:
    values = _random(seed, jobs=200, types=3, k_max=12)
    caps = [120, 80, 90]
    fast = allocate_typed(values, caps)
    reference = allocate_typed_reference(values, caps)
    _holds(values, caps, fast)
    _holds(values, caps, reference)
    assert fast.objective == pytest.approx(reference.objective, abs=1e-6)
    assert fast.searched < reference.searched  # the fixing shrank the search


def test_a_tight_instance_is_searched_and_still_exact() -> None:
    """Two jobs that each want the one fast type whole: the priced split cannot hold both,
    the search decides."""
    values = np.full((3, 2, 5), -np.inf)
    values[:, :, 0] = 0.0
    values[0, 0, 1:] = [2.0, 3.9, 5.0, 6.0]
    values[1, 0, 1:] = [2.0, 3.8, 5.1, 6.1]
    values[2, 0, 1:] = [1.0, 1.9, 2.7, 3.4]
    values[:, 1, 1:] = [1.0, 1.8, 2.5, 3.0]
    caps = [4, 4]
    best = brute_typed(values, caps)
    got = allocate_typed(values, caps)
    _holds(values, caps, got)
    assert got.objective == pytest.approx(best, abs=1e-9)


def test_the_bound_and_the_fixing_are_exact_where_they_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small instances go straight to the search; with that shortcut off, the bound, the
    split and the fixing give brute force's best too."""
    monkeypatch.setattr(typed, "DIRECT_BELOW", 0)
    nothing = np.full((2, 2, 3), -np.inf)
    nothing[:, :, 0] = 0.0  # no job has a count it may run on: every job gets none
    got = allocate_typed(nothing, [4, 4])
    assert got.types.tolist() == [-1, -1]
    assert got.objective == 0.0
    rng = np.random.default_rng(11)
    for _ in range(60):
        values = _random(int(rng.integers(1 << 30)), jobs=4, types=3, k_max=3)
        caps = rng.integers(0, 6, 3).tolist()
        best = brute_typed(values, caps)
        try:
            got = allocate_typed(values, caps)
        except Infeasible:
            assert best is None
            continue
        assert best is not None
        _holds(values, caps, got)
        assert got.objective == pytest.approx(best, abs=1e-6)


@pytest.mark.parametrize("seed", [5, 6])
def test_one_type_is_today_s_dp_bit_for_bit(seed: int) -> None:
    values = _random(seed, jobs=40, types=1, k_max=10)
    got = allocate_typed(values, [50])
    np.testing.assert_array_equal(got.gpus, allocate(values[:, 0, :], 50))
    np.testing.assert_array_equal(got.types, np.where(got.gpus > 0, 0, -1))
    assert got.searched == 0


def test_no_job_and_no_choice() -> None:
    empty = allocate_typed(np.zeros((0, 2, 3)), [1, 1])
    assert empty.types.size == 0
    assert empty.objective == 0.0
    values = np.full((2, 2, 3), -np.inf)
    values[:, :, 0] = 0.0
    nothing = allocate_typed(values, [4, 4])
    assert (nothing.types == -1).all()
    assert (nothing.gpus == 0).all()


def test_infeasible_when_the_required_jobs_cannot_fit() -> None:
    values = np.full((2, 2, 3), -np.inf)
    values[:, 0, 2] = 1.0  # each must run on 2 GPUs of type 0
    with pytest.raises(Infeasible):
        allocate_typed(values, [3, 8])
    with pytest.raises(Infeasible):
        allocate_typed_reference(values, [3, 8])
    assert allocate_typed(values, [4, 0]).gpus.tolist() == [2, 2]
    values[0] = -np.inf  # a required job with no allowed count
    with pytest.raises(Infeasible, match="-inf in every column"):
        allocate_typed(values, [10, 10])


@pytest.mark.parametrize(
    ("values", "caps", "field", "valid"),
    [
        (np.zeros((2, 3)), [1, 1], "values.shape", "(jobs, types >= 1, k_max + 1 >= 1)"),
        (np.full((1, 2, 2), np.nan), [1, 1], "values[0, 0, 0]", "finite or -inf"),
        (np.array([[[0.0, 1.0], [0.5, 1.0]]]), [1, 1], "values[0, :, 0]", "the same for every"),
        (np.zeros((1, 2, 2)), [1], "capacities", "2 counts, one per type"),
        (np.zeros((1, 2, 2)), 3, "capacities", "one per type"),
        (np.zeros((1, 2, 2)), [1, -1], "capacities[1]", "an integer number of GPUs >= 0"),
    ],
)
def test_bad_input_is_refused_by_name(
    values: np.ndarray, caps: object, field: str, valid: str
) -> None:
    with pytest.raises(SpecError) as err:
        allocate_typed(values, caps)
    assert err.value.field == field
    assert valid in str(err.value), str(err.value)
