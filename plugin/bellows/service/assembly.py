"""The controller's parts as its configuration makes them: the pools and their actuator and
reader, the job kinds served, the cluster profile, the namespaces, where the records live and
where the jobs report. :mod:`bellows.service.runner` runs what this assembles."""

from __future__ import annotations

from bellows.autoscaler import Engines
from bellows.kube import Actuator, JobReader, KindAdapter, KubeApi
from bellows.kube.adapters import ALL_KINDS, KINDS
from bellows.kube.placement import Placement
from bellows.kube.progress_env import ProgressEndpoint
from bellows.scaling import ClusterProfile, default_cluster, load_cluster_profile
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.placement_memory import PlacementMemory
from bellows.service.clock import ServiceClock
from bellows.service.config import BellowsConfig
from bellows.service.memory import Memory
from bellows.service.metrics import Metrics, MetricsObserver
from bellows.service.node_view import NodeView
from bellows.service.pools import Pools
from bellows.service.queues import QueueIndex

__all__ = [
    "cluster_profile",
    "make_pools",
    "managed_namespaces",
    "progress_endpoint",
    "queue_index",
    "records_namespace",
    "served_kinds",
]


def queue_index(config: BellowsConfig, api: KubeApi) -> QueueIndex:
    """Beside Kueue: the LocalQueues of the managed namespaces and every ClusterQueue, whose
    quota of ``controller.capacity.resourceName`` is a pool's capacity."""
    resource = config.controller.capacity.resource_name
    return QueueIndex(api, namespaces=managed_namespaces(config), resource=resource)


def cluster_profile(config: BellowsConfig) -> ClusterProfile:
    path = config.controller.cluster_profile_file
    return load_cluster_profile(path) if path else default_cluster()


def managed_namespaces(config: BellowsConfig) -> tuple[str | None, ...]:
    return tuple(config.namespaces) or (None,)


def make_pools(
    config: BellowsConfig,
    *,
    api: KubeApi,
    clock: ServiceClock,
    cluster: ClusterProfile,
    metrics: Metrics,
    capacity: int,
    engines: Engines | None = None,
    memory: Memory | None = None,
    node_view: NodeView | None = None,
    typed: TypedCluster | None = None,
) -> Pools:
    """Fresh controllers for every pool, on ``capacity`` GPUs (not yet rebuilt), their cores
    on ``engines`` (the process's rent rule and compile-ahead worker). With
    ``controller.placement: nodes``, the jobs it sizes are pinned where ``node_view`` places
    them (the view then follows these pools' jobs). ``typed``: the nodes' GPU types
    (:mod:`bellows.service.typed_cluster`; ``None``: one type)."""
    namespaces = managed_namespaces(config)
    kueue = config.controller.kueue.enabled
    learn = config.controller.learn_progress and config.controller.progress.learn_placements
    view = node_view if config.controller.placement is Placement.NODES else None
    queues = queue_index(config, api) if kueue else None
    pools = Pools(
        placements=PlacementMemory(cluster) if learn else None,
        api=api,
        core=config.controller.autoscaler_config(),
        cluster=cluster,
        capacity=capacity,
        actuator=_actuator(config, api, view, queues, typed),
        reader=JobReader(
            api,
            namespace=namespaces[0] if len(namespaces) == 1 else None,
            kueue=kueue,
            kinds=served_kinds(config),
        ),
        namespaces=namespaces,
        now=clock.now,
        wall_to_clock=clock.at,
        observer=MetricsObserver(metrics),
        queues=queues,
        engines=engines,
        memory=memory,
        typed=typed,
        type_label=config.controller.capacity.gpu_type_label,
    )
    if view is not None:
        view.follow(lambda: pools.held)
    return pools


def _actuator(
    config: BellowsConfig,
    api: KubeApi,
    view: NodeView | None,
    queues: QueueIndex | None,
    typed: TypedCluster | None,
) -> Actuator:
    """The actuator every pool drives the jobs with."""
    return Actuator(
        api,
        halt_timeout_s=config.controller.halt_timeout_s,
        kueue=queues is not None,
        kinds=served_kinds(config),
        placement=config.controller.placement,
        topology_key=config.controller.placement_topology_key,
        records_namespace=records_namespace(config),
        progress=progress_endpoint(config),
        pins=view,
        # beside Kueue's topology-aware scheduling, Kueue is asked for the nodes
        topology=queues.topology_aware if queues is not None else None,
        # each GPU type's node label value, for the pods of the jobs given it
        gpu_products=None if typed is None else typed.products,
        type_label=config.controller.capacity.gpu_type_label,
    )


def progress_endpoint(config: BellowsConfig) -> ProgressEndpoint | None:
    """Where the jobs' pods report (``controller.progress.inject``, with learnProgress)."""
    progress = config.controller.progress
    if not (config.controller.learn_progress and progress.inject):
        return None
    return ProgressEndpoint(progress.secret_name, config.nats.subject_prefix)


def records_namespace(config: BellowsConfig) -> str:
    """Where the TrainJobs' re-creation records live: ``controller.trainer.recordsNamespace``,
    by default the namespace of the controller's leader-election Lease (the release's)."""
    return config.controller.trainer.records_namespace or config.leader_election.namespace


def served_kinds(config: BellowsConfig) -> tuple[KindAdapter, ...]:
    """The job kinds the bridge watches and the controller sizes: PyTorchJob and MPIJob,
    and TrainJob with ``controller.trainer.enabled`` (its CRDs must then be installed)."""
    return ALL_KINDS if config.controller.trainer.enabled else KINDS
