"""admit(): FIFO prefix, backfill, required rows, and agreement with the layer-by-layer DP."""

from __future__ import annotations

import numpy as np
import pytest

from bellows.jobs import SpecError
from bellows.optimizer import (
    Infeasible,
    admit,
    admit_reference,
    allocate_reference,
    best_count,
)
from tests.optimizer.brute import random_table


def _case(rng: np.random.Generator) -> tuple[np.ndarray, int, int]:
    jobs = int(rng.integers(1, 12))
    values = random_table(rng, jobs, int(rng.choice([2, 4])), holes=0.3, must_run=0.8)
    required = int(rng.integers(0, jobs + 1))
    return values, int(rng.integers(0, 16)), required


@pytest.mark.parametrize("backfill", [False, True])
def test_equals_the_layer_by_layer_reference_on_every_path(backfill: bool) -> None:
    rng = np.random.default_rng(21 + backfill)
    seen = 0
    for _ in range(120):
        values, capacity, required = _case(rng)
        try:
            expected = admit_reference(values, capacity, required=required, backfill=backfill)
        except Infeasible:
            with pytest.raises(Infeasible, match="required rows"):
                admit(values, capacity, required=required, backfill=backfill)
            continue
        for method in ("auto", "numpy", "dense"):
            got = admit(values, capacity, required=required, backfill=backfill, method=method)
            assert got.admitted == expected.admitted
            np.testing.assert_array_equal(got.gpus, expected.gpus)
            assert got.objective == expected.objective
            assert got.gpus.dtype == np.int64
        seen += 1
    assert seen > 60


def test_best_count_is_what_admit_gives_a_lone_candidate() -> None:
    rng = np.random.default_rng(8)
    seen = 0
    for _ in range(300):
        # dyadic values: frequent exact ties, which go to the fewest GPUs
        row = random_table(rng, 1, int(rng.choice([2, 4, 8])), holes=0.4, dyadic=True)
        capacity = int(rng.integers(0, 12))
        finite = np.flatnonzero(np.isfinite(row[0]))
        if finite.size == 0 or finite[0] > capacity:
            continue
        expected = admit(row, capacity, required=0)
        assert expected.admitted == (0,)
        assert best_count(row[0], int(finite[0]), capacity) == expected.gpus[0]
        seen += 1
    assert seen > 150


def test_fifo_admits_the_longest_fitting_prefix_and_its_optimum() -> None:
    rng = np.random.default_rng(4)
    for _ in range(80):
        values, capacity, required = _case(rng)
        try:
            result = admit(values, capacity, required=required)
        except Infeasible:
            continue
        admitted = list(result.admitted)
        assert admitted == list(range(len(admitted)))  # a prefix, required rows first
        assert len(admitted) >= required
        if len(admitted) < values.shape[0]:  # the next one in line would not fit
            with pytest.raises(Infeasible):
                allocate_reference(values[: len(admitted) + 1], capacity)
        np.testing.assert_array_equal(
            result.gpus[admitted], allocate_reference(values[admitted], capacity)
        )
        assert (result.gpus[len(admitted) :] == 0).all()
        assert result.gpus.sum() <= capacity


def test_backfill_skips_what_does_not_fit_and_goes_on() -> None:
    inf = -np.inf
    values = np.array(
        [
            [inf, 1.0, 1.5, inf],  # running: 1..2 GPUs
            [inf, inf, inf, 3.0],  # needs 3: does not fit beside the running one on 3
            [inf, 2.0, inf, inf],  # needs 1: fits
            [inf, inf, 2.0, inf],  # needs 2: no longer fits
            [0.0, 0.5, inf, inf],  # may wait with 0 GPUs: always fits
        ]
    )
    fifo = admit(values, 3, required=1)
    assert fifo.admitted == (0,)
    assert fifo.gpus.tolist() == [2, 0, 0, 0, 0]
    assert fifo.objective == 1.5
    filled = admit(values, 3, required=1, backfill=True)
    assert filled.admitted == (0, 2, 4)
    # [1, 0, 1, 0, 1] is worth 3.5 too, on as many GPUs: the tie goes to the earlier row
    assert filled.gpus.tolist() == [2, 0, 1, 0, 0]
    assert filled.objective == 1.5 + 2.0 + 0.0
    reference = admit_reference(values, 3, required=1, backfill=True)
    assert reference.admitted == filled.admitted
    assert reference.gpus.tolist() == filled.gpus.tolist()


def test_required_rows_that_cannot_all_run_raise() -> None:
    values = np.array([[-np.inf, 1.0, 2.0], [-np.inf, -np.inf, 2.0], [-np.inf, 1.0, 1.0]])
    with pytest.raises(Infeasible, match=r"required rows need at least 3 GPUs.*capacity=2"):
        admit(values, 2, required=2)
    with pytest.raises(Infeasible):
        admit_reference(values, 2, required=2)
    assert admit(values, 2, required=0).admitted == (0,)


def test_nothing_to_admit() -> None:
    empty = admit(np.zeros((0, 4)), 5, required=0)
    assert empty.admitted == ()
    assert empty.gpus.shape == (0,)
    assert empty.objective == 0.0


@pytest.mark.parametrize("required", [-1, 4, 1.5, True])
def test_bad_required_is_a_spec_error(required: object) -> None:
    with pytest.raises(SpecError, match="required"):
        admit(np.zeros((3, 2)), 2, required=required)
