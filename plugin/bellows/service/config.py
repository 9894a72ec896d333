"""Bellows' configuration: one schema, read from defaults < file < env < flags.

The file is YAML (what the Helm chart renders into a ConfigMap); env variables are
``BELLOWS_<SECTION>_<KEY>`` (``BELLOWS_CONTROLLER_DELTA_SECONDS``); flags are
``--set section.key=value``. Every key, its type, default and env name is listed in
``docs/configuration.md`` (generated from these classes) and exported as JSON Schema by
``bellows config schema``. A bad value or an unknown key fails at start with a message that
names the key and where it came from; secrets are masked in every message and ``repr``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from bellows.autoscaler.config import AutoscalerConfig, Policy
from bellows.bus.settings import NatsSettings, doc
from bellows.jobs import SpecError
from bellows.service.config_fields import (
    ENV_PREFIX,
    ConfigError,
    InvalidValueError,
    Leaf,
    build,
    convert,
    json_schema,
    jsonable,
    leaves,
    markdown_table,
    sections,
)

__all__ = [
    "API_VERSION",
    "CONFIG_ENV",
    "BellowsConfig",
    "BridgeSettings",
    "CapacitySettings",
    "ConfigError",
    "ControllerSettings",
    "KubernetesSettings",
    "LeaderElectionSettings",
    "LogFormat",
    "LoggingSettings",
    "MetricsSettings",
    "OptimizerPath",
    "config_json_schema",
    "config_markdown",
    "load_config",
]

API_VERSION = "bellows.io/v1alpha1"
KIND = "BellowsConfig"
CONFIG_ENV = "BELLOWS_CONFIG"  # path of the config file when --config is not given

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _seconds(name: str, value: float, *, allow_zero: bool = False) -> None:
    if not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise SpecError(
            name, value, "a finite number of seconds " + (">= 0" if allow_zero else "> 0")
        )


class OptimizerPath(StrEnum):
    """Where the controller's optimizer runs (:data:`bellows.optimizer.Method`)."""

    NUMPY = "numpy"  # NumPy only: JAX is never imported (the controller's memory target)
    AUTO = "auto"  # the fastest path by size; loads JAX on large rounds
    DENSE = "dense"  # JAX, the DP over every GPU count
    BAND = "band"  # JAX, the DP confined to the provably optimal band


