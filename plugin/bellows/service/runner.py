"""Running ``bellows controller`` and ``bellows bridge`` from a :class:`BellowsConfig`.

Each process serves ``/healthz``, ``/readyz`` and ``/metrics``, connects to NATS and to the
Kubernetes API, and does its work only while it holds its Lease (two replicas: one active,
the other ready to take over). Everything here is wiring; the logic lives in the layers
below.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence

import structlog
from kubernetes import client as k8s
from nats.js import JetStreamContext

from bellows.autoscaler import Engines
from bellows.bus import (
    Batcher,
    EventConsumer,
    EventPublisher,
    EventPump,
    KvResumeStore,
    connect,
    ensure_kv,
    ensure_streams,
)
from bellows.bus.transient import ride_out
from bellows.inputs import brief
from bellows.jobs import SpecError
from bellows.kube import KubeApi, keys
from bellows.kube.client import client_from_config
from bellows.scaling import ClusterProfile
from bellows.service import capacity
from bellows.service.allocator import release_free_heap
from bellows.service.assembly import (
    cluster_profile,
    make_pools,
    managed_namespaces,
    served_kinds,
)
from bellows.service.capacity import NoGpuNodeError
from bellows.service.clock import ServiceClock
from bellows.service.config import BellowsConfig, CapacitySettings, KubernetesSettings
from bellows.service.health import Health, serving
from bellows.service.kernel_child import controller_rent_rule
from bellows.service.leader import LeaderElector, default_identity
from bellows.service.logging import configure_logging
from bellows.service.memory import Memory, open_memory
from bellows.service.metrics import Metrics
from bellows.service.node_view import NodeView
from bellows.service.node_watches import capacity_watch, node_view_of, typed_nodes, view_started
from bellows.service.pools import Pools
from bellows.service.progress_loop import start_progress_loop
from bellows.service.queues import QueueIndex
from bellows.service.watching import kube_bridges

__all__ = ["kube_api_client", "read_capacity", "run_bridge", "run_controller"]

_log = structlog.get_logger("bellows.service")

Lead = Callable[[asyncio.Event], Awaitable[None]]


def kube_api_client(settings: KubernetesSettings) -> k8s.ApiClient:
    """A client from the service account (in a pod) or from a kubeconfig;
    :class:`~bellows.kube.kubeconfig.KubeconfigError` names a kubeconfig that is
    missing, empty, not UTF-8 or not a usable kubeconfig."""
    in_cluster = settings.in_cluster
    if in_cluster is None:
        in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    return client_from_config(settings.kubeconfig, settings.context, in_cluster=in_cluster)


async def read_capacity(api_client: k8s.ApiClient, settings: CapacitySettings) -> int:
    """GPUs to share at start: the configured number, else the ready, schedulable nodes'
    allocatable GPUs (:func:`bellows.service.capacity.read_capacity`; a watch keeps it)."""
    return await capacity.read_capacity(KubeApi(api_client), settings)


def _queue_watch(queues: QueueIndex | None) -> list[asyncio.Task[None]]:
    """Beside Kueue, the task that keeps the LocalQueues and ClusterQueues (the pools)."""
    if queues is None:
        return []
    return [asyncio.create_task(queues.watch(), name="queue-watch")]


def _identity() -> str:
    """This campaign's name in the Lease: the pod's name, plus a suffix per campaign.

    The suffix keeps a restarted container (same pod name) from taking its predecessor's
    lease for its own, and two replicas in one process (tests) apart.
    """
    pod = os.environ.get("POD_NAME")
    return f"{pod}_{default_identity().rsplit('_', 1)[1]}" if pod else default_identity()


async def _led(
    config: BellowsConfig,
    api_client: k8s.ApiClient,
    *,
    lease: str,
    lead: Lead,
    stop: asyncio.Event,
    health: Health,
    annotations: Mapping[str, str] | None = None,
) -> None:
    """Run ``lead`` while this process holds ``lease`` (or always, without election),
    ``annotations`` on the Lease while it does."""
    settings = config.leader_election
    if not settings.enabled:
        health.set_ready("leader", True)
        await lead(stop)
        return
    elector = LeaderElector(
        api_client,
        namespace=settings.namespace,
        name=lease,
        identity=_identity(),
        lease_duration_s=settings.lease_duration_s,
        renew_deadline_s=settings.renew_deadline_s,
        retry_period_s=settings.retry_period_s,
        stop_grace_s=settings.stop_grace_s,
        on_change=lambda leading: health.set_ready(
            "leader", True, "leading" if leading else "standby"
        ),
        annotations=annotations,
    )
    await elector.run(lead, stop)


def _either(*events: asyncio.Event) -> tuple[asyncio.Event, asyncio.Task[None]]:
    """An event set as soon as any of ``events`` is (and the task that watches them)."""
    merged = asyncio.Event()

    async def watch() -> None:
        waits = [asyncio.create_task(e.wait()) for e in events]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        merged.set()

    return merged, asyncio.create_task(watch())


RETRY_S = 1.0  # seconds between retries of decisions the cluster did not take
REBUILD_BACKOFF_S = (0.5, 30.0)  # first and longest wait between failed rebuilds


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _started_controller(
    config: BellowsConfig,
    *,
    api_client: k8s.ApiClient,
    api: KubeApi,
    clock: ServiceClock,
    cluster: ClusterProfile,
    metrics: Metrics,
    stop: asyncio.Event,
    health: Health | None = None,
    engines: Engines | None = None,
    memory: Memory | None = None,
    node_view: NodeView | None = None,
) -> Pools | None:
    """The pools' controllers (one, the default pool, unless ``controller.kueue.enabled``),
    their state rebuilt from the cluster; ``None`` if ``stop`` came first.

    A failed rebuild (the API server unreachable or answering errors) is tried again with
    fresh controllers, waiting longer each time, rather than ending the process. So is a
    cluster with no GPU node yet (:class:`~bellows.service.capacity.NoGpuNodeError`): the
    controller logs ``controller.waiting_for_gpu_nodes`` and its readiness check
    ``capacity`` fails until a node with the resource appears.
    """
    wait, longest = REBUILD_BACKOFF_S
    while not stop.is_set():
        try:
            capacity = await read_capacity(api_client, config.controller.capacity)
            typed = await typed_nodes(config, api, cluster, node_view)
        except NoGpuNodeError as err:  # nodes join later (an autoscaled or new cluster)
            _log.warning("controller.waiting_for_gpu_nodes", problem=str(err), retry_s=wait)
            if health is not None:
                health.set_ready("capacity", False, f"waiting for a GPU node: {err}")
            await _wait(stop, wait)
            wait = min(wait * 2, longest)
            continue
        except SpecError:
            raise  # a configuration error does not heal by waiting
        except Exception as err:
            _log.warning("controller.capacity_failed", error=brief(err))
            await _wait(stop, wait)
            wait = min(wait * 2, longest)
            continue
        pools = make_pools(
            config, api=api, clock=clock, cluster=cluster, metrics=metrics, capacity=capacity,
            engines=engines, memory=memory, node_view=node_view, typed=typed,
        )  # fmt: skip
        _log.info("controller.leading", capacity=capacity, kueue=config.controller.kueue.enabled)
        try:
            await pools.rebuild()
        except Exception as err:  # the API server unreachable or answering errors
            _log.warning("controller.rebuild_failed", error=brief(err))
            await _wait(stop, wait)
            wait = min(wait * 2, longest)
            continue
        release_free_heap()  # what the rehearsal's compilations and copies freed
        if health is not None:
            health.set_ready("capacity", True)
        return pools
    return None


@contextlib.asynccontextmanager
async def _component(
    config: BellowsConfig, name: str, api_client: k8s.ApiClient | None
) -> AsyncIterator[tuple[KubeApi, JetStreamContext, Metrics, Health]]:
    """What both processes run on: logging, ``/metrics`` and the probes (expecting "nats"
    and "leader"), the Kubernetes client, and NATS with the streams ensured."""
    configure_logging(config.logging)
    metrics, health = Metrics(), Health(asyncio.get_running_loop().time)
    health.expect("nats", "leader")
    api = KubeApi(api_client or kube_api_client(config.kubernetes))
    async with serving(health, metrics, host=config.metrics.host, port=config.metrics.port) as url:
        _log.info(f"{name}.serving", url=url)
        nc = await connect(config.nats)
        try:
            js = nc.jetstream()
            await ride_out(lambda: ensure_streams(js, config.nats), what="streams.ensure")
            yield api, js, metrics, health
        finally:
            await nc.close()


async def run_controller(
    config: BellowsConfig,
    *,
    stop: asyncio.Event,
    api_client: k8s.ApiClient | None = None,
    clock: ServiceClock | None = None,
) -> None:
    """The controller process: consume events, decide, act — while holding its Lease.

    The optimizer compiles in the background here: this process's rent rule, made here,
    starts its compile-ahead worker (:meth:`RentRule.in_background`) and is passed to every
    pool's core. A round that meets a kernel not yet compiled is solved by the NumPy engine
    (the same allocation) while XLA compiles it beside, so no round waits seconds for a
    compile. Kernels compiled serve every later controller of this process (a lease lost
    and won again). Every compile, the start-up rehearsal's too, runs in a child process
    that fills the persistent compilation cache, from which this process then loads the
    kernel (:mod:`bellows.service.kernel_child`): XLA's working memory is never the
    controller's.
    """
    clock = clock or ServiceClock()
    rent = controller_rent_rule()
    with rent.in_background():
        await _run_controller(
            config, stop=stop, api_client=api_client, clock=clock, engines=Engines(rent=rent)
        )


async def _memory(
    config: BellowsConfig, js: JetStreamContext, clock: ServiceClock, cluster: ClusterProfile
) -> Memory | None:
    """What earlier leaders learned (``controller.learnProgress``; :func:`open_memory`)."""
    on, stall_after_s = config.controller.learn_progress, config.controller.stall_after_s
    return await open_memory(js, config.nats, cluster, stall_after_s, clock) if on else None


async def _run_controller(
    config: BellowsConfig,
    *,
    stop: asyncio.Event,
    api_client: k8s.ApiClient | None,
    clock: ServiceClock,
    engines: Engines,
) -> None:
    async with _component(config, "controller", api_client) as (api, js, metrics, health):
        health.set_ready("nats", True)
        cluster = cluster_profile(config)

        async def lead(lost: asyncio.Event) -> None:
            either, watcher = _either(stop, lost)
            viewing: list[asyncio.Task[None]] = []
            try:
                memory = await _memory(config, js, clock, cluster)
                view = node_view_of(config, cluster)
                viewing = await view_started(config, api, view)
                controller = await _started_controller(
                    config, api_client=api.api_client, api=api, clock=clock, cluster=cluster,
                    metrics=metrics, stop=either, health=health, engines=engines, memory=memory,
                    node_view=view,
                )  # fmt: skip
                if controller is None:
                    return  # stopped (or the lease lost) before the state was rebuilt
                if memory is not None:  # what was kept of jobs gone while no one led
                    await memory.prune(controller.autoscaler)
                consumer = await EventConsumer.open(
                    js, config.nats, namespaces=tuple(config.namespaces), observer=metrics
                )
                pump = _event_pump(
                    config, consumer, controller=controller, clock=clock, metrics=metrics,
                    health=health,
                )  # fmt: skip
                helpers = await _helpers(
                    config, js, api=api, controller=controller, clock=clock, cluster=cluster,
                    metrics=metrics, stop=either, memory=memory, node_view=view,
                )  # fmt: skip
                try:
                    await pump.run(either)
                finally:
                    await _cancelled(helpers)
                    await consumer.close()
            finally:
                watcher.cancel()
                await _cancelled(viewing)

        await _led(
            config, api.api_client, lease=config.leader_election.controller_lease, lead=lead,
            stop=stop, health=health, annotations={keys.MODE: str(config.controller.mode)},
        )  # fmt: skip


def _event_pump(
    config: BellowsConfig,
    consumer: EventConsumer,
    *,
    controller: Pools,
    clock: ServiceClock,
    metrics: Metrics,
    health: Health,
) -> EventPump:
    """The pump from the consumer to the pools' controllers, in every mode: it delivers
    each fetch at once; the core's clock says when rounds are due."""
    return EventPump(
        consumer,
        Batcher(),
        controller.apply,
        clock=clock.now,
        max_deliver=config.nats.max_deliver,
        ack_wait_s=config.nats.ack_wait_s,
        observer=metrics,
        heartbeat=health.register_loop("consume"),
    )


