"""Timing loops and profile sweeps on a fake clock: exact, deterministic, no torch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bellows.jobs import SpecError
from bellows.profiling import profile_job, time_iterations
from bellows.profiling.measuring import Timing


class FakeDevice:
    """A clock that only moves when the fake work runs, and a log of what was called."""

    def __init__(self) -> None:
        self.now = 0.0
        self.log: list[str] = []

    def clock(self) -> float:
        return self.now

    def synchronize(self) -> None:
        self.log.append("sync")

    def work(self, seconds: float) -> Callable[[], None]:
        def step() -> None:
            self.now += seconds
            self.log.append("step")

        return step


def test_median_of_timed_iterations_ignores_warmup() -> None:
    device = FakeDevice()
    durations = iter([9.0, 9.0, 1.0, 3.0, 2.0, 100.0, 2.5])

    def step() -> None:
        device.now += next(durations)

    timing = time_iterations(step, iterations=5, warmup=2, clock=device.clock)
    assert timing.seconds == (1.0, 3.0, 2.0, 100.0, 2.5)
    assert timing.median == 2.5  # the 100 s outlier does not move it


def test_device_is_synchronized_before_every_clock_reading() -> None:
    device = FakeDevice()
    time_iterations(
        device.work(0.1), iterations=2, warmup=1, clock=device.clock, synchronize=device.synchronize
    )
    assert device.log == ["step", "sync", "step", "sync", "step", "sync"]


@pytest.mark.parametrize(("iterations", "warmup"), [(0, 1), (1, -1), (True, 0)])
def test_bad_counts_are_named(iterations: int, warmup: int) -> None:
    with pytest.raises(SpecError, match=r"iterations|warmup"):
        time_iterations(lambda: None, iterations=iterations, warmup=warmup, clock=lambda: 0.0)


def test_spread_is_the_relative_interquartile_range() -> None:
    assert Timing((1.0, 1.0, 1.0, 1.0), 0).spread == 0.0
    assert Timing((1.0, 2.0, 3.0, 4.0, 5.0), 0).spread == pytest.approx((4.5 - 1.5) / 3.0)
    with pytest.raises(SpecError, match="seconds"):
        Timing((), 0)
    with pytest.raises(SpecError, match=r"seconds\[1\]"):
        Timing((1.0, -1.0), 0)


def _sweep(device: FakeDevice, cost: Callable[[int], float], batches: list[int], **kw: object):
    return profile_job(
        lambda m: device.work(cost(m)),
        batches,
        weights=1000,
        iterations=3,
        warmup=1,
        clock=device.clock,
        **kw,  # type: ignore[arg-type]
    )


def test_profile_holds_the_median_step_time_per_batch() -> None:
    device = FakeDevice()
    run = _sweep(device, lambda m: 0.01 + 0.002 * m, [32, 8, 16, 8], source="fake")
    assert run.profile.weights == 1000
    assert run.profile.step.local_batches == (8, 16, 32)
    assert run.profile.step.seconds == pytest.approx((0.026, 0.042, 0.074))
    assert run.profile.source == "fake"
    assert run.out_of_memory_at is None
    assert run.largest_batch == 32


class OutOfMemoryError(RuntimeError):
    pass


def test_first_batch_that_does_not_fit_ends_the_sweep() -> None:
    device = FakeDevice()
    released: list[int] = []

    def make_step(m: int) -> Callable[[], None]:
        if m >= 64:
            raise OutOfMemoryError(f"CUDA out of memory at {m}")
        return device.work(0.001 * m)

    run = profile_job(
        make_step,
        [16, 32, 64, 128],
        weights=5,
        iterations=2,
        warmup=0,
        clock=device.clock,
        is_out_of_memory=lambda e: isinstance(e, OutOfMemoryError),
        release=lambda: released.append(1),
    )
    assert run.profile.step.local_batches == (16, 32)
    assert run.out_of_memory_at == 64
    assert run.largest_batch == 32
    assert len(released) == 3  # after each size, and after the failure


def test_other_errors_are_not_mistaken_for_out_of_memory() -> None:
    def make_step(m: int) -> Callable[[], None]:
        raise ValueError("shape mismatch")

    with pytest.raises(ValueError, match="shape mismatch"):
        profile_job(make_step, [8], weights=1, iterations=1, warmup=0, clock=lambda: 0.0)


def test_nothing_fits_is_an_error_naming_the_smallest_batch() -> None:
    def make_step(m: int) -> Callable[[], None]:
        raise OutOfMemoryError("out of memory")

    with pytest.raises(SpecError, match="batch 4 did not"):
        profile_job(
            make_step,
            [4, 8],
            weights=1,
            iterations=1,
            warmup=0,
            clock=lambda: 0.0,
            is_out_of_memory=lambda e: True,
        )


@pytest.mark.parametrize("batches", [[], [0, 4], [2.5]])
def test_bad_batch_lists_are_named(batches: list[int]) -> None:
    with pytest.raises(SpecError, match="local_batches"):
        profile_job(
            lambda m: lambda: None, batches, weights=1, iterations=1, warmup=0, clock=lambda: 0.0
        )
