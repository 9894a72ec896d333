"""``bellows demo``: the whole live stack on this machine, checked against the simulator.

A real ``nats-server`` with JetStream in a temporary folder, the emulated Kubernetes API and
Kubeflow operators, the bridge (one watch per kind), the controller behind the event pump,
and a replayer that submits a generated bursty workload at its arrival times under time
compression. When every job has finished or been rejected, the same trace runs through the
simulator, and the two summaries are set side by side with the paper's own
simulator-vs-cluster tolerances (jobs completed within 5 %, SJS efficiency within 5 %, drop
ratio within 4 points). Both runs use one mode: Bellows mode by default (starts at events,
rounds on the core's Δ grid), or the paper's (``paper=True``: rounds on that grid only);
both halves decide when a round is due with the same core clock.
By default (``efficiency``) the jobs train at goodput: each progresses in reference samples
by its model's statistical efficiency at the batch it runs (:data:`MODEL_EFFICIENCY`,
restated at the job's batch as the controller states it), its profile names its model (so
the controller decides it by goodput from its first round), and it reports its progress and
gradient noise as its pods would, through the endpoint the controller writes into them
(:mod:`bellows.kube.progress_env`; the namespace's ``bellows-progress`` Secret); the
controller learns from the reports, and the simulator half charges the same efficiency.
With ``wrong_priors`` the jobs train at another speed than annotated and report progress,
the controller learns online (or not: ``learn=False``), and the simulator half runs the same
truth and learns as the controller does (:mod:`bellows.sim.learning`); the simulator deciding
on the true profiles from the start is reported beside them (``oracle_*``). With
``kueue_crds`` the emulated cluster runs the emulated Kueue too, every job is submitted to a
LocalQueue whose ClusterQueue holds the demo's GPUs as quota, on a flavor with a topology of
the nodes (Kueue's topology-aware scheduling places the pods), and the controller cooperates
with Kueue (docs/kube.md, "Beside Kueue"): the same agreement with the simulator, through
Kueue's admission. With ``typed`` (``bellows demo --cluster mixed``), the cluster is Sia's
mix of GPU types, each job trains at its type's speed and both halves decide by type
(:mod:`bellows.twin.mixed`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import structlog
from kubernetes import client as k8s

from bellows.autoscaler import AutoscalerConfig, Policy
from bellows.bus import (
    Batcher,
    EventConsumer,
    EventPublisher,
    EventPump,
    KvResumeStore,
    NatsSettings,
    connect,
    ensure_kv,
    ensure_streams,
)
from bellows.bus.server import running_nats_server
from bellows.emulator import EmulatedCluster
from bellows.emulator.nodes import uniform_nodes
from bellows.emulator.typed import GPU_PRODUCT, typed_nodes
from bellows.inputs import brief
from bellows.jobs import TypeSection
from bellows.kube import Actuator, JobReader, KubeApi, kind_named
from bellows.kube.kueue import Strategy
from bellows.kube.placement import HOSTNAME, Placement
from bellows.kube.progress_env import ProgressEndpoint
from bellows.kube.statuses import JobStatus, read_status
from bellows.optimizer import Method
from bellows.scaling import MODEL_EFFICIENCY, ClusterProfile, EfficiencyProfile, default_cluster
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.online import SpeedFactors
from bellows.scaling.placement_memory import PlacementMemory
from bellows.service.capacity import watch_capacity
from bellows.service.clock import ServiceClock
from bellows.service.node_view import NodeView, watch_pods
from bellows.service.pools import Pools
from bellows.service.queues import QueueIndex
from bellows.service.watching import kube_bridges
from bellows.sim import SimResult
from bellows.sim import run as simulate
from bellows.sim.learning import Learning, wrong_priors
from bellows.sim.metrics import JobRecord, summarize
from bellows.sim.workloads import TraceJob
from bellows.sim.workloads.generating import Pattern, WorkloadSpec, generate
from bellows.sim.workloads.traces import fit_trace
from bellows.twin.ledger import Ledger
from bellows.twin.mixed import capacity_settings, refusal, typed_trace
from bellows.twin.replay import DEFAULT_KINDS, job_manifest, manifest_name, unique_names
from bellows.twin.wrong_priors import REPORT_S, learning_tasks, true_speeds, true_trace

__all__ = [
    "Bound",
    "DemoOptions",
    "DemoResult",
    "Progress",
    "demo_nodes",
    "job_efficiencies",
    "run_demo",
    "workload",
]

_log = structlog.get_logger("bellows.demo")
NAMESPACE = "default"
QUEUE, CLUSTER_QUEUE = "demo", "demo"  # the LocalQueue and ClusterQueue of --kueue
TOPOLOGY, FLAVOR = "nodes", "gpus"  # --kueue's Topology (one level: the node) and its flavor
GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true"}  # GPU feature discovery's node label
PROGRESS_SECRET = "bellows-progress"  # the namespace's progress endpoint (the chart's name)


@dataclass(frozen=True)
class DemoOptions:
    """What to replay and how fast. Times are cluster (simulated) minutes."""

    crds: Sequence[Path]
    gpus: int = 16
    minutes: float = 60.0
    speedup: float = 120.0
    seed: int = 7
    delta_min: float | None = None  # None: the mode's (10 min paper, 2 min Bellows)
    policy: Policy = Policy.ELASTIC
    queue: bool = True
    restart_s: float | None = None  # None: the mode's (0 paper, 60 s Bellows)
    drain_factor: float = 4.0  # give up waiting after drain_factor x minutes
    paper: bool = False
    # jobs train at another speed than annotated (bellows.twin.wrong_priors); the
    # simulator half then replays the true profiles; learn: the controller learns online
    wrong_priors: bool = False
    learn: bool = True
    learn_placements: bool = False  # and the step times per class (learnPlacements)
    # jobs train at goodput and report their gradient noise (see the module docstring)
    efficiency: bool = True
    # Kueue's CRDs: with them, every job goes through the emulated Kueue (see the docstring)
    kueue_crds: Sequence[Path] = ()
    # the job kinds the trace's jobs take in turn; TrainJob needs the Trainer's CRDs
    kinds: Sequence[str] = DEFAULT_KINDS
    trainer_crds: Sequence[Path] = ()
    # what the controller asks of the scheduler for every sizing (controller.placement);
    # the emulated cluster has nodes of the cluster profile's GPUs, where the pods land
    placement: Placement = Placement.NODES
    # where to write a kubeconfig for the emulated cluster once it listens (kubectl, bellows
    # status): http on 127.0.0.1, no credentials (the emulator has no authentication)
    kubeconfig: Path | None = None
    # several GPU types (--cluster mixed: bellows.twin.mixed): the cluster's, and each
    # model's sections per type (sia_sections), which the trace's jobs take
    typed: TypedCluster | None = None
    type_sections: Mapping[str, tuple[TypeSection, ...]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.typed is None:
            return
        why = refusal(
            self.typed, gpus=self.gpus, paper=self.paper, kueue=self.kueue,
            wrong_priors=self.wrong_priors, learn_placements=self.learn_placements,
        )  # fmt: skip
        if why is not None:
            raise ValueError(why)

    @property
    def cluster(self) -> ClusterProfile:
        """The cluster profile both halves price with: the first type's on several."""
        return default_cluster() if self.typed is None else self.typed.types[0].cluster

    @property
    def kueue(self) -> bool:
        return bool(self.kueue_crds)

    def config(self, *, optimizer: Method = "auto") -> AutoscalerConfig:
        """The core's settings for both runs (the live core's Δ is set by the caller)."""
        given: dict[str, Any] = {"policy": self.policy, "queue": self.queue}
        if self.delta_min is not None:
            given["delta_s"] = self.delta_min * 60.0
        if self.restart_s is not None:
            given["restart_s"] = self.restart_s
        given["optimizer"] = optimizer
        return AutoscalerConfig.paper(**given) if self.paper else AutoscalerConfig(**given)


