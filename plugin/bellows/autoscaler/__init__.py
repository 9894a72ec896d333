"""The autoscaler core: a sans-I/O state machine that turns job events into decisions."""

from bellows.autoscaler.config import (
    DEFAULT_OBJECTIVE,
    DEFAULT_RESTART_S,
    AutoscalerConfig,
    Mode,
    Policy,
)
from bellows.autoscaler.core import Autoscaler, ClockError, RoundStats
from bellows.autoscaler.decisions import Decision, Keep, Preempt, Reject, Rescale, Start
from bellows.autoscaler.engines import Engines
from bellows.autoscaler.objectives import Objective
from bellows.autoscaler.typed import TypedAutoscaler

AnyAutoscaler = Autoscaler | TypedAutoscaler
"""A controller's core: one GPU type, or several (Bellows mode)."""

__all__ = [
    "DEFAULT_OBJECTIVE",
    "DEFAULT_RESTART_S",
    "AnyAutoscaler",
    "Autoscaler",
    "AutoscalerConfig",
    "ClockError",
    "Decision",
    "Engines",
    "Keep",
    "Mode",
    "Objective",
    "Policy",
    "Preempt",
    "Reject",
    "Rescale",
    "RoundStats",
    "Start",
    "TypedAutoscaler",
]
