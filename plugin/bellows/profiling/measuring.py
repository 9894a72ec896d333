"""Timing repeated iterations: warm-up, then one clock reading per iteration, median kept.

No torch and no real clock here: the caller passes the step to run, the clock to read and
the ``synchronize`` hook that waits for queued device work (CUDA kernels run
asynchronously, so reading the clock without it would time the launch, not the work).
The median is kept because the first iterations after warm-up and the odd interruption
from another process skew a mean, not a median.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bellows.jobs import SpecError

__all__ = ["Timing", "time_iterations"]


def _noop() -> None:
    return None


@dataclass(frozen=True)
class Timing:
    """Seconds per iteration of ``iterations`` timed runs (after ``warmup`` untimed ones)."""

    seconds: tuple[float, ...]
    warmup: int

    def __post_init__(self) -> None:
        if not self.seconds:
            raise SpecError("seconds", self.seconds, "at least one timed iteration")
        for i, value in enumerate(self.seconds):
            if not math.isfinite(value) or value < 0:
                raise SpecError(f"seconds[{i}]", value, "a finite number >= 0 (clock went back?)")

    @property
    def median(self) -> float:
        return float(statistics.median(self.seconds))

    @property
    def spread(self) -> float:
        """Relative interquartile range: how much to trust :attr:`median`."""
        if len(self.seconds) < 4 or self.median == 0:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.seconds, n=4)
        return float((q3 - q1) / self.median)


def _count(name: str, value: int, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(name, value, f"an integer >= {minimum}")
    return value


def time_iterations(
    step: Callable[[], object],
    *,
    iterations: int,
    warmup: int,
    clock: Callable[[], float],
    synchronize: Callable[[], None] = _noop,
) -> Timing:
    """Run ``step`` ``warmup`` times untimed, then time each of ``iterations`` runs."""
    _count("iterations", iterations, 1)
    _count("warmup", warmup, 0)
    for _ in range(warmup):
        step()
    synchronize()
    seconds: list[float] = []
    for _ in range(iterations):
        start = clock()
        step()
        synchronize()
        seconds.append(clock() - start)
    return Timing(tuple(seconds), warmup)


def check_batches(local_batches: Sequence[int]) -> tuple[int, ...]:
    """Distinct per-GPU batch sizes in increasing order; each an integer >= 1."""
    if not local_batches:
        raise SpecError("local_batches", list(local_batches), "at least one batch size")
    for i, m in enumerate(local_batches):
        _count(f"local_batches[{i}]", m, 1)
    return tuple(sorted(set(local_batches)))
