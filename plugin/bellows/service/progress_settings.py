"""The controller's progress settings (``controller.progress``): where jobs report, what
is learned from the reports, and bounds on them (docs/configuration.md). A part of
:class:`bellows.service.config.ControllerSettings`, in a module of its own for size."""

from __future__ import annotations

from dataclasses import dataclass, field

from bellows.bus.settings import bounded, check_bounds, doc
from bellows.inputs import check_name
from bellows.service.process_settings import DNS_SUBDOMAIN
from bellows.service.progress_limits import ProgressLimits

__all__ = ["ProgressSettings"]

_DAY = 86_400.0


@dataclass(frozen=True)
class ProgressSettings:
    """Where the jobs report progress, and bounds on it (docs/security.md, "Progress")."""

    inject: bool = field(
        default=True,
        metadata=doc(
            "point the pods of the jobs Bellows sizes at the namespace's secretName Secret "
            "(BELLOWS_PROGRESS_URL, _INBOX; the owner's entries kept; with learnProgress)"
        ),
    )
    learn_placements: bool = field(
        default=False,
        metadata=doc(
            "with learnProgress: learn from each job's reports the step time its class of jobs "
            "(same profile) measures on that many GPUs, and value the class by it (opt in: it "
            "assumes one profile, one speed; docs/autoscaler.md, 'Deciding with measured step "
            "times')"
        ),
    )
    secret_name: str = field(
        default="bellows-progress",
        metadata=doc("the Secret of each job namespace with keys url and inbox"),
    )
    refit_interval_s: float = field(
        default=1.0,
        metadata=bounded(
            "seconds between two refits of one job, however many reports it sends (0: once "
            "per fetched batch)",
            minimum=0.0,
            maximum=_DAY,
        ),
    )
    reports_per_second: float = field(
        default=50.0,
        metadata=bounded(
            "progress reports per second one namespace may send (more are dropped, counted "
            "as rate_limited)",
            minimum=0.0,
            maximum=1e6,
            open_min=True,
        ),
    )
    report_burst: float = field(
        default=200.0,
        metadata=bounded(
            "progress reports one namespace may send at once", minimum=1.0, maximum=1e7
        ),
    )
    bytes_per_second: float = field(
        default=64.0 * 1024,
        metadata=bounded(
            "bytes of progress reports per second one namespace may send (more are dropped, "
            "counted as bytes_limited)",
            minimum=0.0,
            maximum=1e10,
            open_min=True,
        ),
    )
    byte_burst: float = field(
        default=256.0 * 1024,
        metadata=bounded(
            "bytes of progress reports one namespace may send at once (at least one report: 4 KiB)",
            minimum=4096.0,
            maximum=1e11,
        ),
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        check_name("secret_name", self.secret_name, DNS_SUBDOMAIN, "a Secret name (DNS-1123)")

    def limits(self) -> ProgressLimits:
        """The progress loop's per-namespace buckets."""
        return ProgressLimits(
            self.reports_per_second, self.report_burst, self.bytes_per_second, self.byte_burst
        )
