"""allocate(): exact against brute force and an exact MILP, on every path, with its ties."""

from __future__ import annotations

import numpy as np
import pytest

from bellows.jobs import SpecError
from bellows.optimizer import Infeasible, Method, allocate, allocate_reference
from bellows.optimizer.errors import min_gpus
from bellows.optimizer.solving import solve_rows
from tests.optimizer.brute import brute_force, milp_objective, objective, random_table

PATHS: tuple[Method, ...] = ("numpy", "dense", "band")


def _instances(seed: int, count: int, *, dyadic: bool) -> list[tuple[np.ndarray, int]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        jobs = int(rng.integers(1, 7))
        k_max = int(rng.choice([1, 2, 4]))
        values = random_table(rng, jobs, k_max, dyadic=dyadic)
        out.append((values, int(rng.integers(0, 15))))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_matches_brute_force_with_its_ties_on_every_path(seed: int) -> None:
    checked = infeasible = 0
    for values, capacity in _instances(seed, 150, dyadic=True):
        best, chosen = brute_force(values, capacity)
        for method in PATHS:
            if chosen is None:
                with pytest.raises(Infeasible):
                    allocate(values, capacity, method=method)
                continue
            gpus = allocate(values, capacity, method=method)
            assert tuple(gpus.tolist()) == chosen, (method, values, capacity)
            assert objective(values, gpus) == best
        checked += chosen is not None
        infeasible += chosen is None
    assert checked > 50
    assert infeasible > 5


def test_matches_exact_milp_on_hundreds_of_random_tables() -> None:
    rng = np.random.default_rng(7)
    compared = 0
    for _ in range(300):
        jobs = int(rng.integers(1, 9))
        values = random_table(rng, jobs, int(rng.choice([2, 4, 6])), holes=0.25)
        capacity = int(rng.integers(0, 20))
        expected = milp_objective(values, capacity)
        if expected is None:
            with pytest.raises(Infeasible):
                allocate_reference(values, capacity)
            continue
        gpus = allocate_reference(values, capacity)
        assert objective(values, gpus) == pytest.approx(expected, rel=1e-9, abs=1e-9)
        compared += 1
    assert compared > 150


@pytest.mark.parametrize("method", ["dense", "band"])
def test_jax_paths_equal_reference_on_larger_tables(method: Method) -> None:
    rng = np.random.default_rng(11)
    for trial in range(6):
        jobs, k_max = 60, 16
        values = random_table(rng, jobs, k_max, holes=0.2, dyadic=trial % 2 == 0)
        capacity = int(rng.integers(100, 300))
        expected = allocate_reference(values, capacity)
        solution = solve_rows(values, capacity, method=method)
        np.testing.assert_array_equal(solution.gpus, expected)
        assert solution.objective == objective(values, expected)
        assert milp_objective(values, capacity) == pytest.approx(solution.objective, rel=1e-9)


def test_band_path_narrows_the_window_and_stays_exact() -> None:
    rng = np.random.default_rng(3)
    values = random_table(rng, 200, 16, holes=0.1, must_run=1.0)
    solution = solve_rows(values, 1200, method="band")
    assert solution.path == "band"
    np.testing.assert_array_equal(solution.gpus, allocate_reference(values, 1200))


def test_identical_rows_tie_everywhere_and_fall_back_exactly() -> None:
    # Every allocation of all GPUs is optimal: the band cannot narrow, the result must still
    # follow the tie rule (later rows as few as possible).
    values = np.tile(np.arange(9, dtype=float), (40, 1))
    values[:, 0] = -np.inf
    for method in PATHS:
        gpus = allocate(values, 100, method=method)
        assert gpus.sum() == 100
        np.testing.assert_array_equal(gpus, allocate_reference(values, 100))
    assert gpus[0] == 8
    assert gpus[-1] == 1


def test_edge_cases() -> None:
    for method in PATHS:
        assert allocate(np.zeros((0, 3)), 5, method=method).shape == (0,)
        one = np.array([[-np.inf, 1.0, 3.0, 2.0]])
        assert allocate(one, 10, method=method).tolist() == [2]
        assert allocate(one, 1, method=method).tolist() == [1]
        optional = np.array([[0.0, 1.0], [0.0, 2.0], [0.0, 0.5]])
        assert allocate(optional, 0, method=method).tolist() == [0, 0, 0]
        assert allocate(optional, 2, method=method).tolist() == [1, 1, 0]
        more_jobs = np.array([[-np.inf, 1.0]] * 3 + [[0.0, 5.0]] * 4)
        gpus = allocate(more_jobs, 5, method=method)
        assert gpus.tolist() == [1, 1, 1, 1, 1, 0, 0]  # earlier rows win the tie
        with pytest.raises(Infeasible, match="capacity=2"):
            allocate(more_jobs, 2, method=method)
        with pytest.raises(Infeasible, match="every column"):
            allocate(np.array([[-np.inf, -np.inf]]), 4, method=method)


def test_returns_int64_and_never_exceeds_capacity() -> None:
    rng = np.random.default_rng(5)
    values = random_table(rng, 30, 8)
    capacity = int(min_gpus(values).sum()) + 7
    gpus = allocate(values, capacity)
    assert gpus.dtype == np.int64
    assert gpus.sum() <= capacity
    assert np.isfinite(values[np.arange(30), gpus]).all()


@pytest.mark.parametrize(
    ("values", "capacity", "field"),
    [
        (np.zeros(3), 2, "values.shape"),
        (np.zeros((2, 2, 2)), 2, "values.shape"),
        (np.zeros((2, 0)), 2, "values.shape"),
        (np.array([[0.0, np.nan]]), 2, "values[0, 1]"),
        (np.array([[0.0, 1.0], [np.inf, 1.0]]), 2, "values[1, 0]"),
        ([["a", "b"]], 2, "values"),
        (np.zeros((2, 2)), -1, "capacity"),
        (np.zeros((2, 2)), 2.0, "capacity"),
        (np.zeros((2, 2)), True, "capacity"),
    ],
)
def test_bad_input_is_a_spec_error_naming_the_argument(
    values: object, capacity: object, field: str
) -> None:
    for fn in (allocate, allocate_reference):
        with pytest.raises(SpecError) as caught:
            fn(values, capacity)
        assert isinstance(caught.value, ValueError)
        assert not isinstance(caught.value, Infeasible)
        assert caught.value.field == field
        assert field in str(caught.value)


def test_unknown_method_is_refused() -> None:
    with pytest.raises(SpecError, match="method"):
        allocate(np.zeros((1, 2)), 1, method="fast")  # type: ignore[arg-type]
