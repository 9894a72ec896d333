"""The JSA's job-specific measurement: single-device step time at several per-GPU batches.

:func:`profile_job` times one training iteration at each per-GPU batch ``m`` the caller
lists and turns the medians into a :class:`bellows.scaling.JobProfile` (``t_proc(m)``
points plus the parameter count). It knows nothing of torch: the caller hands it
``make_step(m)``, which builds the iteration for batch ``m`` (and may raise when ``m``
does not fit in device memory), and an ``is_out_of_memory`` test for such errors. The
first batch that does not fit ends the sweep; the largest one that did is reported as the
job's ``m_max`` (its ``bellows.io/max-batch-per-gpu``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bellows.jobs import SpecError, StepProfile
from bellows.profiling.measuring import Timing, check_batches, time_iterations
from bellows.scaling import JobProfile

__all__ = ["JobProfileRun", "profile_job"]


@dataclass(frozen=True)
class JobProfileRun:
    """What a profiling sweep measured and the profile it yields."""

    profile: JobProfile
    timings: tuple[tuple[int, Timing], ...]
    out_of_memory_at: int | None

    @property
    def largest_batch(self) -> int:
        """Largest per-GPU batch that ran: the job's ``m_max`` if the sweep hit OOM."""
        return self.timings[-1][0]


def _never(error: BaseException) -> bool:
    return False


def profile_job(
    make_step: Callable[[int], Callable[[], object]],
    local_batches: Sequence[int],
    *,
    weights: int,
    iterations: int,
    warmup: int,
    clock: Callable[[], float],
    synchronize: Callable[[], None] = lambda: None,
    is_out_of_memory: Callable[[BaseException], bool] = _never,
    release: Callable[[], None] = lambda: None,
    source: str = "",
) -> JobProfileRun:
    """Time ``make_step(m)`` for every ``m`` in ``local_batches`` (increasing).

    ``release`` frees device memory between batch sizes (e.g. the CUDA cache), so that one
    size's leftovers do not make the next one fail.
    """
    batches = check_batches(local_batches)
    timings: list[tuple[int, Timing]] = []
    out_of_memory_at: int | None = None
    for m in batches:
        try:
            step = make_step(m)
            timing = time_iterations(
                step, iterations=iterations, warmup=warmup, clock=clock, synchronize=synchronize
            )
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            out_of_memory_at = m
            release()
            break
        timings.append((m, timing))
        release()
    if not timings:
        raise SpecError(
            "local_batches",
            list(batches),
            f"at least one batch that fits in device memory (batch {batches[0]} did not)",
        )
    step_profile = StepProfile(
        tuple(m for m, _ in timings), tuple(max(t.median, 1e-9) for _, t in timings)
    )
    profile = JobProfile(weights=weights, step=step_profile, source=source)
    return JobProfileRun(profile, tuple(timings), out_of_memory_at)
