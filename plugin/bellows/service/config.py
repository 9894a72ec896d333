"""Bellows' configuration: one schema, read from defaults < file < env < flags.

The file is YAML (what the Helm chart renders into a ConfigMap); env variables are
``BELLOWS_<SECTION>_<KEY>`` (``BELLOWS_CONTROLLER_DELTA_SECONDS``); flags are
``--set section.key=value``. Every key, its type, default and env name is listed in
``docs/configuration.md`` (generated from these classes) and exported as JSON Schema by
``bellows config schema``. A bad value or an unknown key fails at start with a message that
names the key and where it came from; secrets are masked in every message and ``repr``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from bellows.autoscaler.config import AutoscalerConfig, Mode, Objective, Policy
from bellows.bus.settings import NatsSettings, bounded, check_bounds, doc
from bellows.inputs import SpecError, check_name
from bellows.jobs import MAX_MIN_RUNTIME_S, MAX_RESTART_S
from bellows.kube.placement import HOSTNAME, Placement
from bellows.service.config_fields import ConfigError, build, json_schema, jsonable, markdown_table
from bellows.service.config_sources import Sources
from bellows.service.process_settings import (
    DNS_LABEL,
    BridgeSettings,
    KubernetesSettings,
    LeaderElectionSettings,
    LogFormat,
    LoggingSettings,
    LogLevel,
    MetricsSettings,
)
from bellows.service.progress_settings import ProgressSettings

__all__ = [
    "API_VERSION",
    "CONFIG_ENV",
    "MAX_CLUSTER_GPUS",
    "BellowsConfig",
    "BridgeSettings",
    "CapacitySettings",
    "ConfigError",
    "ControllerSettings",
    "KubernetesSettings",
    "KueueSettings",
    "LeaderElectionSettings",
    "LogFormat",
    "LogLevel",
    "LoggingSettings",
    "MetricsSettings",
    "OptimizerPath",
    "ProgressSettings",
    "config_json_schema",
    "config_markdown",
    "load_config",
]

API_VERSION = "bellows.io/v1alpha1"
KIND = "BellowsConfig"
CONFIG_ENV = "BELLOWS_CONFIG"  # path of the config file when --config is not given

_RESOURCE_NAME = re.compile(r"([a-z0-9.-]{1,253}/)?[A-Za-z0-9._-]{1,63}")
# a qualified label key: an optional DNS-subdomain prefix, then a name of at most 63
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
_GPU_TYPE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DAY = 86_400.0
# Kubernetes evicts the pods of a NotReady or unreachable node after 300 s (the
# DefaultTolerationSeconds admission plugin's not-ready and unreachable tolerations, the
# taint-based successor of kube-controller-manager's --pod-eviction-timeout, 5m0s): a
# node back within that keeps its pods, so its GPUs stay counted as long
NODE_GRACE_S = 300.0

MAX_CLUSTER_GPUS = 1 << 20
"""The most GPUs the controller may share: its tables are sized by the cluster."""


class OptimizerPath(StrEnum):
    """Where the controller's optimizer runs (:data:`bellows.optimizer.Method`)."""

    NUMPY = "numpy"  # NumPy only: JAX is never imported (the controller's memory target)
    AUTO = "auto"  # the fastest path by size; loads JAX on large rounds
    DENSE = "dense"  # JAX, the DP over every GPU count
    BAND = "band"  # JAX, the DP confined to the provably optimal band