@dataclass(frozen=True)
class CapacitySettings:
    """How many GPUs the controller may hand out."""

    gpus: int = field(default=0, metadata=doc("GPUs to share; 0 reads them from the nodes"))
    resource_name: str = field(
        default="nvidia.com/gpu", metadata=doc("node resource counted when gpus is 0")
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict, hash=False, metadata=doc("labels of the nodes counted (k=v,...)")
    )

    def __post_init__(self) -> None:
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise SpecError("gpus", self.gpus, "an integer >= 0 (0: read from the nodes)")


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller decides (the autoscaler core's options) and what it may use."""

    policy: Policy = field(default=Policy.ELASTIC, metadata=doc("elastic or baseline"))
    delta_s: float = field(
        default=600.0, metadata=doc("seconds between rounds (Δ); 0: every event")
    )
    queue: bool = field(
        default=True, metadata=doc("keep jobs that do not fit for the next round (else reject)")
    )
    early_share: float | None = field(
        default=None, metadata=doc("start a round early once this share of jobs finished")
    )
    restart_cost_s: float = field(default=0.0, metadata=doc("seconds of progress a rescale costs"))
    hysteresis: float = field(
        default=0.0, metadata=doc("rescale only if the gain exceeds this many restart costs")
    )
    backfill: bool = field(
        default=False, metadata=doc("admit later jobs past one that does not fit")
    )
    halt_timeout_s: float = field(
        default=300.0, metadata=doc("seconds to wait for a suspended job's pods to go")
    )
    optimizer: OptimizerPath = field(
        default=OptimizerPath.NUMPY,
        metadata=doc("numpy (no JAX, least memory) or auto, dense, band (JAX); same decisions"),
    )
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    cluster_profile_file: Path | None = field(
        default=None, metadata=doc("the cluster's measured Allreduce profile (JSON)")
    )

    def __post_init__(self) -> None:
        _seconds("halt_timeout_s", self.halt_timeout_s)
        self.autoscaler_config()  # the core validates its own options

    def autoscaler_config(self) -> AutoscalerConfig:
        """The core's settings from this section."""
        return AutoscalerConfig(
            policy=self.policy,
            queue=self.queue,
            delta_s=self.delta_s,
            early_share=self.early_share,
            restart_cost_s=self.restart_cost_s,
            hysteresis=self.hysteresis,
            backfill=self.backfill,
            optimizer=self.optimizer.value,
        )


@dataclass(frozen=True)
class BridgeSettings:
    """The bridge that turns job changes into events."""

    resync_s: float = field(
        default=300.0, metadata=doc("seconds between full re-lists of the watched jobs")
    )

    def __post_init__(self) -> None:
        _seconds("resync_s", self.resync_s)


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
    lease_duration_s: float = field(default=15.0, metadata=doc("seconds a lease is held"))
    renew_deadline_s: float = field(default=10.0, metadata=doc("seconds the leader has to renew"))
    retry_period_s: float = field(default=2.0, metadata=doc("seconds between attempts"))
    stop_grace_s: float = field(
        default=10.0, metadata=doc("seconds a stopping leader may finish its work before it ends")
    )

    def __post_init__(self) -> None:
        for name in ("lease_duration_s", "renew_deadline_s", "retry_period_s"):
            _seconds(name, getattr(self, name))
        _seconds("stop_grace_s", self.stop_grace_s, allow_zero=True)
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
    port: int = field(default=9090, metadata=doc("port to bind (0: any free port)"))

    def __post_init__(self) -> None:
        if (
            isinstance(self.port, bool)
            or not isinstance(self.port, int)
            or not 0 <= self.port <= 65535
        ):
            raise SpecError("port", self.port, "an integer in [0, 65535]")


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


@dataclass(frozen=True)
class BellowsConfig:
    """Configuration of the Bellows controller and bridge."""

    api_version: str = field(default=API_VERSION, metadata=doc(f"always {API_VERSION}"))
    kind: str = field(default=KIND, metadata=doc(f"always {KIND}"))
    namespaces: tuple[str, ...] = field(
        default=(), metadata=doc("namespaces whose jobs are managed (empty: all)")
    )
    nats: NatsSettings = field(default_factory=NatsSettings)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    bridge: BridgeSettings = field(default_factory=BridgeSettings)
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)

    def __post_init__(self) -> None:
        if self.api_version != API_VERSION:
            raise SpecError("api_version", self.api_version, repr(API_VERSION))
        if self.kind != KIND:
            raise SpecError("kind", self.kind, repr(KIND))
        for i, ns in enumerate(self.namespaces):
            if not _DNS_LABEL.fullmatch(ns) or len(ns) > 63:
                raise SpecError(f"namespaces[{i}]", ns, "a namespace name (DNS-1123 label)")


_LEAVES: dict[tuple[str, ...], Leaf] = {leaf.keys: leaf for leaf in leaves(BellowsConfig)}
_BY_ENV: dict[str, Leaf] = {leaf.env: leaf for leaf in _LEAVES.values()}
_SECTION_ENV = tuple(
    f"{ENV_PREFIX}{leaf.env.removeprefix(ENV_PREFIX).split('_')[0]}_"
    for leaf in _LEAVES.values()
    if len(leaf.keys) > 1
)


def _set(
    values: dict[tuple[str, ...], tuple[Any, str]],
    leaf: Leaf,
    raw: object,
    source: str,
    *,
    text: bool,
) -> None:
    try:
        values[leaf.attrs] = (convert(leaf.hint, raw, from_text=text), source)
    except InvalidValueError as exc:
        shown = "********" if leaf.secret else raw
        raise ConfigError(leaf.dotted, shown, exc.valid, source) from None


