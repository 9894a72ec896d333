"""The emulated training script: how far a job has got, at the JSA's speed for its ``(k, b)``.

Pure bookkeeping on an emulated clock (seconds of *training* time; the operator maps real
time onto it with a compression factor). Each resume after a halt costs ``restart_s`` of
no progress (pods start again, the checkpoint loads), as the simulator charges it; the first
start costs nothing, in both. Then the job processes ``throughput(job, k, b)`` samples per
second until suspended or done. Progress survives a suspension, as a checkpoint does. A job
whose pods are not all bound yet is *held* (:func:`pods_waited`): no progress until the
moment its last pod binds, from which its restart cost runs.

A job with an ``efficiency`` (its model's statistical efficiency) trains at goodput, as the
simulator charges it (``bellows.sim.engine``): its work counts reference samples, ``n``
samples at batch ``b`` advance it by ``efficiency.progress_after(b, done, n)``, and it is done
``samples_between(b, done, work)`` samples after it resumes. :meth:`Training.seen` is then
the samples it has processed (what its helper reports), :meth:`Training.samples` its
progress toward the work.

On a cluster of several GPU types the speed is that of the type the job's pods run on
(``typed.py``): where nothing pins its type, a started job keeps its spec with its sections
in :attr:`Segment.unsettled` until its last pod binds, and :func:`settle` then gives it its
type's speed, before it makes any progress (held while a pod is pending).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bellows.jobs import JobSpec
from bellows.scaling import ClusterProfile, EfficiencyProfile, throughput

__all__ = ["Segment", "Training", "pods_waited", "settle", "start", "stop"]


@dataclass(frozen=True)
class Segment:
    """One uninterrupted run: from ``started`` (emulated s) on ``gpus`` with ``batch``."""

    gpus: int
    batch: int
    rate: float  # samples per emulated second once the restart cost is paid
    started: float
    pause: float = 0.0  # emulated seconds without progress at the start (a resume's restart)
    held: bool = False  # waiting for pods to bind: no progress yet
    # on several GPU types, the job (with its sections) until its pods' type is known
    unsettled: JobSpec | None = None


@dataclass(frozen=True)
class Training:
    """A job's training state: progress and samples before the current segment, and that
    segment."""

    work: float
    restart_s: float
    done_before: float = 0.0  # progress toward the work (reference samples when efficient)
    segment: Segment | None = None
    restarts: int = 0
    efficiency: EfficiencyProfile | None = None
    seen_before: float = 0.0  # samples processed before the segment

    def _busy(self, now: float) -> float:
        seg = self.segment
        assert seg is not None
        return 0.0 if seg.held else max(0.0, now - seg.started - seg.pause)

    def samples(self, now: float) -> float:
        """Progress by emulated time ``now`` (capped at ``work``): samples processed, or with
        an efficiency the reference samples they are worth."""
        if self.segment is None:
            return min(self.done_before, self.work)
        processed = self._busy(now) * self.segment.rate
        if self.efficiency is None:
            return min(self.work, self.done_before + processed)
        done = self.efficiency.progress_after(self.segment.batch, self.done_before, processed)
        return min(self.work, float(done))

    def seen(self, now: float) -> float:
        """Samples processed by emulated time ``now`` (what the job's helper reports)."""
        if self.efficiency is None:
            return self.samples(now)
        if self.segment is None:
            return self.seen_before
        end = self.finish_time()
        busy = self._busy(now if end is None else min(now, end))
        return self.seen_before + busy * self.segment.rate

    def finish_time(self) -> float | None:
        """Emulated time at which the current segment completes the work (None if stopped)."""
        if self.segment is None or self.segment.rate <= 0 or self.segment.held:
            return None
        left = max(0.0, self.work - self.done_before)
        if self.efficiency is not None and left > 0:
            batch = self.segment.batch
            left = float(self.efficiency.samples_between(batch, self.done_before, self.work))
        return self.segment.started + self.segment.pause + left / self.segment.rate


def start(
    state: Training,
    job: JobSpec,
    *,
    gpus: int,
    batch: int,
    cluster: ClusterProfile,
    now: float,
    unsettled: JobSpec | None = None,
) -> Training:
    """``state`` resumed at ``now`` on ``gpus`` GPUs with global batch ``batch``, at the speed
    of ``job`` on ``cluster`` (``unsettled``: until :func:`settle` says the speed, the job
    whose GPU type is not known yet)."""
    rate = throughput(job, gpus, batch, cluster)
    pause = state.restart_s if state.restarts else 0.0
    segment = Segment(gpus, batch, rate, now, pause, unsettled=unsettled)
    return replace(state, segment=segment, restarts=state.restarts + 1)


def settle(state: Training, job: JobSpec, cluster: ClusterProfile) -> Training:
    """``state`` with its segment at the speed of ``job`` on ``cluster``, its type settled
    (called when its last pod binds: the segment made no progress before)."""
    seg = state.segment
    if seg is None:
        return state
    rate = throughput(job, seg.gpus, seg.batch, cluster)
    return replace(state, segment=replace(seg, rate=rate, unsettled=None))


def stop(state: Training, now: float) -> Training:
    """``state`` suspended at ``now``: progress so far is kept (the checkpoint)."""
    return replace(state, done_before=state.samples(now), seen_before=state.seen(now), segment=None)


def pods_waited(state: Training, pending: bool, now: float) -> Training:
    """``state`` with its segment held while any of its pods is ``pending``, and running
    from ``now`` once none is (only a job just placed has pending pods: a running job's
    pods stay bound)."""
    seg = state.segment
    if seg is None or seg.held == pending:
        return state
    return replace(state, segment=replace(seg, started=now, held=pending))
