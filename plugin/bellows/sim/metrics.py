"""Metrics of a simulated run, as the paper defines them, and the per-job table.

* jobs completed over time (the curve of the paper's Figs. 5-9), jobs dropped, drop ratio;
* ``Opt_Sch_Time`` = Σ over scheduled jobs of their single-GPU length (at ``X1``),
  ``Act_Sch_Time`` = Σ GPUs x time held, SJS efficiency = Opt / Act;
* average job completion time (finish - arrival), queueing delay, rescale counts.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "JobRecord",
    "Segment",
    "completed_over_time",
    "offered_load",
    "summarize",
    "write_jobs_csv",
]

MAX_CURVE_POINTS = 2000


@dataclass(frozen=True)
class Segment:
    """A stretch of time a job held ``gpus`` GPUs with global batch ``batch``."""

    start_s: float
    end_s: float
    gpus: int
    batch: int


@dataclass(frozen=True)
class JobRecord:
    """What happened to one job in a run."""

    name: str
    category: str
    model: str
    arrival_s: float
    single_gpu_s: float  # the job's length on one GPU at X1 (the paper's "job length")
    start_s: float | None
    finish_s: float | None
    rejected: bool
    segments: tuple[Segment, ...]
    rescales: int
    preemptions: int

    @property
    def gpu_seconds(self) -> float:
        return sum(s.gpus * (s.end_s - s.start_s) for s in self.segments)

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.arrival_s

    @property
    def queue_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.arrival_s


def offered_load(records: Sequence[JobRecord], *, gpus: int, span_s: float) -> float:
    """GPU-seconds asked at one GPU per job ÷ GPU-seconds available over ``span_s``."""
    if gpus <= 0 or span_s <= 0:
        return math.inf
    return sum(r.single_gpu_s for r in records) / (gpus * span_s)


def completed_over_time(records: Sequence[JobRecord], *, until_s: float) -> list[list[float]]:
    """``[minute, jobs completed by then]`` on a grid of whole minutes up to ``until_s``.

    One point a minute, or coarser so that a long replay keeps at most
    :data:`MAX_CURVE_POINTS` points.
    """
    finishes = sorted(r.finish_s for r in records if r.finish_s is not None)
    end_min = max(1, math.ceil(until_s / 60.0))
    step = max(1, math.ceil(end_min / MAX_CURVE_POINTS))
    curve: list[list[float]] = []
    i = 0
    for minute in range(0, end_min + step, step):
        while i < len(finishes) and finishes[i] <= minute * 60.0:
            i += 1
        curve.append([minute, i])
    return curve


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60.0, 4)


def summarize(
    records: Sequence[JobRecord], *, gpus: int, horizon_s: float | None, span_s: float
) -> dict[str, Any]:
    """The ``summary.json`` of a run (DESIGN.md §5 keys first, then the extras).

    ``jobs_completed`` counts jobs finished by ``horizon_s`` (the paper reads its curves at
    the end of the arrival window); without a horizon it counts every job that finished.
    SJS efficiency, JCT and queueing delay cover the whole run, to the last completion.
    """
    finishes = {r.name: r.finish_s for r in records if r.finish_s is not None}
    done_by = [t for t in finishes.values() if horizon_s is None or t <= horizon_s]
    dropped = [r for r in records if r.rejected]
    scheduled = [r for r in records if r.start_s is not None]
    opt = sum(r.single_gpu_s for r in scheduled)
    act = sum(r.gpu_seconds for r in scheduled)
    end_s = max(finishes.values(), default=0.0)
    curve_until = end_s if horizon_s is None else max(horizon_s, end_s)
    jcts = [finishes[r.name] - r.arrival_s for r in records if r.name in finishes]
    queues = [r.start_s - r.arrival_s for r in scheduled if r.start_s is not None]
    total = len(records)
    return {
        "jobs_total": total,
        "jobs_completed": len(done_by),
        "jobs_dropped": len(dropped),
        "drop_ratio": round(len(dropped) / total, 6) if total else 0.0,
        "sjs_efficiency": round(opt / act, 6) if act > 0 else None,
        "avg_jct_min": _minutes(_mean(jcts)),
        "completed_over_time": completed_over_time(records, until_s=curve_until),
        "rescales": sum(r.rescales for r in records),
        "jobs_completed_total": len(finishes),
        "horizon_min": _minutes(horizon_s),
        "makespan_min": _minutes(end_s),
        "avg_queue_min": _minutes(_mean(queues)),
        "preemptions": sum(r.preemptions for r in records),
        "opt_sch_time_min": _minutes(opt),
        "act_sch_time_min": _minutes(act),
        "gpus": gpus,
        "offered_load": round(offered_load(records, gpus=gpus, span_s=span_s), 4),
    }


def _allocations(record: JobRecord) -> str:
    """``minute:gpus@batch`` for each segment, ``;``-separated (GPUs and batch over time)."""
    return ";".join(f"{s.start_s / 60.0:.2f}:{s.gpus}@{s.batch}" for s in record.segments)


def write_jobs_csv(records: Sequence[JobRecord], path: Path) -> None:
    """One row per job: times in minutes, GPUs and batch over time, rescales."""
    header = [
        "name", "category", "model", "arrival_min", "start_min", "finish_min", "rejected",
        "queue_min", "jct_min", "single_gpu_min", "gpu_min", "rescales", "preemptions",
        "allocations",
    ]  # fmt: skip
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for r in records:
            writer.writerow([
                r.name, r.category, r.model, _minutes(r.arrival_s), _minutes(r.start_s),
                _minutes(r.finish_s), int(r.rejected), _minutes(r.queue_s), _minutes(r.jct_s),
                _minutes(r.single_gpu_s), _minutes(r.gpu_seconds), r.rescales, r.preemptions,
                _allocations(r),
            ])  # fmt: skip