@dataclass(frozen=True)
class Bound:
    """One live-vs-simulator comparison and its tolerance."""

    metric: str
    live: float
    simulated: float
    tolerance: str
    ok: bool


@dataclass(frozen=True)
class DemoResult:
    live: dict[str, Any]
    simulated: dict[str, Any]
    bounds: tuple[Bound, ...]
    jobs: int
    wall_s: float
    mismatches: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return all(b.ok for b in self.bounds)


@dataclass
class Progress:
    """What the live view shows, refreshed while the demo runs."""

    minute: float = 0.0
    submitted: int = 0
    total: int = 0
    running: int = 0
    queued: int = 0
    done: int = 0
    rejected: int = 0
    gpus_allocated: int = 0
    notes: list[str] = field(default_factory=list)
    # what bellows status shows of each job, read from the emulated cluster while the view
    # is live (one list per kind, no Events): what was decided for it, and why
    jobs: list[JobStatus] = field(default_factory=list)


def _nodes(options: DemoOptions, cluster: ClusterProfile) -> dict[str, Any]:
    """The emulated cluster's nodes (and, on several GPU types, their types)."""
    if options.typed is None:
        return {"gpu_nodes": demo_nodes(options.gpus, cluster.gpus_per_node)}
    gpus, labels = typed_nodes(options.typed, GPU_PRODUCT)
    return {"gpu_nodes": gpus, "labels_by_node": labels, "typed": options.typed}


