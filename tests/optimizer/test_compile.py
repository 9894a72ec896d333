"""Padded shapes: a second call in the same size bucket reuses the compiled kernels."""

from __future__ import annotations

import numpy as np

from bellows.optimizer import admit, allocate
from bellows.optimizer.solving import RentRule, bucket
from tests.optimizer.tracing import Traces


def test_bucket_steps_are_quarter_octaves() -> None:
    assert [bucket(x, minimum=8) for x in (1, 8, 9, 11, 17, 20, 21, 100, 1000)] == [
        8, 8, 10, 12, 20, 20, 24, 112, 1024,
    ]  # fmt: skip
    for size in range(1, 5000):
        assert size <= bucket(size, minimum=1) <= max(size * 1.25, 8)


def test_same_padded_shape_does_not_retrace() -> None:
    rng = np.random.default_rng(0)

    def table(jobs: int) -> np.ndarray:
        values = rng.random((jobs, 13))  # k_max 12
        values[:, 0] = -np.inf
        return values

    allocate(table(100), 300, method="dense")
    with Traces() as traces:
        # 97..112 jobs share the 112-row bucket; 256..319 GPUs the 320-wide dense window
        allocate(table(112), 319, method="dense")
        allocate(table(97), 256, method="dense")
        admit(table(100), 300, required=40, method="dense")
    assert traces.count == 0


def test_band_path_reuses_its_kernel_for_the_same_shape() -> None:
    rng = np.random.default_rng(1)
    values = rng.random((100, 13))
    values[:, 0] = -np.inf
    # The first calls may compile for the first width guess, then for the width that fits
    # (wider, or narrower: the guess follows the last instance, kept in the caller's rule).
    rent = RentRule()
    allocate(values, 300, method="band", rent=rent)
    allocate(values, 300, method="band", rent=rent)
    with Traces() as traces:
        allocate(values, 300, method="band", rent=rent)
        allocate(values * 2.0, 300, method="band", rent=rent)  # other values, the same band
    assert traces.count == 0
