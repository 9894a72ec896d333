"""Why the core decided what it did: one sentence per decision, in words.

Pure functions over one step's decisions, called by the core as it emits them, so that the
simulator and the live controller give the same words for the same step. The controller
writes the sentence on the job (``bellows.io/reason``) and in its Event; ``bellows status``
shows it. The words are the contract's: each kind of decision the core makes has its own
sentence (``tests/autoscaler/test_reasons.py`` walks them all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from bellows.autoscaler.decisions import Decision, Rescale, Start

__all__ = [
    "batch_keep_reason",
    "keep_reason",
    "listed",
    "min_runtime_reason",
    "preempt_reason",
    "reasoned",
    "reject_reason",
]

NAMED = 2  # jobs named in a sentence before "and N more"


def listed(jobs: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and 3 more``."""
    if len(jobs) <= NAMED:
        return " and ".join(jobs)
    return f"{', '.join(jobs[:NAMED])} and {len(jobs) - NAMED} more"


def reject_reason(capacity: int) -> str:
    return f"did not fit in {capacity} GPUs"


def preempt_reason(capacity: int) -> str:
    return f"cluster capacity fell to {capacity} GPUs"


def keep_reason(gpus: int, better: int) -> str:
    return f"kept on {gpus} GPUs: {better} would run it faster but not pay for its restart"


def batch_keep_reason(gpus: int, batch: int, other: int) -> str:
    return f"kept batch {batch} on its {gpus} GPUs: batch {other} would not pay for its restart"


def min_runtime_reason(gpus: int, least_s: float) -> str:
    return (
        f"kept on {gpus} GPUs: a round may not shrink it within its minimum runtime "
        f"({least_s:g} s since it last started)"
    )


def _start(start: Start, *, resumed: bool, takers_from: Sequence[str]) -> str:
    verb = "resumed after a preemption" if resumed else "started"
    if takers_from:
        return f"{verb} on GPUs the round took from {listed(takers_from)}"
    return f"{verb} into free GPUs"


def _rescale(
    change: Rescale,
    *,
    faster_alone: bool,
    downs: Sequence[str],
    ups: Sequence[str],
    starts: Sequence[str],
    capacity: int,
) -> str:
    a, b = change.gpus_from, change.gpus
    if a == b and change.batch == change.batch_from:
        return f"moved onto one node on its {a} GPUs: it finishes sooner, its restart included"
    if a == b:
        return (
            f"batch {change.batch_from}→{change.batch} on its {a} GPUs: it finishes sooner, "
            "its restart included"
        )
    if b > a:
        where = f"on GPUs taken from {listed(downs)}" if downs else "into free GPUs"
        return f"scaled {a}→{b} {where}: it finishes sooner, its restart included"
    if faster_alone:
        return f"scaled {a}→{b}: it runs faster on fewer GPUs"
    if starts:
        return f"scaled {a}→{b} to start {listed(starts)}"
    if ups:
        return f"scaled {a}→{b} to give GPUs to {listed(ups)}"
    return f"scaled {a}→{b} to fit the cluster's {capacity} GPUs"


def reasoned(
    downs: Sequence[Rescale],
    ups: Sequence[Rescale],
    starts: Sequence[Start],
    *,
    resumed: frozenset[str],
    faster_alone: frozenset[str],
    capacity: int,
) -> list[Decision]:
    """One step's scale-downs, scale-ups and starts, in that order, each with its reason.

    ``resumed``: the starting jobs a preemption had halted; ``faster_alone``: the jobs scaled
    down whose own throughput is higher on the fewer GPUs (a communication-bound job).
    """
    down_names = [d.job for d in downs if d.gpus < d.gpus_from]
    up_names = [u.job for u in ups if u.gpus > u.gpus_from]
    start_names = [s.job for s in starts]
    out: list[Decision] = []
    for change in [*downs, *ups]:
        why = _rescale(
            change,
            faster_alone=change.job in faster_alone,
            downs=down_names,
            ups=up_names,
            starts=start_names,
            capacity=capacity,
        )
        out.append(dataclasses.replace(change, reason=why))
    for start in starts:
        why = _start(start, resumed=start.job in resumed, takers_from=down_names)
        out.append(dataclasses.replace(start, reason=why))
    return out