def demo_nodes(gpus: int, per_node: int) -> dict[str, int]:
    """The emulated cluster's nodes: ``gpus`` GPUs on nodes of ``per_node`` (the cluster
    profile's, which the JSA prices with), the last one partial."""
    full, rest = divmod(gpus, per_node)
    nodes = uniform_nodes(full, per_node)
    if rest:
        nodes[f"gpu-node-{full}"] = rest
    return nodes


def workload(options: DemoOptions, cluster: ClusterProfile) -> tuple[TraceJob, ...]:
    """The bursty mixed workload both runs replay (categories 1-4, seeded)."""
    spec = WorkloadSpec(
        pattern=Pattern.BURSTY,
        minutes=options.minutes,
        categories=(1, 2, 3, 4),
        gpus=options.gpus,
        period_min=max(options.minutes / 4, options.config().delta_s / 60.0),
    )
    trace = generate(spec, np.random.default_rng(options.seed), cluster=cluster)
    unique_names(trace)
    return trace if options.typed is None else typed_trace(trace, options.type_sections)


JCT_SHARE = 0.10
"""Average JCT's tolerance (issue 37: the twin at goodput agrees within 10 %)."""
KUEUE_SJS_SHARE = 0.15
"""SJS efficiency's tolerance once Kueue admitted a job before Bellows could hold it: 10 %
until restart growth 0.2 (issue 36), which the live half beside Kueue ran 0.934-1.045
against the simulator's 1.058 (1-12 % off), by which jobs and how many (2-4 of 7) Kueue
admitted first in the test's run (docs/live.md). A loosened bound, as average JCT's: the
early admission is not modelled in the simulator half."""
KUEUE_JCT_SHARE = 0.15
"""Average JCT's tolerance then: the same unmodelled early admission. It ran 8.5-12 % behind
the simulator before issue 36's spaced early rounds and 11-12 % after them (docs/live.md):
the simulator half gained 3 % from them, the live half beside Kueue did not (its jobs
admitted first run at their owner's size until Bellows resizes them)."""


