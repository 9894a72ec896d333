"""Prometheus metrics of the controller and the bridge, in a registry of their own.

:class:`Metrics` is also the bus's :class:`~bellows.bus.observers.BusObserver`, so the
publisher, the consumer and the pump report into it without importing this layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start
from bellows.bus.events import EventType
from bellows.kube import Outcome
from bellows.kube.reading import MANAGED_BY
from bellows.service.observing import ControllerObserver
from bellows.service.scoping import QUEUE_UNKNOWN

__all__ = ["CONTENT_TYPE_LATEST", "Metrics", "MetricsObserver"]

_log = structlog.get_logger("bellows.service")

# Optimizer rounds take from well under a millisecond (a few jobs) to seconds (hundreds of
# jobs, hundreds of GPUs); event lag spans seconds (Δ = 0) to a Δ of 10 minutes and more.
_OPTIMIZER_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
_LAG_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1200, 3600)
_DECISION_KINDS: dict[type, str] = {
    Start: "start",
    Rescale: "rescale",
    Reject: "reject",
    Preempt: "preempt",
}


class Metrics:
    """Every metric Bellows exports; one instance per process (or per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self._controller_metrics(r)
        self._trouble_metrics(r)
        self._event_metrics(r)
        self._progress_metrics(r)
        self.apply_seconds = Histogram(
            "bellows_apply_seconds",
            "Time to apply one Δ window (optimizer and Kubernetes patches)",
            buckets=_LAG_BUCKETS,
            registry=r,
        )

    def _controller_metrics(self, r: CollectorRegistry) -> None:
        """The rounds, the decisions and the jobs' state."""
        self.decisions = Counter(
            "bellows_decisions", "Decisions applied, by kind", ["kind"], registry=r
        )
        self.rescales = Counter(
            "bellows_rescales", "Running jobs halted and resumed at a new size", registry=r
        )
        self.rounds = Counter("bellows_rounds", "Scheduling rounds run", registry=r)
        self.queue_length = Gauge("bellows_queue_length", "Jobs waiting for GPUs", registry=r)
        self.running_jobs = Gauge("bellows_running_jobs", "Jobs holding GPUs", registry=r)
        self.gpus_allocated = Gauge(
            "bellows_gpus_allocated", "GPUs given to running jobs", registry=r
        )
        self.jobs_invalid = Gauge(
            "bellows_jobs_invalid",
            "Opted-in jobs Bellows leaves alone because their settings or spec are invalid",
            registry=r,
        )
        self.jobs_skipped = Gauge(
            "bellows_jobs_skipped",
            "Opted-in jobs Bellows never writes to, by reason (managed-by: "
            "spec.runPolicy.managedBy names another controller, e.g. MultiKueue; "
            "queue-unknown: their Kueue LocalQueue or ClusterQueue cannot be read)",
            ["reason"],
            registry=r,
        )
        for reason in (MANAGED_BY, QUEUE_UNKNOWN):
            self.jobs_skipped.labels(reason=reason).set(0)
        self.gpus_capacity = Gauge("bellows_gpus_capacity", "GPUs Bellows may hand out", registry=r)
        self.gpus_by_type = Gauge(
            "bellows_gpus_capacity_by_type",
            "The counted nodes' GPUs by GPU type (controller.capacity.gpuTypeLabel, named by "
            "gpuTypes; '' for nodes without the label), with capacity.gpus 0",
            ["gpu_type"],
            registry=r,
        )
        self.startup_seconds = Gauge(
            "bellows_startup_seconds",
            "Seconds of each step of the controller's last start (of a pool's, with Kueue): "
            "rebuild (jobs read from the cluster), first-round (the core's first step), "
            "rehearsal (the optimizer meeting the next rounds' shapes)",
            ["step"],
            registry=r,
        )
        self.optimizer_seconds = Histogram(
            "bellows_optimizer_seconds",
            "Time of one optimizer round",
            buckets=_OPTIMIZER_BUCKETS,
            registry=r,
        )

    def capacity_by_type(self, gpus: Mapping[str, int]) -> None:
        """The GPUs per type the capacity watch counts now (a type gone reads no more)."""
        self.gpus_by_type.clear()
        for name, count in gpus.items():
            self.gpus_by_type.labels(gpu_type=name).set(count)

    def _trouble_metrics(self, r: CollectorRegistry) -> None:
        """What the cluster refused, and what Bellows would not take of what it read."""
        self.decisions_failed = Counter(
            "bellows_decisions_failed",
            "Decisions the cluster did not take (retried after a backoff), by kind",
            ["kind"],
            registry=r,
        )
        self.journal_distrusted = Counter(
            "bellows_journal_distrusted",
            "Journal values read back from a job and not acted on (its settings, replicas or "
            "the cluster's GPUs rule them out), by annotation",
            ["key"],
            registry=r,
        )
        self.jobs_set_aside = Counter(
            "bellows_jobs_set_aside",
            "Jobs set aside by a rebuild or a resume because their objects failed (spec: "
            "unreadable, api: an API error for that job, record: its TrainJob re-creation "
            "record failed its checks, unexpected: anything else)",
            ["reason"],
            registry=r,
        )

    def _event_metrics(self, r: CollectorRegistry) -> None:
        """The events published, consumed and applied."""
        self.event_lag_seconds = Histogram(
            "bellows_event_lag_seconds",
            "From an event's time to its consumption, by event type",
            ["type"],
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.events_consumed = Counter(
            "bellows_events_consumed", "Events decoded by the controller", ["type"], registry=r
        )
        self.events_published = Counter(
            "bellows_events_published",
            "Events published (duplicate: dropped by the stream as a repeat)",
            ["type", "duplicate"],
            registry=r,
        )
        self.events_dead_lettered = Counter(
            "bellows_events_dead_lettered",
            "Messages sent to the dead-letter subject",
            ["code"],
            registry=r,
        )
        self.batches_applied = Counter(
            "bellows_batches_applied", "Δ windows applied and acked", registry=r
        )
        self.apply_failures = Counter(
            "bellows_apply_failures", "Δ windows whose apply failed (redelivered)", registry=r
        )

    def _progress_metrics(self, r: CollectorRegistry) -> None:
        """The progress reports and what they say of the jobs."""
        self.progress_rejected = Counter(
            "bellows_progress_rejected",
            "Progress reports dropped, by reason (invalid, rate_limited, bytes_limited, "
            "not_running, stale, backwards, inconsistent...)",
            ["reason"],
            registry=r,
        )
        self.job_stalled = Gauge(
            "bellows_job_stalled",
            "1 for each running job silent for longer than controller.stallAfterSeconds",
            ["job"],
            registry=r,
        )
        self.job_inconsistent = Gauge(
            "bellows_job_inconsistent",
            "1 for each running job whose progress reports did not hold together (it keeps "
            "its last good fit)",
            ["job"],
            registry=r,
        )

    # --- controller ---------------------------------------------------------------------

    def observe_decisions(self, decisions: Iterable[Decision]) -> None:
        """Count the decisions of one round."""
        for decision in decisions:
            self.decisions.labels(kind=_DECISION_KINDS[type(decision)]).inc()
            if isinstance(decision, Rescale):
                self.rescales.inc()

    def observe_round(
        self, *, seconds: float, queued: int, running: int, gpus_allocated: int, capacity: int
    ) -> None:
        """Record one optimizer round and the state it left."""
        self.rounds.inc()
        self.optimizer_seconds.observe(seconds)
        self.queue_length.set(queued)
        self.running_jobs.set(running)
        self.gpus_allocated.set(gpus_allocated)
        self.gpus_capacity.set(capacity)

    # --- BusObserver --------------------------------------------------------------------

    def published(self, event_type: EventType, *, duplicate: bool) -> None:
        self.events_published.labels(type=event_type.value, duplicate=str(duplicate).lower()).inc()

    def consumed(self, event_type: EventType, *, lag_s: float) -> None:
        self.events_consumed.labels(type=event_type.value).inc()
        self.event_lag_seconds.labels(type=event_type.value).observe(max(0.0, lag_s))

    def dead_lettered(self, code: str) -> None:
        self.events_dead_lettered.labels(code=code).inc()

    def batch_applied(self, events: int, *, seconds: float) -> None:
        self.batches_applied.inc()
        self.apply_seconds.observe(seconds)

    def apply_failed(self, events: int) -> None:
        self.apply_failures.inc()

    # --- exposition ---------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class MetricsObserver(ControllerObserver):
    """Feeds the controller's rounds into the Prometheus metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def round_done(
        self,
        seconds: float,
        decisions: Sequence[Decision],
        *,
        running: int,
        queued: int,
        gpus_allocated: int,
        capacity: int,
    ) -> None:
        self._metrics.observe_decisions(decisions)
        self._metrics.observe_round(
            seconds=seconds,
            queued=queued,
            running=running,
            gpus_allocated=gpus_allocated,
            capacity=capacity,
        )

    def applied(self, decision: Decision, outcome: Outcome) -> None:
        _log.debug("decision.outcome", job=decision.job, result=outcome.result)

    def invalid_jobs(self, count: int) -> None:
        self._metrics.jobs_invalid.set(count)

    def decision_failed(self, decision: Decision) -> None:
        self._metrics.decisions_failed.labels(kind=type(decision).__name__.lower()).inc()

    def journal_distrusted(self, key: str) -> None:
        self._metrics.journal_distrusted.labels(key=key).inc()

    def job_set_aside(self, reason: str) -> None:
        self._metrics.jobs_set_aside.labels(reason=reason).inc()

    def skipped_jobs(self, reason: str, count: int) -> None:
        self._metrics.jobs_skipped.labels(reason=reason).set(count)

    def started(self, step: str, seconds: float) -> None:
        self._metrics.startup_seconds.labels(step=step).set(seconds)
