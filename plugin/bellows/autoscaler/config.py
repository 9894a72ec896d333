"""Settings of the autoscaler core, validated on construction."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from bellows.jobs import SpecError
from bellows.optimizer import Method
from bellows.optimizer.solving import METHODS

__all__ = ["AutoscalerConfig", "Policy"]


class Policy(StrEnum):
    """Which batch sizes the optimizer may choose."""

    ELASTIC = "elastic"  # the best batch in [b_min, b_max] for each GPU count
    BASELINE = "baseline"  # the owner's batch_size, spread over however many GPUs


@dataclass(frozen=True)
class AutoscalerConfig:
    """How the autoscaler decides. Defaults follow the paper; options beyond it are off.

    * ``delta_s``: seconds between rounds (the paper's Δ, default 10 min); 0 means a round at
      every arrival or completion.
    * ``queue``: keep jobs that do not fit for the next round (else reject them).
    * ``early_share``: the paper's hybrid trigger; a round starts before Δ has passed once
      this share of the running jobs has finished since the last round (``None``: off).
    * ``restart_cost_s``: seconds of progress a rescale costs (checkpoint, pods restart).
      With ``hysteresis`` a rescale is skipped unless its estimated gain over the job's
      remaining work exceeds ``hysteresis`` times that cost.
    * ``backfill``: admit later arrivals past a head-of-queue job that does not fit.
    * ``optimizer``: the optimizer path each round (:data:`bellows.optimizer.Method`):
      ``"auto"`` picks the fastest by size and may load JAX; ``"numpy"`` never imports JAX
      (the live controller's default, for its memory). Every path gives the same decisions.
    """

    policy: Policy = Policy.ELASTIC
    queue: bool = False
    delta_s: float = 600.0
    early_share: float | None = None
    restart_cost_s: float = 0.0
    hysteresis: float = 0.0
    backfill: bool = False
    optimizer: Method = "auto"

    def __post_init__(self) -> None:
        if not isinstance(self.policy, Policy):
            try:
                object.__setattr__(self, "policy", Policy(self.policy))
            except ValueError:
                raise SpecError("policy", self.policy, "'elastic' or 'baseline'") from None
        if not (math.isfinite(self.delta_s) and self.delta_s >= 0):
            raise SpecError("delta_s", self.delta_s, "a finite number of seconds >= 0")
        if self.early_share is not None and not 0 < self.early_share <= 1:
            raise SpecError("early_share", self.early_share, "a share in (0, 1] or None")
        if not (math.isfinite(self.restart_cost_s) and self.restart_cost_s >= 0):
            raise SpecError("restart_cost_s", self.restart_cost_s, "a finite number >= 0")
        if not (math.isfinite(self.hysteresis) and self.hysteresis >= 0):
            raise SpecError("hysteresis", self.hysteresis, "a finite number >= 0")
        if self.optimizer not in METHODS:
            raise SpecError("optimizer", self.optimizer, " or ".join(map(repr, METHODS)))