def compare(live: dict[str, Any], simulated: dict[str, Any]) -> tuple[Bound, ...]:
    """The paper's simulator-vs-cluster tolerances (DESIGN.md §2; issue: 5 %, 5 %, 4 pts),
    and average JCT within :data:`JCT_SHARE`.

    Beside Kueue (``live["kueue_admitted_first"]``, the jobs Kueue admitted at their owner's
    size before Bellows held or sized them), SJS efficiency is held to
    :data:`KUEUE_SJS_SHARE` and average JCT to :data:`KUEUE_JCT_SHARE` instead: each such job
    runs at its owner's size until Bellows takes or evicts it, often then paying one restart,
    which the simulator does not model (it has no Kueue); which jobs it happens to depends
    on the live stack's timing (docs/kube.md, "Beside Kueue": the early-admission race).
    """

    def within(metric: str, share: float, why: str = "") -> Bound:
        a, b = float(live[metric] or 0.0), float(simulated[metric] or 0.0)
        ok = abs(a - b) <= share * max(abs(b), 1e-9) or a == b
        return Bound(metric, a, b, f"within {share:.0%}{why}", ok)

    first = int(live.get("kueue_admitted_first") or 0)
    sjs = (
        within("sjs_efficiency", KUEUE_SJS_SHARE, f" ({first} admitted by Kueue first)")
        if first
        else within("sjs_efficiency", 0.05)
    )

    drop = Bound(
        "drop_ratio",
        float(live["drop_ratio"]),
        float(simulated["drop_ratio"]),
        "within 4 points",
        abs(float(live["drop_ratio"]) - float(simulated["drop_ratio"])) <= 0.04,
    )
    jct = (
        within("avg_jct_min", KUEUE_JCT_SHARE, f" ({first} admitted by Kueue first)")
        if first
        else within("avg_jct_min", JCT_SHARE)
    )
    return (within("jobs_completed", 0.05), sjs, jct, drop)


@contextlib.asynccontextmanager
async def _stack(
    options: DemoOptions,
    cluster: ClusterProfile,
    true_speed: Callable[[str, str], SpeedFactors | None] | None = None,
    efficiency: Callable[[str, str], EfficiencyProfile | None] | None = None,
) -> AsyncIterator[dict[str, Any]]:
    async with (
        running_nats_server() as nats_server,
        EmulatedCluster(
            crds=[*options.crds, *options.kueue_crds, *options.trainer_crds],
            compression=options.speedup,
            restart_s=options.config().restart_s,
            cluster=cluster,
            namespaces=(NAMESPACE,),
            true_speed=true_speed,
            efficiency=efficiency,
            kueue=options.kueue,
            node_labels=GPU_NODE_LABELS,
            trainer="TrainJob" in options.kinds,
            **_nodes(options, cluster),
        ) as kube,
    ):
        if options.kubeconfig is not None:
            kube.write_kubeconfig(options.kubeconfig, NAMESPACE)
        # the namespace's progress endpoint, as the chart makes it (this NATS has no users)
        endpoint = {"url": nats_server.url, "inbox": "_INBOX"}
        kube.store.create(
            kube.store.resources["v1/secrets"],
            NAMESPACE,
            {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": PROGRESS_SECRET, "namespace": NAMESPACE},
                "stringData": endpoint,
            },
        )  # fmt: skip
        if options.kueue:  # the admin's queues: the demo's GPUs as one ClusterQueue's quota,
            # on a flavor with a topology of the nodes (Kueue's topology-aware scheduling)
            strategy: Strategy = "BestEffortFIFO" if options.config().backfill else "StrictFIFO"
            kube.add_topology(TOPOLOGY, [HOSTNAME])
            kube.add_resource_flavor(FLAVOR, node_labels=GPU_NODE_LABELS, topology=TOPOLOGY)
            kube.add_cluster_queue(CLUSTER_QUEUE, {FLAVOR: options.gpus}, strategy=strategy)
            kube.add_local_queue(QUEUE, CLUSTER_QUEUE, namespace=NAMESPACE)
        settings = NatsSettings(servers=(nats_server.url,), ack_wait_s=30.0)
        nc = await connect(settings)
        try:
            js = nc.jetstream()
            await ensure_streams(js, settings)
            yield {
                "settings": settings,
                "js": js,
                "kube": kube,
                "kv": await ensure_kv(js, settings),
            }
        finally:
            await nc.close()


