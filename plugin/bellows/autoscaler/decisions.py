"""Decisions the autoscaler emits: typed values, applied by the simulator or the controller.

Every decision carries ``reason``, one sentence saying why in words (what ``bellows status``
shows and the Events say: "started into free GPUs", "scaled 8→4 to start team-a/bert").
A start's and a rescale's reason never takes part in equality: two decisions that do the
same thing are equal whatever they say about it. :class:`Keep` is no decision (nothing is
applied): the note a round leaves on a running job it kept where a move would have sped it
up but not paid for its restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Decision", "Keep", "Preempt", "Reject", "Rescale", "Start"]


@dataclass(frozen=True)
class Start:
    """Start an arrived job on ``gpus`` GPUs with global batch ``batch`` (of GPU type
    ``gpu_type`` on a cluster of several types; ``""``: the one type)."""

    job: str
    gpus: int
    batch: int
    reason: str = field(default="", compare=False)
    gpu_type: str = ""


@dataclass(frozen=True)
class Rescale:
    """Halt a running job (checkpoint) and resume it at ``(gpus, batch)`` (on its GPU type,
    ``gpu_type``, on a cluster of several; a change of type is a preemption and a start)."""

    job: str
    gpus_from: int
    batch_from: int
    gpus: int
    batch: int
    reason: str = field(default="", compare=False)
    gpu_type: str = ""


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


@dataclass(frozen=True)
class Keep:
    """A running job a round left at ``(gpus, batch)`` although ``better`` GPUs (free after
    the round) would have run it faster: the move would not have paid for its restart."""

    job: str
    gpus: int
    batch: int
    better: int
    reason: str
