"""The settings of the processes beside the controller's own section: the bridge, the
Kubernetes client, leader election, the metrics server and logging.

Sections of :class:`~bellows.service.config.BellowsConfig` (which re-exports them); each key
is documented in ``docs/configuration.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from bellows.bus.settings import bounded, check_bounds, doc
from bellows.inputs import SpecError, check_name

__all__ = [
    "DNS_LABEL",
    "DNS_SUBDOMAIN",
    "BridgeSettings",
    "KubernetesSettings",
    "LeaderElectionSettings",
    "LogFormat",
    "LogLevel",
    "LoggingSettings",
    "MetricsSettings",
]

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_DAY = 86_400.0


@dataclass(frozen=True)
class BridgeSettings:
    """The bridge that turns job changes into events."""

    resync_s: float = field(
        default=300.0,
        metadata=bounded(
            "seconds between full re-lists of the watched jobs",
            minimum=0.0,
            maximum=7 * _DAY,
            open_min=True,
        ),
    )

    def __post_init__(self) -> None:
        check_bounds(self)


@dataclass(frozen=True)
class KubernetesSettings:
    """How to reach the Kubernetes API."""

    kubeconfig: Path | None = field(default=None, metadata=doc("kubeconfig file (null: default)"))
    context: str | None = field(default=None, metadata=doc("kubeconfig context (null: current)"))
    in_cluster: bool | None = field(
        default=None, metadata=doc("use the pod's service account (null: detect)")
    )


@dataclass(frozen=True)
class LeaderElectionSettings:
    """One active replica per component, chosen through a Kubernetes Lease."""

    enabled: bool = field(default=True, metadata=doc("elect a leader (off: always active)"))
    namespace: str = field(default="bellows-system", metadata=doc("namespace of the Leases"))
    controller_lease: str = field(default="bellows-controller", metadata=doc("controller's Lease"))
    bridge_lease: str = field(default="bellows-bridge", metadata=doc("bridge's Lease"))
    lease_duration_s: float = field(
        default=15.0,
        metadata=bounded("seconds a lease is held", minimum=0.0, maximum=3600.0, open_min=True),
    )
    renew_deadline_s: float = field(
        default=10.0,
        metadata=bounded(
            "seconds the leader has to renew", minimum=0.0, maximum=3600.0, open_min=True
        ),
    )
    retry_period_s: float = field(
        default=2.0,
        metadata=bounded("seconds between attempts", minimum=0.0, maximum=3600.0, open_min=True),
    )
    stop_grace_s: float = field(
        default=10.0,
        metadata=bounded(
            "seconds a stopping leader may finish its work before it ends",
            minimum=0.0,
            maximum=3600.0,
        ),
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        check_name("namespace", self.namespace, DNS_LABEL, "a namespace name (DNS-1123 label)")
        for name in ("controller_lease", "bridge_lease"):
            check_name(name, getattr(self, name), DNS_SUBDOMAIN, "a Lease name (DNS-1123)")
        if self.renew_deadline_s >= self.lease_duration_s:
            raise SpecError(
                "renew_deadline_s",
                self.renew_deadline_s,
                f"< leaseDurationSeconds ({self.lease_duration_s})",
            )
        if self.retry_period_s >= self.renew_deadline_s:
            raise SpecError(
                "retry_period_s",
                self.retry_period_s,
                f"< renewDeadlineSeconds ({self.renew_deadline_s})",
            )


@dataclass(frozen=True)
class MetricsSettings:
    """The HTTP server of /metrics, /healthz and /readyz."""

    host: str = field(default="0.0.0.0", metadata=doc("address to bind"))
    port: int = field(
        default=9090,
        metadata=bounded("port to bind (0: any free port)", minimum=0, maximum=65535),
    )

    def __post_init__(self) -> None:
        check_bounds(self)


class LogFormat(StrEnum):
    """How log lines look."""

    AUTO = "auto"  # console on a terminal, JSON otherwise (in a pod)
    JSON = "json"
    CONSOLE = "console"


class LogLevel(StrEnum):
    """The least severe level written."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


@dataclass(frozen=True)
class LoggingSettings:
    """Structured logs."""

    format: LogFormat = field(default=LogFormat.AUTO, metadata=doc("auto, json or console"))
    level: LogLevel = field(default=LogLevel.INFO, metadata=doc("debug, info, warning or error"))