async def run_demo(
    options: DemoOptions,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    timer: Callable[[], float] | None = None,
) -> DemoResult:
    """Run the live stack on the workload, then the simulator; compare them."""
    loop = asyncio.get_running_loop()
    timer = timer or loop.time
    started = timer()
    cluster = options.cluster
    trace = workload(options, default_cluster())  # the same trace on several types
    # The engines differ on purpose, so that agreeing checks both: the live controller runs
    # the NumPy engine, the simulator a JAX path ("dense": "auto" would pick NumPy at these
    # sizes, see docs/optimizer.md).
    live_config = options.config(optimizer="numpy")
    horizon_s = options.minutes * 60.0
    truth = true_speeds(trace) if options.wrong_priors else None
    efficiencies = job_efficiencies(trace) if options.efficiency else {}
    efficiency = _by_object(trace, efficiencies)
    async with _stack(options, cluster, truth, efficiency) as parts:
        settings: NatsSettings = parts["settings"]
        js = parts["js"]
        api = KubeApi(parts["kube"].api_client())
        clock = ServiceClock(speedup=options.speedup)
        ledger = Ledger(cluster)
        queues = QueueIndex(api, namespaces=(NAMESPACE,)) if options.kueue else None
        view = _node_view(options, cluster)
        controller = _controller(
            options, api=api, cluster=cluster, clock=clock, ledger=ledger, queues=queues,
            prefix=settings.subject_prefix, view=view,
        )  # fmt: skip
        await controller.rebuild()
        stop = asyncio.Event()
        publisher = EventPublisher(js, prefix=settings.subject_prefix, stream=settings.stream)
        store = KvResumeStore(parts["kv"])
        bridges = kube_bridges(
            api,
            publisher=publisher,
            store=store,
            namespaces=(NAMESPACE,),
            kinds=tuple(kind_named(k) for k in options.kinds),
        )
        consumer = await EventConsumer.open(js, settings)
        pump = EventPump(
            consumer,
            Batcher(),
            controller.apply,
            clock=clock.now,
            max_deliver=settings.max_deliver,
            ack_wait_s=settings.ack_wait_s,
            poll_s=0.05,
        )
        tasks = [asyncio.create_task(b.run(stop)) for b in bridges]
        tasks += [asyncio.create_task(queues.watch())] if queues is not None else []
        tasks += _view_tasks(api, view, controller, clock, options.typed)
        tasks.append(asyncio.create_task(pump.run(stop)))
        tasks.append(
            asyncio.create_task(controller.keep_house(stop, retry_s=0.2, speedup=clock.speedup))
        )
        if options.wrong_priors or efficiencies:
            tasks += await learning_tasks(
                kube=parts["kube"], js=js, settings=settings, controller=controller, api=api,
                cluster=cluster, now=clock.now, wall_to_clock=clock.at, speedup=options.speedup,
                restart_s=live_config.restart_s, namespace=NAMESPACE,
                learn=options.learn, stop=stop, noise=efficiency,
            )  # fmt: skip
        progress = Progress(total=len(trace))
        if on_progress is not None:
            tasks.append(asyncio.create_task(_read_jobs(api, cluster, progress, stop)))
        try:
            await _replay_and_wait(
                trace, api=api, clock=clock, ledger=ledger, controller=controller,
                progress=progress, options=options, on_progress=on_progress,
            )  # fmt: skip
        finally:
            stop.set()
            await asyncio.wait(tasks, timeout=10)
            for task in tasks:
                task.cancel()
            await consumer.close()
        records, spread = ledger.records(), _spread_share(parts["kube"])
    live = _live_summary(
        records,
        ledger,
        options,
        horizon_s,
        mode=live_config.mode.value,
        spread=spread,
        charged=bool(efficiencies),
    )
    sim_jobs, simulated = _simulated_half(options, trace, cluster, horizon_s, efficiencies)
    mismatches = final_state_mismatches(records, sim_jobs, trace)
    bounds = (*compare(live, simulated), _exact("jobs_in_a_different_final_state", mismatches))
    return DemoResult(live, simulated, bounds, len(trace), timer() - started, mismatches)


