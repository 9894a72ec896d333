"""Per-namespace rate limits on progress reports: token buckets of reports and of bytes.

Any pod holding a namespace's progress credentials may publish as fast as NATS lets it; the
controller reads every report on its one event loop. Each namespace (the subject's, which
NATS permissions bind to the publisher) has two buckets, refilled on the loop's clock: one
of reports (``reports_per_s``, holding ``report_burst``), one of bytes (``bytes_per_s``,
holding ``byte_burst``). A report that finds either empty is dropped before it is even
decoded, so a flood costs a namespace's own reports and the controller a dictionary look-up
each. Pure: no I/O, the clock is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from bellows.inputs import check_float

__all__ = ["MAX_NAMESPACES_TRACKED", "Limited", "NamespaceBuckets", "ProgressLimits"]

MAX_NAMESPACES_TRACKED: Final = 4096
"""Buckets kept at once; past it, full ones are forgotten (a new one starts full anyway)."""


class Limited(StrEnum):
    """Which bucket was empty: the ``reason`` of ``bellows_progress_rejected_total``."""

    REPORTS = "rate_limited"
    BYTES = "bytes_limited"


@dataclass(frozen=True)
class ProgressLimits:
    """How many reports and bytes one namespace may send, per second and at once."""

    reports_per_s: float = 50.0
    report_burst: float = 200.0
    bytes_per_s: float = 64.0 * 1024
    byte_burst: float = 256.0 * 1024

    def __post_init__(self) -> None:
        for name in ("reports_per_s", "report_burst", "bytes_per_s", "byte_burst"):
            value = check_float(name, getattr(self, name), minimum=0.0, maximum=1e12, open_min=True)
            object.__setattr__(self, name, value)


@dataclass
class _Bucket:
    reports: float
    bytes: float
    at: float


@dataclass
class NamespaceBuckets:
    """The buckets of every namespace that reported (see the module docstring)."""

    limits: ProgressLimits = field(default_factory=ProgressLimits)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, namespace: str, size: int, now: float) -> Limited | None:
        """Take one report of ``size`` bytes from ``namespace``'s buckets at ``now``;
        which bucket was empty (nothing taken then), or ``None``."""
        limits = self.limits
        bucket = self._buckets.get(namespace)
        if bucket is None:
            if len(self._buckets) >= MAX_NAMESPACES_TRACKED:
                self._forget_full(now)
            bucket = self._buckets[namespace] = _Bucket(limits.report_burst, limits.byte_burst, now)
        elapsed = max(0.0, now - bucket.at)
        bucket.at = max(bucket.at, now)
        bucket.reports = min(limits.report_burst, bucket.reports + elapsed * limits.reports_per_s)
        bucket.bytes = min(limits.byte_burst, bucket.bytes + elapsed * limits.bytes_per_s)
        if bucket.reports < 1.0:
            return Limited.REPORTS
        if bucket.bytes < size:
            return Limited.BYTES
        bucket.reports -= 1.0
        bucket.bytes -= size
        return None

    def _forget_full(self, now: float) -> None:
        limits = self.limits
        for name, b in list(self._buckets.items()):
            elapsed = max(0.0, now - b.at)
            if (
                b.reports + elapsed * limits.reports_per_s >= limits.report_burst
                and b.bytes + elapsed * limits.bytes_per_s >= limits.byte_burst
            ):
                del self._buckets[name]
        if len(self._buckets) >= MAX_NAMESPACES_TRACKED:  # all busy: drop the oldest
            oldest = min(self._buckets, key=lambda n: self._buckets[n].at)
            del self._buckets[oldest]

    def __len__(self) -> int:
        return len(self._buckets)
