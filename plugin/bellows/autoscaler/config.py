"""Settings of the autoscaler core, validated on construction."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bellows.autoscaler.objectives import REMAINING_EXPONENT, Objective
from bellows.jobs import MAX_MIN_RUNTIME_S, JobSpec, SpecError, check_restart_s
from bellows.optimizer import Method
from bellows.optimizer.solving import METHODS

__all__ = [
    "BELLOWS_DELTA_S",
    "DEFAULT_OBJECTIVE",
    "DEFAULT_RESTART_S",
    "EARLY_GAP_S",
    "EARLY_SHARE",
    "PAPER_DELTA_S",
    "RESTART_GROWTH",
    "AutoscalerConfig",
    "Mode",
    "Objective",
    "Policy",
    "restart_s",
    "restart_s_each",
]

DEFAULT_RESTART_S = 60.0
"""Seconds of progress a halt costs by default: see ``docs/autoscaler.md``, "Restart cost"."""
PAPER_DELTA_S = 600.0
"""The paper's Δ: 10 minutes between rounds."""
BELLOWS_DELTA_S = 120.0
"""Bellows mode's Δ: rounds only rebalance (starts happen at events), so they can come more
often; ``benchmarks/policies.py`` measured 90 to 180 s alike and 600 s worse."""
EARLY_SHARE = 0.05
"""Bellows mode's early round (the paper's hybrid trigger): a round comes before Δ once this
share of the jobs running after the last round has finished, no sooner than
:data:`EARLY_GAP_S` after it; with :data:`RESTART_GROWTH` and the weights' power 0.3, the
rules re-decided on the calibrated simulator (issue 36; ``docs/autoscaler.md``, "Early
rounds, spaced: the defaults re-decided")."""
EARLY_GAP_S = 60.0
"""Seconds an early round waits at least after the last round: without it, on the 400-GPU
bursty scenario every few completions of a burst started a round and rescales per job rose
from 0.31 to 0.70 (avg JCT 0.343x paper mode's against 0.312x)."""
RESTART_GROWTH = 0.2
"""Bellows mode's ``restart_growth`` by default: each earlier move adds a fifth of a restart
to the price of a job's next (0 before issue 36's early rounds; with them, it keeps rescales
per job on bursty at 0.47 where 0 gives 0.51). 0.25 until jobs' profiles carried their
measured placements: with them, 0.2 brings Bellows mode within issue 36's targets against
the published Pollux (0.892 / 0.986 against 0.903 / 0.987; docs/simulator.md, "Deciding with
the measured placements")."""
DEFAULT_OBJECTIVE = Objective.REMAINING
"""What Bellows mode's rounds maximise by default: speedups weighted by a power of the jobs'
remaining time, re-decided on the calibrated simulator (issue 36; ``docs/autoscaler.md``,
"Re-deciding the rules on the calibrated simulator"); paper mode keeps the sum of
speedups."""


class Policy(StrEnum):
    """Which batch sizes the optimizer may choose."""

    ELASTIC = "elastic"  # the best batch in [b_min, b_max] for each GPU count
    BASELINE = "baseline"  # the owner's batch_size, spread over however many GPUs


class Mode(StrEnum):
    """When GPUs move: the paper's rounds only, or Bellows' work-conserving rounds."""

    PAPER = "paper"  # every decision waits for a round (the Δ grid, the hybrid trigger)
    BELLOWS = "bellows"  # free GPUs go to waiting jobs at once; rounds move the rest


