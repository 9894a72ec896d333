"""Hypothesis: allocate() is always feasible, and Infeasible exactly when nothing fits."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.optimizer import Infeasible, Method, allocate
from tests.optimizer.brute import brute_force, objective

# values from a small set (with -inf) so that ties and infeasible rows are common
CELLS = st.sampled_from([-np.inf, -np.inf, 0.0, 0.5, 1.0, 1.5, 2.5, 4.0])


@st.composite
def tables(draw: st.DrawFn) -> tuple[np.ndarray, int, Method]:
    jobs = draw(st.integers(0, 5))
    k_max = draw(st.sampled_from([1, 3]))
    cells = draw(st.lists(CELLS, min_size=jobs * (k_max + 1), max_size=jobs * (k_max + 1)))
    values = np.array(cells, dtype=float).reshape(jobs, k_max + 1)
    method: Method = draw(st.sampled_from(["auto", "numpy", "dense", "band"]))
    return values, draw(st.integers(0, 9)), method


@settings(max_examples=150, deadline=None)
@given(tables())
def test_result_is_feasible_and_optimal_or_infeasible_exactly_when_brute_force_is(
    case: tuple[np.ndarray, int, Method],
) -> None:
    values, capacity, method = case
    best, chosen = brute_force(values, capacity)
    try:
        gpus = allocate(values, capacity, method=method)
    except Infeasible:
        assert chosen is None
        return
    assert chosen is not None
    assert gpus.shape == (values.shape[0],)
    assert gpus.sum() <= capacity
    assert (gpus >= 0).all()
    assert (gpus < values.shape[1]).all()
    assert np.isfinite(values[np.arange(values.shape[0]), gpus]).all()
    assert objective(values, gpus) == best
    assert tuple(gpus.tolist()) == chosen