def _node_view(options: DemoOptions, cluster: ClusterProfile) -> NodeView | None:
    """The controller's node view, with ``--placement nodes`` (the default)."""
    if options.placement is not Placement.NODES:
        return None
    typed = options.typed
    per_type = None if typed is None else {t.name: t.gpus_per_node for t in typed.types}
    return NodeView(gpus_per_node=cluster.gpus_per_node, type_gpus_per_node=per_type)


def _view_tasks(
    api: KubeApi,
    view: NodeView | None,
    controller: Pools,
    clock: ServiceClock,
    typed: TypedCluster | None = None,
) -> list[asyncio.Task[None]]:
    """With a node view (``controller.placement: nodes``), its node and pod watches (the
    capacity watch keeps the pools' capacity too: the demo's nodes hold its GPUs); on
    several GPU types (``typed``) the capacity watch, view or not, keeps it per type."""
    if view is None and typed is None:
        return []
    nodes = watch_capacity(
        api, capacity_settings(typed), controller.set_capacity,
        on_nodes=None if view is None else view.set_nodes,
        on_types=None if typed is None else controller.set_types,
        on_node_types=None if view is None or typed is None else view.set_node_types,
        now=clock.now, speedup=clock.speedup,
    )  # fmt: skip
    if view is None:
        return [asyncio.create_task(nodes)]
    pods = watch_pods(api, view, (NAMESPACE,))
    return [asyncio.create_task(nodes), asyncio.create_task(pods)]


def _simulated_half(
    options: DemoOptions,
    trace: Sequence[TraceJob],
    cluster: ClusterProfile,
    horizon_s: float,
    efficiencies: Mapping[str, EfficiencyProfile],
) -> tuple[Sequence[JobRecord], dict[str, Any]]:
    """The simulator half's jobs and summary; with ``wrong_priors``, the oracle's beside."""
    sim = _simulated(options, trace, cluster, horizon_s, efficiencies)
    simulated = sim.summary() | {"efficiency_charged": bool(efficiencies)}
    if options.wrong_priors:  # what deciding on the truth from the start would give
        oracle = _simulated(options, trace, cluster, horizon_s, efficiencies, oracle=True)
        summary = oracle.summary()
        simulated |= {f"oracle_{k}": summary[k] for k in ("avg_jct_min", "sjs_efficiency")}
    return sim.jobs, simulated


def _simulated(
    options: DemoOptions,
    trace: Sequence[TraceJob],
    cluster: ClusterProfile,
    horizon_s: float,
    efficiencies: Mapping[str, EfficiencyProfile],
    *,
    oracle: bool = False,
) -> SimResult:
    """The simulator half: the same trace, the same core settings, the same efficiency
    charged, on nodes with ``--placement nodes`` (as the live controller's node view; not
    beside Kueue, which starts half the jobs at their owner's size, unmodelled there: on
    nodes its SJS efficiency runs more than 10 % ahead of the live run's). With
    ``wrong_priors`` the jobs run at their true speed and report, and the core learns from
    the reports as the controller does (or not: ``learn``); ``oracle``: the true profiles
    in the trace instead, decisions on the truth from the start."""
    learning = None
    if options.wrong_priors and not oracle:
        learning = Learning(wrong_priors(trace), report_s=REPORT_S, learn=options.learn)
    jobs = true_trace(trace) if oracle else trace
    return simulate(
        fit_trace(jobs, options.gpus)[0],  # k_max clamped, as the controller does
        gpus=options.gpus,
        config=options.config(optimizer="dense"),
        cluster=cluster,
        horizon_s=horizon_s,
        efficiency=efficiencies or None,
        learning=learning,
        learn_placements=learning is not None and options.learn_placements,
        # on nodes as the live run is with its node view (the core told where GPUs sit);
        # not beside Kueue, which starts jobs at their owner's size, as the simulator does not
        nodes=options.placement is Placement.NODES and not options.kueue,
        typed=options.typed,  # several GPU types: as bellows simulate --cluster sia-mix
    )