@dataclass(frozen=True)
class AutoscalerConfig:
    """How the autoscaler decides. The defaults are Bellows mode; :meth:`paper` gives the
    paper's autoscaler, with every option beyond it off.

    * ``mode``: :class:`Mode`. In Bellows mode an arrival, a completion or a capacity
      change starts waiting jobs on the free GPUs at once (FIFO, with backfill when
      ``backfill``), never touching a running job; only rounds take GPUs from running jobs.
    * ``delta_s``: seconds between rounds (the paper's Δ: 10 min in paper mode, 2 min in
      Bellows mode); 0 means a round at every arrival or completion.
    * ``queue``: keep jobs that do not fit for the next round (else reject them).
    * ``early_share``: the paper's hybrid trigger; a round starts before Δ has passed once
      this share of the running jobs has finished since the last round (``None`` or 0:
      off; :data:`EARLY_SHARE` in Bellows mode, off in paper mode).
    * ``early_gap_s``: an early round comes no sooner than this after the last round
      (:data:`EARLY_GAP_S`; 0: at the completion that reached the share).
    * ``restart_s``: seconds of progress a halt costs (checkpoint, pods restart), for
      jobs that do not set their own (``JobSpec.restart_s``). The optimizer prices it: a
      running job moves only when its remaining work finishes sooner by more than
      ``max(1, hysteresis)`` times that cost.
    * ``min_runtime_s``: a running job that started or resumed less than this ago is not
      shrunk by a round to give GPUs to another (jobs may set their own,
      ``JobSpec.min_runtime_s``); a capacity loss still shrinks and preempts it. 0: off.
    * ``max_min_runtime_s``: the most a job's own ``min_runtime_s`` may be (an admin's cap:
      one tenant must not keep its GPUs from every other for a day). The controller's
      intake clamps a job's own value above it, with a ``Clamped`` Event, before the job
      reaches the core (``controller.maxMinRuntimeSeconds``, 3600 s there); here its
      default is :data:`~bellows.jobs.MAX_MIN_RUNTIME_S`, no cap beyond the spec's own.
    * ``backfill``: admit later arrivals past a head-of-queue job that does not fit.
    * ``optimizer``: the optimizer path each round (:data:`bellows.optimizer.Method`):
      ``"auto"`` picks the fastest by size and may load JAX; ``"numpy"`` never imports JAX
      (the live controller's default, for its memory). Every path gives the same decisions.
    * ``node_counts``: rounds and fills choose only GPU counts that tile the cluster's nodes
      (divisors of a node, then whole nodes: :mod:`bellows.autoscaler.shapes`), so that
      jobs can be packed on the fewest nodes; off by default (any count, as the paper's).
    * ``restart_growth``: each rescale a job has made adds this multiple of its restart
      cost to the price of its next move (a penalty growing with restarts, as Sia's), so a
      job offered a bigger count every round does not take every step; 0: off;
      :data:`RESTART_GROWTH` in Bellows mode, 0 in paper mode.
    * ``objective``: the sum a round maximises (:class:`~bellows.autoscaler.objectives.
      Objective`): speedups weighted by a power of the inverse of remaining time (the
      default, :data:`DEFAULT_OBJECTIVE`), the same weights with their power scaled by the
      cluster's slack, the sum of speedups (the paper's, paper mode's always), or Pollux's
      ``p = -1`` fairness; see ``docs/autoscaler.md``, "Round objectives".
    * ``remaining_exponent``: the power of ``remaining``'s (and ``slack``'s) weights, in
      [0, 1] (0: the sum of speedups; 1: Smith's rule); :data:`~bellows.autoscaler.
      objectives.REMAINING_EXPONENT` (0.3) by default (``docs/autoscaler.md``, "Early
      rounds, spaced: the defaults re-decided").
    """

    mode: Mode = Mode.BELLOWS
    policy: Policy = Policy.ELASTIC
    queue: bool = True
    delta_s: float = BELLOWS_DELTA_S
    early_share: float | None = EARLY_SHARE
    early_gap_s: float = EARLY_GAP_S
    restart_s: float = DEFAULT_RESTART_S
    hysteresis: float = 1.0
    backfill: bool = True
    min_runtime_s: float = 0.0
    max_min_runtime_s: float = MAX_MIN_RUNTIME_S
    optimizer: Method = "auto"
    node_counts: bool = False
    objective: Objective = DEFAULT_OBJECTIVE
    restart_growth: float = RESTART_GROWTH
    remaining_exponent: float = REMAINING_EXPONENT

    @classmethod
    def paper(cls, **changes: object) -> AutoscalerConfig:
        """The paper's autoscaler: rounds only, no queue, no restart cost, no backfill;
        ``changes`` override any of it (``bellows reproduce`` keeps the paper's own)."""
        settings: dict[str, object] = {
            "mode": Mode.PAPER,
            "delta_s": PAPER_DELTA_S,
            "queue": False,
            "restart_s": 0.0,
            "hysteresis": 0.0,
            "backfill": False,
            "objective": Objective.SPEEDUP,
            "restart_growth": 0.0,
            "early_share": None,
        }
        settings.update(changes)
        return cls(**settings)  # type: ignore[arg-type]

    def __post_init__(self) -> None:
        if not isinstance(self.mode, Mode):
            try:
                object.__setattr__(self, "mode", Mode(self.mode))
            except ValueError:
                raise SpecError("mode", self.mode, "'bellows' or 'paper'") from None
        if not isinstance(self.policy, Policy):
            try:
                object.__setattr__(self, "policy", Policy(self.policy))
            except ValueError:
                raise SpecError("policy", self.policy, "'elastic' or 'baseline'") from None
        if not (math.isfinite(self.delta_s) and self.delta_s >= 0):
            raise SpecError("delta_s", self.delta_s, "a finite number of seconds >= 0")
        gap = self.early_gap_s
        if (
            isinstance(gap, bool)
            or not isinstance(gap, int | float)
            or not (math.isfinite(gap) and gap >= 0)
        ):
            raise SpecError("early_gap_s", gap, "a finite number of seconds >= 0")
        share = self.early_share
        if share is not None:
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
                raise SpecError("early_share", share, "a share in [0, 1] (0: off) or None (off)")
            object.__setattr__(self, "early_share", float(share) if share > 0 else None)
        restart = check_restart_s("restart_s", self.restart_s)
        object.__setattr__(self, "restart_s", restart)
        least = self.min_runtime_s
        if not (math.isfinite(least) and 0 <= least <= MAX_MIN_RUNTIME_S):
            raise SpecError("min_runtime_s", least, f"seconds in [0, {MAX_MIN_RUNTIME_S:g}]")
        most = self.max_min_runtime_s
        if not (math.isfinite(most) and 0 <= most <= MAX_MIN_RUNTIME_S):
            raise SpecError("max_min_runtime_s", most, f"seconds in [0, {MAX_MIN_RUNTIME_S:g}]")
        if not (math.isfinite(self.hysteresis) and self.hysteresis >= 0):
            raise SpecError("hysteresis", self.hysteresis, "a finite number >= 0")
        if not isinstance(self.node_counts, bool):
            raise SpecError("node_counts", self.node_counts, "true or false")
        if not (math.isfinite(self.restart_growth) and 0 <= self.restart_growth <= 100):
            raise SpecError("restart_growth", self.restart_growth, "a number in [0, 100]")
        power = self.remaining_exponent
        if isinstance(power, bool) or not isinstance(power, int | float) or not 0 <= power <= 1:
            raise SpecError("remaining_exponent", power, "a number in [0, 1]")
        if not isinstance(self.objective, Objective):
            try:
                object.__setattr__(self, "objective", Objective(self.objective))
            except ValueError:
                choices = " or ".join(repr(o.value) for o in Objective)
                raise SpecError("objective", self.objective, choices) from None
        if self.optimizer not in METHODS:
            raise SpecError("optimizer", self.optimizer, " or ".join(map(repr, METHODS)))


def restart_s(job: JobSpec, config: AutoscalerConfig) -> float:
    """``job``'s restart cost (:func:`bellows.jobs.check_restart_s`): its own figure, else
    the cluster's default ``restart_s``."""
    return config.restart_s if job.restart_s is None else job.restart_s


def restart_s_each(jobs: Iterable[JobSpec], config: AutoscalerConfig) -> list[float]:
    """:func:`restart_s` of each job, without a call per job (a round prices ~100)."""
    default = config.restart_s
    return [default if job.restart_s is None else job.restart_s for job in jobs]
