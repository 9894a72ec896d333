"""Decisions the autoscaler emits: typed values, applied by the simulator or the controller."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Decision", "Preempt", "Reject", "Rescale", "Start"]


@dataclass(frozen=True)
class Start:
    """Start an arrived job on ``gpus`` GPUs with global batch ``batch``."""

    job: str
    gpus: int
    batch: int


@dataclass(frozen=True)
class Rescale:
    """Halt a running job (checkpoint) and resume it at ``(gpus, batch)``."""

    job: str
    gpus_from: int
    batch_from: int
    gpus: int
    batch: int


@dataclass(frozen=True)
class Reject:
    """Drop an arrived job that did not fit (no-queue mode only; never a running job)."""

    job: str
    reason: str


@dataclass(frozen=True)
class Preempt:
    """Halt a running job and put it back at the head of the queue.

    Emitted only when the cluster's capacity shrinks below what the running jobs need
    (an option beyond the paper); the job keeps its progress and restarts later.
    """

    job: str
    reason: str


Decision = Start | Rescale | Reject | Preempt