def _by_object(
    trace: Sequence[TraceJob], efficiencies: Mapping[str, EfficiencyProfile]
) -> Callable[[str, str], EfficiencyProfile | None] | None:
    """``efficiencies`` by the jobs' object names (``None`` when empty)."""
    if not efficiencies:
        return None
    by_name = {manifest_name(job): efficiencies.get(job.spec.name) for job in trace}
    return lambda namespace, name: by_name.get(name)


def _controller(
    options: DemoOptions,
    *,
    api: KubeApi,
    cluster: ClusterProfile,
    clock: ServiceClock,
    ledger: Ledger,
    queues: QueueIndex | None,
    prefix: str,
    view: NodeView | None = None,
) -> Pools:
    """The live controller, its decisions noted in ``ledger`` (and, for each, whether it was
    made by goodput); with a node ``view``, the jobs it sizes pinned where the view places
    them."""
    kinds = tuple(kind_named(k) for k in options.kinds)
    typed = options.typed  # several GPU types: each job pinned to its type's nodes
    products = {} if typed is None else typed.products
    controller = Pools(
        api=api,
        # the NumPy engine (the simulator runs a JAX one: agreeing checks both); the core's
        # clock decides the rounds, as in the simulator
        core=options.config(optimizer="numpy"),
        cluster=cluster,
        capacity=options.gpus,
        # the controller's default placement (pack) on every sizing patch, and the
        # namespace's progress endpoint written into the jobs' pods
        actuator=Actuator(
            api,
            kueue=options.kueue,
            kinds=kinds,
            placement=options.placement,
            progress=ProgressEndpoint(PROGRESS_SECRET, prefix),
            pins=view,
            topology=queues.topology_aware if queues is not None else None,
            gpu_products=products,
            type_label=GPU_PRODUCT,
        ),
        reader=JobReader(api, namespace=NAMESPACE, kueue=options.kueue, kinds=kinds),
        now=clock.now,
        wall_to_clock=clock.at,
        observer=ledger,
        queues=queues,
        # what the jobs measure, per class (controller.progress.learnPlacements: opt in)
        placements=PlacementMemory(cluster) if options.learn_placements else None,
        typed=typed,  # the default pool decides by (type, count): a TypedAutoscaler
    )
    if view is not None:
        view.follow(lambda: controller.held)

    def charged(name: str) -> EfficiencyProfile | None:
        """The efficiency the pool holding ``name`` decides it by (``None``: by throughput,
        or a job no pool holds any more)."""
        try:
            return controller.autoscaler.charged(name)
        except KeyError:
            return None

    ledger.charged = charged
    return controller


def job_efficiencies(trace: Sequence[TraceJob]) -> dict[str, EfficiencyProfile]:
    """Each trace job's statistical efficiency, by its name: its model's
    (:data:`MODEL_EFFICIENCY`) restated at its batch, as the controller restates the
    ``{"model": ...}`` its profile names (its work then counts reference samples at that
    batch, in the live run and the simulator alike)."""
    return {
        job.spec.name: MODEL_EFFICIENCY[job.model].rebased(job.spec.batch_size)
        for job in trace
        if job.model in MODEL_EFFICIENCY
    }


def _spread_share(kube: EmulatedCluster) -> float:
    """The share of the live run's job-time whose pods the emulated scheduler put on more
    nodes than the job's GPUs need (the simulator's ``spread_job_time_share``)."""
    assert kube.operator is not None
    return kube.placer.spread_job_time_share(kube.operator.emulated_now())