@dataclass(frozen=True)
class CapacitySettings:
    """How many GPUs the controller may hand out."""

    gpus: int = field(
        default=0,
        metadata=bounded(
            "GPUs to share; 0 watches the nodes' allocatable GPUs",
            minimum=0,
            maximum=MAX_CLUSTER_GPUS,
        ),
    )
    resource_name: str = field(
        default="nvidia.com/gpu", metadata=doc("node resource counted when gpus is 0")
    )
    node_selector: Mapping[str, str] = field(
        default_factory=dict, hash=False, metadata=doc("labels of the nodes counted (k=v,...)")
    )
    node_grace_s: float = field(
        default=NODE_GRACE_S,
        metadata=bounded(
            "seconds a counted node may be NotReady or gone before its GPUs leave the "
            "capacity (Kubernetes' taint-based eviction waits 300); 0: at once",
            minimum=0.0,
            maximum=_DAY,
        ),
    )
    gpu_type_label: str = field(
        default="nvidia.com/gpu.product",
        metadata=doc(
            "node label naming a node's GPU type (NVIDIA's GPU feature discovery sets "
            "nvidia.com/gpu.product); the capacity is kept per type (issue 39)"
        ),
    )
    gpu_types: Mapping[str, str] = field(
        default_factory=dict,
        hash=False,
        metadata=doc(
            "the label's values as profile GPU types (Tesla-T4=t4,...); a value not listed "
            "is its own type, a node without the label of type '' (untyped)"
        ),
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        check_name(
            "resource_name",
            self.resource_name,
            _RESOURCE_NAME,
            "an extended resource name like nvidia.com/gpu",
        )
        check_name(
            "gpu_type_label", self.gpu_type_label, _LABEL_KEY,
            "a node label key like nvidia.com/gpu.product",
        )  # fmt: skip
        for product, name in self.gpu_types.items():
            if not isinstance(name, str) or not _GPU_TYPE.fullmatch(name):
                raise SpecError(f"gpu_types.{product[:63]}", name, "a GPU type name like "
                                "a100 (lower-case letters, digits and -, at most 63)")  # fmt: skip


@dataclass(frozen=True)
class KueueSettings:
    """Cooperation with Kueue (docs/kube.md, "Beside Kueue")."""

    enabled: bool = field(
        default=False,
        metadata=doc(
            "size jobs with a kueue.x-k8s.io/queue-name through their Workload, one "
            "optimizer round per ClusterQueue on its GPU nominalQuota (off: such jobs are "
            "refused); needs the chart value kueue.enabled for its RBAC"
        ),
    )


@dataclass(frozen=True)
class TrainerSettings:
    """Kubeflow Trainer v2 TrainJobs (docs/kube.md, "TrainJob")."""

    enabled: bool = field(
        default=False,
        metadata=doc(
            "also watch and size trainer.kubeflow.org TrainJobs on torch runtimes (resized by "
            "re-creation, spec.trainer being immutable); needs the Trainer's CRDs installed and "
            "the chart value trainer.enabled for its RBAC"
        ),
    )
    records_namespace: str | None = field(
        default=None,
        metadata=doc(
            "the namespace of the TrainJobs' re-creation records, which only the controller "
            "may write (null: leaderElection.namespace, the release namespace); records "
            "anywhere else are never read"
        ),
    )

    def __post_init__(self) -> None:
        if self.records_namespace is not None:
            check_name(
                "records_namespace",
                self.records_namespace,
                DNS_LABEL,
                "a namespace name (DNS-1123 label)",
            )


@dataclass(frozen=True)
class ControllerSettings:
    """How the controller decides (the autoscaler core's options) and what it may use."""

    mode: Mode = field(
        default=Mode.BELLOWS,
        metadata=doc(
            "bellows (starts at events, rounds move running jobs, restarts priced) "
            "or paper (the paper's Δ-batched rounds)"
        ),
    )
    policy: Policy = field(default=Policy.ELASTIC, metadata=doc("elastic or baseline"))
    delta_s: float | None = field(
        default=None,
        metadata=bounded(
            "seconds between rounds (Δ); 0: every event; null: the mode's (120 bellows, 600 paper)",
            minimum=0.0,
            maximum=7 * _DAY,
        ),
    )
    queue: bool = field(
        default=True, metadata=doc("keep jobs that do not fit for the next round (else reject)")
    )
    early_share: float | None = field(
        default=None,
        metadata=bounded(
            "start a round early once this share of the running jobs finished (no sooner "
            "than 60 s after the last); null: the mode's (0.05 bellows, off paper); 0: off",
            minimum=0.0,
            maximum=1.0,
        ),
    )
    restart_cost_s: float | None = field(
        default=None,
        metadata=bounded(
            "seconds of progress one halt costs a job without bellows.io/restart-seconds; "
            "null: the mode's (60 bellows, 0 paper)",
            minimum=0.0,
            maximum=MAX_RESTART_S,
        ),
    )
    min_runtime_s: float = field(
        default=0.0,
        metadata=bounded(
            "seconds after a start or resume during which no round shrinks a job without "
            "bellows.io/min-runtime-seconds to give its GPUs to another (a capacity loss "
            "still does); 0: off",
            minimum=0.0,
            maximum=MAX_MIN_RUNTIME_S,
        ),
    )
    max_min_runtime_s: float = field(
        default=3600.0,
        metadata=bounded(
            "the most seconds a job's own bellows.io/min-runtime-seconds may hold its GPUs "
            "from a round; a job's value above it is clamped to it, with a Clamped Event "
            "(the cluster default, minRuntimeSeconds, is not capped)",
            minimum=0.0,
            maximum=MAX_MIN_RUNTIME_S,
        ),
    )
    objective: Objective | None = field(
        default=None,
        metadata=doc(
            "what a round maximises: remaining (speedups weighted by remaining time), slack "
            "(those weights while the cluster has slack), speedup (the sum of speedups, the "
            "paper's) or fair (Pollux's p = -1); null: the mode's (remaining bellows, "
            "speedup paper)"
        ),
    )
    remaining_exponent: float | None = field(
        default=None,
        metadata=bounded(
            "the power of the remaining objective's weights (0: the sum of speedups, 1: "
            'shortest remaining first); null: 0.3 (docs/autoscaler.md, "Early rounds, '
            'spaced: the defaults re-decided")',
            minimum=0.0,
            maximum=1.0,
        ),
    )
    hysteresis: float | None = field(
        default=None,
        metadata=bounded(
            "a move must gain max(1, this) times its restart cost; null: the mode's (1, 0)",
            minimum=0.0,
            maximum=1e3,
        ),
    )
    backfill: bool | None = field(
        default=None,
        metadata=doc(
            "admit later jobs past one that does not fit; null: the mode's (on bellows, off paper)"
        ),
    )
    halt_timeout_s: float = field(
        default=300.0,
        metadata=bounded(
            "seconds to wait for a suspended job's pods to go",
            minimum=0.0,
            maximum=_DAY,
            open_min=True,
        ),
    )
    learn_progress: bool = field(
        default=True,
        metadata=doc(
            "consume the jobs' progress reports: refit their speed, measure their restarts, "
            "count their samples (docs/events.md)"
        ),
    )
    stall_after_s: float = field(
        default=900.0,
        metadata=bounded(
            "seconds without a progress report after which a job that reported is flagged "
            "stalled (an Event and bellows_job_stalled); it is not touched otherwise",
            minimum=0.0,
            maximum=7 * _DAY,
            open_min=True,
        ),
    )
    optimizer: OptimizerPath = field(
        default=OptimizerPath.AUTO,
        metadata=doc(
            "auto (JAX for shapes worth compiling, NumPy below), dense, band (JAX) or numpy "
            "(never loads JAX, least memory); same decisions"
        ),
    )
    placement: Placement = field(
        default=Placement.NODES,
        metadata=doc(
            "what Bellows asks of the scheduler when it sizes a job, so that its pods sit on "
            "the fewest nodes its prices assume: pack (a preferred pod affinity on the job's "
            "own pods by node), nodes (pack, and the job required on the nodes the controller "
            "picks from its watch of nodes and pods, as the simulator places it), "
            "kueue-topology (Kueue's podset-preferred-topology annotation, where Kueue's "
            "topology-aware scheduling is on) or none"
        ),
    )
    placement_topology_key: str = field(
        default=HOSTNAME,
        metadata=doc(
            "the node label of one node (pack's topologyKey) or Kueue's lowest topology level "
            "(kueue-topology's annotation value)"
        ),
    )
    capacity: CapacitySettings = field(default_factory=CapacitySettings)
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    kueue: KueueSettings = field(default_factory=KueueSettings)
    trainer: TrainerSettings = field(default_factory=TrainerSettings)
    cluster_profile_file: Path | None = field(
        default=None, metadata=doc("the cluster's measured Allreduce profile (JSON)")
    )

    def __post_init__(self) -> None:
        check_bounds(self)
        check_name(
            "placement_topology_key",
            self.placement_topology_key,
            _LABEL_KEY,
            "a node label key like kubernetes.io/hostname",
        )
        self.autoscaler_config()  # the core validates its own options

    def autoscaler_config(self) -> AutoscalerConfig:
        """The core's settings from this section (null keys: the mode's defaults)."""
        given = {
            "delta_s": self.delta_s,
            "restart_s": self.restart_cost_s,
            "hysteresis": self.hysteresis,
            "backfill": self.backfill,
            "objective": self.objective,
            "remaining_exponent": self.remaining_exponent,
            "early_share": self.early_share,
        }
        settings: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        settings.update(
            min_runtime_s=self.min_runtime_s,
            max_min_runtime_s=self.max_min_runtime_s,
            policy=self.policy,
            queue=self.queue,
            optimizer=self.optimizer.value,
        )
        if self.mode is Mode.PAPER:
            return AutoscalerConfig.paper(**settings)
        return AutoscalerConfig(**settings)


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
            check_name(f"namespaces[{i}]", ns, DNS_LABEL, "a namespace name (DNS-1123 label)")


_SOURCES = Sources(BellowsConfig)
_LEAVES = _SOURCES.leaves


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
        _SOURCES.from_file(path, values)
    _SOURCES.from_env(env, values)
    _SOURCES.from_flags(overrides, values)
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
