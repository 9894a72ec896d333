"""The autoscaler core: a sans-I/O state machine that turns job events into decisions."""

from bellows.autoscaler.config import AutoscalerConfig, Policy
from bellows.autoscaler.core import Autoscaler, RoundStats
from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start

__all__ = [
    "Autoscaler",
    "AutoscalerConfig",
    "Decision",
    "Policy",
    "Preempt",
    "Reject",
    "Rescale",
    "RoundStats",
    "Start",
]