def _live_summary(
    records: Sequence[JobRecord],
    ledger: Ledger,
    options: DemoOptions,
    horizon_s: float,
    *,
    mode: str,
    spread: float,
    charged: bool = False,
) -> dict[str, Any]:
    live = summarize(records, gpus=options.gpus, horizon_s=horizon_s, span_s=horizon_s)
    live["mode"] = mode
    live["spread_job_time_share"] = spread  # where the emulated scheduler put the pods
    live["efficiency_charged"] = charged  # the jobs trained, and were priced, at goodput
    live["jobs_decided_by_goodput"] = ledger.decided_by_goodput
    if options.kueue:
        live["kueue_admitted_first"] = ledger.admitted_first
    return live


def _final_state(record: JobRecord | None) -> str:
    if record is None:
        return "never seen"
    if record.rejected:
        return "rejected"
    return "finished" if record.finish_s is not None else "unfinished"


def final_state_mismatches(
    live: Sequence[JobRecord], simulated: Sequence[JobRecord], trace: Sequence[TraceJob]
) -> tuple[str, ...]:
    """Trace jobs whose final state (finished, rejected, unfinished) differs between runs."""
    by_object = {r.name.rsplit("/", 1)[-1]: r for r in live}  # kind/namespace/name
    by_trace = {r.name: r for r in simulated}
    out = []
    for job in trace:
        a = _final_state(by_object.get(manifest_name(job)))
        b = _final_state(by_trace.get(job.spec.name))
        if a != b:
            out.append(f"{job.spec.name}: live {a}, simulator {b}")
    return tuple(out)


def _exact(metric: str, mismatches: Sequence[str]) -> Bound:
    return Bound(metric, float(len(mismatches)), 0.0, "none", not mismatches)


async def _replay_and_wait(
    trace: Sequence[TraceJob],
    *,
    api: KubeApi,
    clock: ServiceClock,
    ledger: Ledger,
    controller: Pools,
    progress: Progress,
    options: DemoOptions,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    custom = k8s.CustomObjectsApi(api.api_client)
    deadline = options.minutes * 60.0 * options.drain_factor

    def refresh() -> None:
        auto = controller.autoscaler
        records = ledger.records()
        progress.minute = clock.now() / 60.0
        progress.running = len(auto.allocations)
        progress.queued = len(auto.queued)
        progress.gpus_allocated = sum(a.gpus for a in auto.allocations.values())
        progress.done = sum(1 for r in records if r.finish_s is not None)
        progress.rejected = sum(1 for r in records if r.rejected)
        if on_progress is not None:
            on_progress(progress)

    for index, job in enumerate(sorted(trace, key=lambda j: j.arrival_s)):
        await _sleep_refreshing(clock, job.arrival_s, refresh)
        ref, body = job_manifest(
            job,
            index,
            namespace=NAMESPACE,
            queue=QUEUE if options.kueue else None,
            kinds=options.kinds,
            efficiency=options.efficiency,
        )
        group, version = body["apiVersion"].split("/")
        plural = ref.kind.lower() + "s"
        await asyncio.to_thread(
            custom.create_namespaced_custom_object, group, version, NAMESPACE, plural, body
        )
        progress.submitted += 1
    while clock.now() < deadline:
        refresh()
        if progress.done + progress.rejected >= len(trace):
            break
        await asyncio.sleep(0.1)
    else:
        progress.notes.append(f"stopped waiting at minute {deadline / 60:.0f}")
    refresh()


async def _read_jobs(
    api: KubeApi, cluster: ClusterProfile, progress: Progress, stop: asyncio.Event
) -> None:
    """Keep ``progress.jobs`` to what ``bellows status`` would print, about once a second."""
    while not stop.is_set():
        try:
            progress.jobs = await read_status(
                api, now=datetime.now(UTC), cluster=cluster, namespace=NAMESPACE, events=False
            )
        except Exception as err:  # the view only: a failed read keeps the last rows
            progress.notes.append(f"job table not read: {brief(err)}")
            del progress.notes[:-5]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def _sleep_refreshing(clock: ServiceClock, until: float, refresh: Callable[[], None]) -> None:
    while clock.now() < until:
        refresh()
        await clock.sleep_until(min(until, clock.now() + 0.2 * clock.speedup))