def _from_file(path: Path, values: dict[tuple[str, ...], tuple[Any, str]]) -> None:
    source = f"file {path}"
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ConfigError("--config", str(path), f"a readable file ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError("--config", str(path), f"valid YAML ({exc})") from None
    if data is None:
        return
    if not isinstance(data, dict):
        raise ConfigError("<root>", type(data).__name__, "a mapping of sections", source)
    _walk(data, BellowsConfig, (), values, source)


def _walk(
    data: Mapping[Any, Any],
    cls: type,
    keys: tuple[str, ...],
    values: dict[tuple[str, ...], tuple[Any, str]],
    source: str,
) -> None:
    known = {key: hint for key, _, hint, _ in sections(cls)}
    for key, raw in data.items():
        path = (*keys, str(key))
        if key not in known:
            valid = "one of " + ", ".join(sorted(known))
            raise ConfigError(".".join(path), "<unknown key>", valid, source)
        leaf = _LEAVES.get(path)
        if leaf is None:  # a section
            if not isinstance(raw, dict):
                raise ConfigError(".".join(path), raw, "a mapping (a section)", source)
            _walk(raw, known[key], path, values, source)
        else:
            _set(values, leaf, raw, source, text=False)


def _from_env(env: Mapping[str, str], values: dict[tuple[str, ...], tuple[Any, str]]) -> None:
    for name in sorted(env):
        leaf = _BY_ENV.get(name)
        if leaf is not None:
            _set(values, leaf, env[name], f"env {name}", text=True)
        elif name.startswith(_SECTION_ENV):
            # Looks meant for a section but matches no key: a typo must not pass silently.
            raise ConfigError(
                name,
                "<unknown variable>",
                "one of the env names in docs/configuration.md",
                f"env {name}",
            )


def _from_flags(overrides: Sequence[str], values: dict[tuple[str, ...], tuple[Any, str]]) -> None:
    for item in overrides:
        key, sep, raw = item.partition("=")
        source = f"flag --set {key}"
        leaf = _LEAVES.get(tuple(key.split(".")))
        if not sep or leaf is None:
            valid = "KEY=VALUE with KEY one of the keys in docs/configuration.md"
            raise ConfigError(key or item, "<unknown key>" if sep else item, valid, source)
        _set(values, leaf, raw, source, text=True)


def load_config(
    path: Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Sequence[str] = (),
) -> BellowsConfig:
    """The configuration from defaults, the file at ``path``, ``env`` and ``--set`` flags.

    ``path`` defaults to ``$BELLOWS_CONFIG`` when set. Raises :class:`ConfigError`.
    """
    env = {} if env is None else env
    if path is None and env.get(CONFIG_ENV):
        path = Path(env[CONFIG_ENV])
    values: dict[tuple[str, ...], tuple[Any, str]] = {}
    if path is not None:
        _from_file(path, values)
    _from_env(env, values)
    _from_flags(overrides, values)
    config: BellowsConfig = build(BellowsConfig, values)
    return config


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of the configuration file (for the Helm chart's values)."""
    schema = json_schema(BellowsConfig)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://bellows.dev/schemas/config.v1alpha1.schema.json",
        "title": "Bellows configuration",
        **schema,
    }


def config_markdown() -> str:
    """The key reference table of ``docs/configuration.md``."""
    return markdown_table(BellowsConfig)


def redacted(config: BellowsConfig) -> dict[str, Any]:
    """The effective configuration as a nested dict with secrets masked (for ``config show``)."""
    out: dict[str, Any] = {}
    for leaf in _LEAVES.values():
        value: Any = config
        for attr in leaf.attrs:
            value = getattr(value, attr)
        node = out
        for key in leaf.keys[:-1]:
            node = node.setdefault(key, {})
        node[leaf.keys[-1]] = "********" if (leaf.secret and value is not None) else jsonable(value)
    return out
