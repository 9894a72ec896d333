"""Metrics of a simulated run, as the paper defines them, and the per-job table.

* jobs completed over time (the curve of the paper's Figs. 5-9), jobs dropped, drop ratio;
* ``Opt_Sch_Time`` = Σ over scheduled jobs of their single-GPU length (at ``X1``),
  ``Act_Sch_Time`` = Σ GPUs x time held, SJS efficiency = Opt / Act;
* average job completion time (finish - arrival), queueing delay, rescale counts;

and beyond the paper: the 99th percentile of JCT, utilization (GPU-time held over capacity x
time) and the share of capacity x time that sat idle while some job waited.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bellows.autoscaler import AutoscalerConfig
from bellows.jobs import JobSpec

__all__ = [
    "JobRecord",
    "Segment",
    "Usage",
    "completed_over_time",
    "jobs_csv_text",
    "offered_load",
    "settings_summary",
    "spread_share",
    "summarize",
    "template",
    "usage",
    "write_jobs_csv",
]

MAX_CURVE_POINTS = 2000


@dataclass(frozen=True)
class Segment:
    """A stretch of time a job held ``gpus`` GPUs with global batch ``batch``, on
    ``extra_nodes`` more nodes than the fewest that hold them."""

    start_s: float
    end_s: float
    gpus: int
    batch: int
    extra_nodes: int = 0
    gpu_type: str = ""  # on a cluster of several GPU types (issue 39)
    idle_gpus: int = 0  # of ``gpus``, held on other types and doing nothing (a type-blind policy)


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


def template(job: JobSpec) -> JobSpec:
    """What jobs of one template share: the spec with its name and work blanked."""
    return replace(job, name="-", work=1.0)


@dataclass(frozen=True)
class Usage:
    """How the cluster's GPU-time was spent from t = 0 to the last completion."""

    capacity_s: float  # capacity x time
    held_s: float  # GPU-time held by jobs (restart pauses included)
    idle_while_waiting_s: float  # idle GPU-time while at least one job waited
    peak_over_commit: int  # most GPUs held beyond the capacity at any instant (0: never)


def usage(
    records: Sequence[JobRecord], capacity: Sequence[tuple[float, int]], *, end_s: float
) -> Usage:
    """GPU-time held, idle and idle beside waiting jobs, rebuilt from the records alone.

    A job waits from its arrival to its first start, and between a halt by a capacity drop
    and its restart (a gap between two segments); ``capacity`` is ``(time, GPUs)`` changes.
    """
    deltas: dict[float, list[int]] = {}  # time -> [GPU change, waiting change, capacity]

    def at(t: float) -> list[int]:
        return deltas.setdefault(t, [0, 0, -1])

    for r in records:
        last = r.arrival_s
        for seg in r.segments:
            if seg.start_s > last:
                at(last)[1] += 1
                at(seg.start_s)[1] -= 1
            at(seg.start_s)[0] += seg.gpus
            at(seg.end_s)[0] -= seg.gpus
            last = seg.end_s
        if r.finish_s is None and not r.rejected:
            at(last)[1] += 1  # waited to the end
    for t, gpus in capacity:
        at(t)[2] = gpus
    held = waiting = cap = 0
    totals = [0.0, 0.0, 0.0]
    peak = 0
    times = sorted(t for t in deltas if t <= end_s)
    for t, t_next in zip(times, [*times[1:], end_s], strict=True):
        gpus, waits, new_cap = deltas[t]
        held, waiting = held + gpus, waiting + waits
        cap = new_cap if new_cap >= 0 else cap
        peak = max(peak, held - cap)
        span = t_next - t
        totals[0] += cap * span
        totals[1] += held * span
        if waiting > 0:
            totals[2] += max(cap - held, 0) * span
    return Usage(totals[0], totals[1], totals[2], peak)


def spread_share(records: Sequence[JobRecord]) -> float:
    """Share of the time jobs held GPUs that they spent on more nodes than they needed."""
    held = spread = 0.0
    for r in records:
        for seg in r.segments:
            held += seg.end_s - seg.start_s
            spread += seg.end_s - seg.start_s if seg.extra_nodes else 0.0
    return round(spread / held, 6) if held > 0 else 0.0


