"""What a round maximises: the per-job speedup table turned into the DP's value table.

The exact DP (:func:`bellows.optimizer.allocate`) maximises a *separable* sum, one term per
job and GPU count; each objective here maps a job's (restart-priced) speedup ``S(k)`` to such
a term, so every one of them is solved exactly:

* :attr:`Objective.SPEEDUP` (the paper's): ``S(k)``. The sum of speedups gives each next GPU
  to the job that scales best, whatever its size: it concentrates GPUs on the most scalable
  jobs and starves the ones that scale poorly.
* :attr:`Objective.FAIR`: ``-1 / S(k)``, Pollux's generalised mean of speedups with exponent
  ``p = -1`` (OSDI'21, eq. 11; with ``p = -1`` the mean is ``n / sum(1/S)``, so maximising it
  is maximising ``sum(-1/S)``). A GPU is worth ``S(k+1) - S(k)`` over ``S(k) S(k+1)``: the
  less a job has, the more its next GPU counts. No job of a round gets 0 GPUs (admission
  places every admitted job on at least its smallest count), so the ``-inf`` Pollux gives
  an unplaced job never arises; a queued job that does not fit is not in the sum at all.
* :attr:`Objective.REMAINING`: ``S(k) * (T_0 / max(T, T_0)) ** REMAINING_EXPONENT``, the
  speedup weighted by a power of the inverse of the job's remaining one-GPU time ``T``
  (``T_0 = REMAINING_UNIT_S``, so every weight is in ``(0, 1]`` and sums stay in the exact
  grid's range). GPUs lean to the jobs nearest their end (shortest-remaining-first, softened: with
  the power 1 jobs traded GPUs whenever their order changed). The running jobs of one
  template (one speedup table) share one weight, that of their mean ``T``
  (:func:`shared_remaining`): two of them with different weights would trade GPU counts
  whenever the weighted gain beat the two restarts priced in (a *pure swap*, two halts for
  no throughput: 15 on the ITP replay with each job's own ``T``); with one weight on one
  table, and the restart priced into every move, exchanging their counts is always worth
  less than keeping them. Waiting jobs keep their own ``T`` (a start is no swap).
* :attr:`Objective.SLACK`: :attr:`Objective.REMAINING`'s weights with their power scaled by
  the cluster's slack (:func:`slack`): ``REMAINING_EXPONENT * max(0, 1 - need / (SLACK_SHARE *
  C))``, ``need`` the GPUs the running jobs and those admission takes this round need at
  their smallest, ``C`` the capacity. On an idle cluster it is :attr:`Objective.REMAINING`;
  from ``SLACK_SHARE`` of the cluster taken at the jobs' smallest on (a queue that cannot
  be admitted included) it is the sum of speedups. Near a backlog a GPU given to a job near
  its end instead of the one that scales best is throughput lost, and every job that will
  queue pays for it: on the ITP replay (a real trace, queued half of its time)
  :attr:`Objective.REMAINING` cost avg JCT 913 -> 1 040 min, the queue growing by a quarter
  for 1.3 % more GPU-time. ``need`` is the core's state, the same whichever candidates a
  round offers (the shortcuts' and the full optimizer's).

Values that are ``-inf`` (counts a job may not take) stay ``-inf``, and every finite one stays
finite: an objective changes what a count is worth, never which counts are allowed.
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np
import numpy.typing as npt

__all__ = [
    "REMAINING_EXPONENT",
    "SLACK_SHARE",
    "Objective",
    "objective_values",
    "shared_remaining",
    "slack",
]

F64 = npt.NDArray[np.float64]

FAIR_FLOOR = 1e-3
"""Smallest speedup :attr:`Objective.FAIR` divides by (Pollux adds 1e-3 to every speedup)."""

REMAINING_UNIT_S = 60.0
"""Remaining one-GPU seconds of weight 1 in :attr:`Objective.REMAINING` (shorter: 1 too). A
fixed unit, not the round's shortest, so that a job's terms do not depend on which others
are offered with it (the core's shortcuts offer fewer, and must decide the same)."""

REMAINING_EXPONENT = 0.3
"""The power of ``T_min / T`` in :attr:`Objective.REMAINING`'s weights. 1 (Smith's rule,
shortest remaining first) moved jobs whenever their order changed: on the 400-GPU bursty
scenario 0.53 rescales per job and 4 pure swaps, avg JCT 13.6 min against 11.2 for the sum
of speedups; 0.25 kept the order's gain on the Pollux workloads (avg JCT 12-18 % below the
sum of speedups, 2-4 % below the power 1) and beat the sum of speedups on bursty too
(``docs/autoscaler.md``, "Round objectives"; measured with the round's shortest ``T`` as
the unit, before :data:`REMAINING_UNIT_S`). 0.3 since issue 36's early rounds: with an
early round at a twentieth of the running jobs finished (spaced 60 s) and a growing restart
price, the calibrated simulator's median workload gains 5 % and every issue 10 target on
bursty holds (``docs/autoscaler.md``, "Early rounds, spaced: the defaults re-decided"). A job
reporting half its step time gained nothing at 0.3 once the remaining time followed the
progress a job has shown (``progress.shown_left``)."""

SLACK_SHARE = 0.45
"""The share of the capacity the running and admitted jobs' smallest allocations may take
before :attr:`Objective.SLACK` weighs no job by its remaining time. Measured on the ITP
replay and the Pollux workloads (``docs/autoscaler.md``, "Round objectives"): 0.4 kept the
ITP replay within 2 % of the sum of speedups but lost most of the Pollux gain (0.978x the
reference's avg JCT on the median workload), 0.5 kept more of it (0.920x) but cost ITP 2.9 %;
0.45: 0.929x (worst workload 1.041x) and ITP +2.1 %. On the calibrated simulator (issue 36)
``slack`` at 0.45 is 1.324x the published Pollux on the median workload against 1.057x for
:attr:`Objective.REMAINING`, which is the default since ("Re-deciding the rules")."""


class Objective(StrEnum):
    """The sum a round maximises (see the module docstring)."""

    SPEEDUP = "speedup"  # sum of S(k): the paper's
    FAIR = "fair"  # sum of -1/S(k): Pollux's p = -1 fairness
    REMAINING = "remaining"  # sum of S(k) weighted by 1 / remaining one-GPU time
    SLACK = "slack"  # REMAINING's weights, their power scaled by the cluster's slack


def slack(need: int, capacity: int) -> float:
    """The share of :data:`REMAINING_EXPONENT` :attr:`Objective.SLACK` weighs with when the
    running and admitted jobs need ``need`` GPUs at their smallest on ``capacity``: 1 on an
    idle cluster, 0 from :data:`SLACK_SHARE` of it taken on (and on no GPUs)."""
    if capacity <= 0:
        return 0.0
    return max(0.0, 1.0 - need / (SLACK_SHARE * capacity))


def objective_values(
    values: F64,
    objective: Objective,
    remaining_s: F64 | None = None,
    *,
    share: float = 1.0,
    exponent: float = REMAINING_EXPONENT,
) -> F64:
    """``values`` (speedups ``[jobs, width+1]``, ``-inf`` where not allowed) as the terms of
    ``objective``; ``remaining_s[j]`` is job ``j``'s remaining one-GPU seconds (needed by
    :attr:`Objective.REMAINING` and :attr:`Objective.SLACK`); ``exponent`` is the weights'
    power (``AutoscalerConfig.remaining_exponent``) and ``share`` scales it for
    :attr:`Objective.SLACK` (:func:`slack`; 0: the speedups as they are)."""
    power = exponent
    if objective is Objective.SLACK:
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"share: {share!r}, a number in [0, 1] is needed")
        power *= share
    if objective is Objective.SPEEDUP or power == 0.0:
        return values
    finite = np.isfinite(values)  # the same counts stay allowed, whatever their worth
    if objective is Objective.FAIR:  # a speedup of 0 (a job with nothing left) is -1/0.001
        fair = -1.0 / np.maximum(np.where(finite, values, 1.0), FAIR_FLOOR)
        return np.asarray(np.where(finite, fair, -np.inf), dtype=np.float64)
    if remaining_s is None or remaining_s.shape != (values.shape[0],):
        raise ValueError("remaining_s: one remaining time per row is needed")
    weight = (REMAINING_UNIT_S / np.maximum(remaining_s, REMAINING_UNIT_S)) ** power
    return np.asarray(np.where(finite, values * weight[:, None], -np.inf), dtype=np.float64)


def shared_remaining(remaining_s: F64, groups: npt.NDArray[np.int64]) -> F64:
    """``remaining_s`` with every job of one group (``groups[j] >= 0``; -1: no group) given
    the group's mean, in row order: :attr:`Objective.REMAINING` weights the running jobs of
    one template alike (the module docstring says why)."""
    out = np.array(remaining_s, dtype=np.float64)
    grouped = groups >= 0
    if grouped.any():
        _, inverse = np.unique(groups[grouped], return_inverse=True)
        sums = np.bincount(inverse, weights=out[grouped])
        out[grouped] = (sums / np.bincount(inverse))[inverse]
    return out