async def _helpers(
    config: BellowsConfig,
    js: JetStreamContext,
    *,
    api: KubeApi,
    controller: Pools,
    clock: ServiceClock,
    cluster: ClusterProfile,
    metrics: Metrics,
    stop: asyncio.Event,
    memory: Memory | None = None,
    node_view: NodeView | None = None,
) -> list[asyncio.Task[None]]:
    """The tasks beside the pump while leading: retries and due rounds, the capacity and
    queue watches (and the pod watch of ``node_view``), and the progress loop
    (``controller.learnProgress``)."""
    retrier = asyncio.create_task(
        controller.keep_house(stop, retry_s=RETRY_S, speedup=clock.speedup)
    )
    helpers = [
        retrier,
        *capacity_watch(config, api, controller, clock, metrics, view=node_view),
        *_queue_watch(controller.queues),
    ]
    if config.controller.learn_progress:
        learning = start_progress_loop(
            js, config.nats, controller=controller, api=api, cluster=cluster,
            stall_after_s=config.controller.stall_after_s, now=clock.now,
            wall_to_clock=clock.at,
            namespaces=managed_namespaces(config), metrics=metrics, stop=stop,
            limits=config.controller.progress.limits(),
            refit_interval_s=config.controller.progress.refit_interval_s, memory=memory,
        )  # fmt: skip
        helpers.append(await learning)
    return helpers


async def _cancelled(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until each has ended."""
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def run_bridge(
    config: BellowsConfig, *, stop: asyncio.Event, api_client: k8s.ApiClient | None = None
) -> None:
    """The bridge process: watch opted-in jobs, publish their facts — while holding its Lease."""
    async with _component(config, "bridge", api_client) as (api, js, metrics, health):
        store = KvResumeStore(await ride_out(lambda: ensure_kv(js, config.nats), what="bridge.kv"))
        publisher = EventPublisher(
            js, prefix=config.nats.subject_prefix, stream=config.nats.stream, observer=metrics
        )
        health.set_ready("nats", True)

        async def lead(lost: asyncio.Event) -> None:
            either, watcher = _either(stop, lost)
            bridges = kube_bridges(
                api,
                publisher=publisher,
                store=store,
                namespaces=managed_namespaces(config),
                kinds=served_kinds(config),
            )
            tasks = [asyncio.create_task(b.run(either)) for b in bridges]
            try:
                await either.wait()
            finally:
                watcher.cancel()
                await _cancelled(tasks)

        await _led(
            config, api.api_client, lease=config.leader_election.bridge_lease, lead=lead,
            stop=stop, health=health,
        )  # fmt: skip