def _finite(value: float) -> float | None:
    """``value`` rounded, or ``None`` where JSON has no number for it (a zero span)."""
    return round(value, 4) if math.isfinite(value) else None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60.0, 4)


def summarize(
    records: Sequence[JobRecord],
    *,
    gpus: int,
    horizon_s: float | None,
    span_s: float,
    capacity: Sequence[tuple[float, int]] | None = None,
) -> dict[str, Any]:
    """The ``summary.json`` of a run (DESIGN.md §5 keys first, then the extras).

    ``jobs_completed`` counts jobs finished by ``horizon_s`` (the paper reads its curves at
    the end of the arrival window); without a horizon it counts every job that finished.
    SJS efficiency, JCT, queueing delay, utilization and idle GPU-time cover the whole run,
    from t = 0 to the last completion; ``capacity`` is the cluster's ``(time, GPUs)``
    changes (default: ``gpus`` throughout).
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
    spent = usage(records, capacity or [(0.0, gpus)], end_s=end_s)
    capacity_s = spent.capacity_s
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
        "offered_load": _finite(offered_load(records, gpus=gpus, span_s=span_s)),
        "idle_while_waiting_share": (
            round(spent.idle_while_waiting_s / capacity_s, 6) if capacity_s > 0 else 0.0
        ),
        "utilization": round(spent.held_s / capacity_s, 6) if capacity_s > 0 else 0.0,
        "rescales_per_job": round(sum(r.rescales for r in records) / total, 6) if total else 0.0,
        "p99_jct_min": _minutes(float(np.percentile(jcts, 99))) if jcts else None,
    }


def _allocations(record: JobRecord) -> str:
    """``minute:gpus@batch`` from each change on, ``;``-separated (GPUs and batch over time).

    Each entry holds until the next one, or the finish; a halt by a capacity drop is an entry
    ``minute:0@0``. Minutes carry the precision of ``start_min`` and ``finish_min``.
    """
    out: list[str] = []
    for i, seg in enumerate(record.segments):
        out.append(f"{_minutes(seg.start_s)}:{seg.gpus}@{seg.batch}")
        following = record.segments[i + 1].start_s if i + 1 < len(record.segments) else None
        if seg.end_s not in (following, record.finish_s):
            out.append(f"{_minutes(seg.end_s)}:0@0")
    return ";".join(out)


def settings_summary(config: AutoscalerConfig) -> dict[str, Any]:
    """The settings ``bellows simulate`` adds to a run's ``summary.json`` (a sweep's cells
    add the same, so that their files read alike)."""
    return {
        "policy": config.policy.value,
        "queue": config.queue,
        "delta_min": config.delta_s / 60.0,
        "restart_cost_s": config.restart_s,
        "objective": config.objective.value,  # what a round maximised (plots' titles)
    }


def write_jobs_csv(records: Sequence[JobRecord], path: Path) -> None:
    """One row per job: times in minutes, GPUs and batch over time, rescales."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        handle.write(jobs_csv_text(records))


def jobs_csv_text(records: Sequence[JobRecord]) -> str:
    """The text of :func:`write_jobs_csv`'s file (a sweep's worker returns it to be written
    by the caller, whose disk it may not share)."""
    header = [
        "name", "category", "model", "arrival_min", "start_min", "finish_min", "rejected",
        "queue_min", "jct_min", "single_gpu_min", "gpu_min", "rescales", "preemptions",
        "allocations",
    ]  # fmt: skip
    handle = io.StringIO()
    writer = csv.writer(handle)
    writer.writerow(header)
    for r in records:
        writer.writerow([
            r.name, r.category, r.model, _minutes(r.arrival_s), _minutes(r.start_s),
            _minutes(r.finish_s), int(r.rejected), _minutes(r.queue_s), _minutes(r.jct_s),
            _minutes(r.single_gpu_s), _minutes(r.gpu_seconds), r.rescales, r.preemptions,
            _allocations(r),
        ])  # fmt: skip
    return handle.getvalue()
