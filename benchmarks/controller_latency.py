"""The live controller's speed: event-to-patch latency with 1,000 running jobs (target: p99
<= 1 s), per mode (``controller.mode``) and optimizer path (``controller.optimizer``), side by
side.

An emulated Kubeflow cluster runs in a child process (its API server and operators
are not the controller's CPU), holding ``--running`` jobs plus spares; the controller, the
bridge and nats-server run here, as in a deployment. The controller starts, rebuilds its
state from the cluster and starts the jobs (the first round). Then ``--events`` events are
made, one at a time, alternating: a new job is submitted (an arrival) or a running one is
deleted (a completion). Each goes through the bridge and NATS and is applied: read from the
cluster, one step of the core, the decisions patched onto the jobs. The pump applies each
event at once; in paper mode (Δ = 0.25 s on the core's clock, restart cost 30 s) the round
that decides it comes when the core's clock has it due (the controller's ``tick``); in
Bellows mode (the defaults: restart cost 60 s, rounds every 2 min) the core's step in the
pump's apply is a fill: a completion's GPUs go to the waiting jobs. Measured per event:
from the step that decides it (the pump's apply call, or paper mode's round at its due time)
to the last patch, the core's step alone, and the decisions made. The run is repeated from
scratch for each mode and ``--optimizer`` path. (Memory:
``benchmarks/controller_memory.py``.) Like every ``bellows`` command, the controller here
keeps compiled JAX kernels in the persistent compile cache (``BELLOWS_JAX_CACHE``, default
``~/.cache/bellows/jax``; the chart's volume in a pod): run twice on a fresh folder for a
first start and a restarted one. As in ``run_controller``, the optimizer compiles the
kernels the rounds meet after the rehearsal in the background (``rent.in_background()``),
the NumPy engine answering meanwhile.

Usage: python benchmarks/controller_latency.py [--running 1000] [--events 200]
                                                [--mode bellows,paper] [--optimizer numpy,auto]
                                                [--placement none|nodes] [--efficiency]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import multiprocessing as mp
import statistics
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

import click
import numpy as np
from kubernetes import client as k8s

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Decision, Engines, Mode
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
from bellows.cli.data import crd_files
from bellows.emulator import EmulatedCluster
from bellows.emulator.nodes import uniform_nodes
from bellows.kube import Actuator, JobReader, KubeApi, keys
from bellows.kube.adapters import kind_named
from bellows.kube.placement import Placement
from bellows.optimizer import Method
from bellows.optimizer.solving import METHODS, RentRule
from bellows.scaling import default_cluster
from bellows.service.capacity import watch_capacity
from bellows.service.clock import ServiceClock
from bellows.service.compile_cache import enable_compile_cache
from bellows.service.config import CapacitySettings, LoggingSettings, LogLevel
from bellows.service.controller import Controller
from bellows.service.kernel_child import controller_rent_rule
from bellows.service.logging import configure_logging
from bellows.service.node_view import NodeView, watch_pods
from bellows.service.observing import ControllerObserver
from bellows.service.watching import kube_bridges
from bellows.sim.workloads.generating import WorkloadSpec, generate
from bellows.twin.replay import job_manifest, manifest_name

NS = "default"
LATENCY_TARGET_S = 1.0
MEMORY_TARGET_MIB = 300.0


def workload(n: int, seed: int) -> list[Any]:
    """``n`` jobs of the mixed workload (categories 1-4), too long to finish while measured."""

    spec = WorkloadSpec(pattern="high", minutes=n / 2.0, categories=(1, 2, 3, 4), gpus=400)
    trace = generate(spec, np.random.default_rng(seed), cluster=default_cluster())
    assert len(trace) >= n, f"{len(trace)} jobs generated, {n} wanted"
    return [
        dataclasses.replace(j, spec=dataclasses.replace(j.spec, work=j.spec.work * 1e4))
        for j in trace[:n]
    ]


# ----------------------------------------------------------------------------- the cluster
def _serve_cluster(
    conn: Connection, crds: Sequence[Path], n_jobs: int, n_trace: int, seed: int, *,
    running: int, efficiency: bool = False, gpu_nodes: dict[str, int] | None = None,
) -> None:  # fmt: skip
    asyncio.run(_cluster_main(conn, crds, n_jobs, n_trace, seed, running=running,
                              efficiency=efficiency, gpu_nodes=gpu_nodes))  # fmt: skip


def _as_running(body: dict[str, Any], batch: int) -> None:
    """Make a job manifest one Bellows started at the size it asks: unsuspended, with the
    journal (phase done, allocation, reason, first start) the actuator writes."""
    kind = kind_named(body["kind"])
    notes = body["metadata"]["annotations"]
    view = kind.view(body, keys.parse_settings(notes).env_names)
    body["spec"]["runPolicy"]["suspend"] = False
    notes[keys.PHASE] = "done"
    notes[keys.ALLOCATION] = notes[keys.TARGET] = keys.format_pair(view.gpus, batch)
    notes[keys.REASON] = "started into free GPUs"
    notes[keys.STARTED_AT] = "2026-01-01T00:00:00Z"


async def _cluster_main(
    conn: Connection, crds: Sequence[Path], n_jobs: int, n_trace: int, seed: int, *,
    running: int, efficiency: bool = False, gpu_nodes: dict[str, int] | None = None,
) -> None:  # fmt: skip

    configure_logging(LoggingSettings(level=LogLevel.ERROR))
    async with EmulatedCluster(
        crds=crds, compression=1.0, restart_s=0.0, gpu_nodes=gpu_nodes
    ) as kube:
        store = kube.store
        for i, job in enumerate(workload(n_trace, seed)[:n_jobs]):
            _, body = job_manifest(job, i, namespace=NS, efficiency=efficiency)
            if i < running:
                _as_running(body, job.spec.batch_size)
            plural = body["kind"].lower() + "s"
            key = next(k for k in store.resources if k.endswith("/" + plural))
            store.create(store.resources[key], NS, body)
        conn.send(kube.url)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)  # until told to stop


class ClusterProcess:
    """An emulated cluster holding the first ``n_jobs`` jobs of ``workload(n_trace, seed)``,
    suspended and opted in (the first ``running`` of them started by Bellows), in a child
    process; with ``gpu_nodes``, on those nodes (the started jobs' pods bound and stored)."""

    def __init__(
        self, n_jobs: int, n_trace: int, seed: int, *, running: int = 0, efficiency: bool = False,
        gpu_nodes: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        try:  # $BELLOWS_CRDS, else crds/ of the data folder, else the pinned ones (downloaded)
            crds = crd_files(None)
        except click.ClickException as error:  # a script's error: one line, exit status 1
            raise SystemExit(f"error: {error.format_message()}") from None
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_serve_cluster,
            args=(child, crds, n_jobs, n_trace, seed),
            kwargs={"running": running, "efficiency": efficiency, "gpu_nodes": gpu_nodes},
            daemon=True,
        )

    @property
    def pid(self) -> int:
        """The child process's id (its CPU time is the emulated cluster's own)."""
        pid = self._process.pid
        assert pid is not None, "not started"
        return pid

    def __enter__(self) -> str:
        self._process.start()
        url: str = self._conn.recv()
        return url

    def __exit__(self, *_: object) -> None:
        self._conn.send("stop")
        self._process.join(10)
        if self._process.is_alive():
            self._process.kill()


def _client(url: str) -> Any:

    config = k8s.Configuration(host=url)
    config.retries = 0
    return k8s.ApiClient(config)


# ----------------------------------------------------------------------------- latency
@dataclasses.dataclass
class Sample:
    kind: str  # "arrival", "completion" or "start-up"
    seconds: float  # the deciding step (apply, or the due round) -> last patch
    core_s: float
    decisions: int


def _config(mode: Mode, optimizer: Method) -> AutoscalerConfig:
    if mode is Mode.PAPER:
        return AutoscalerConfig.paper(delta_s=0.25, queue=True, restart_s=30.0, optimizer=optimizer)
    return AutoscalerConfig(optimizer=optimizer)


async def _latency(
    running: int, events: int, seed: int, mode: Mode, optimizer: Method, *, rent: RentRule,
    efficiency: bool = False, placement: Placement = Placement.NONE,
) -> tuple[list[Sample], Sample, float]:  # fmt: skip
    trace = workload(running + events, seed)
    # capacity: every running job at its least, plus a quarter more to share elastically
    rigid = sum(1 for j in trace[:running] if not j.spec.elastic)
    capacity = math.ceil((running - rigid + 4 * rigid) * 1.25)
    rounds: list[tuple[float, int]] = []

    class Rounds(ControllerObserver):
        def round_done(self, seconds: float, decisions: Sequence[Decision], **_: Any) -> None:
            rounds.append((seconds, len(decisions)))

    view, gpu_nodes = _node_view(placement, capacity)
    with ClusterProcess(
        running, running + events, seed, efficiency=efficiency, gpu_nodes=gpu_nodes
    ) as url:
        async with running_nats_server() as nats_server:
            settings = NatsSettings(servers=(nats_server.url,), ack_wait_s=30.0)
            nc = await connect(settings)
            js = nc.jetstream()
            await ensure_streams(js, settings)
            api = KubeApi(_client(url))
            clock = ServiceClock()
            controller = Controller(
                api=api,
                autoscaler=Autoscaler(
                    _config(mode, optimizer),
                    capacity=capacity,
                    cluster=default_cluster(),
                    engines=Engines(rent=rent),
                ),
                actuator=Actuator(api, placement=placement, pins=view),
                reader=JobReader(api, namespace=NS),
                now=clock.now,
                wall_to_clock=clock.at,
                observer=Rounds(),
            )
            t0 = time.perf_counter()
            await controller.rebuild()
            due = controller.autoscaler.next_round_at()
            if mode is Mode.PAPER and due is not None:  # the first round, on the core's grid
                await clock.sleep_until(due)
                await controller.tick()
            startup = Sample("start-up", time.perf_counter() - t0, rounds[-1][0], rounds[-1][1])
            held = sum(controller.held.values())
            print(
                f"start-up: {len(controller.autoscaler.allocations)} jobs running on {held} of "
                f"{capacity} GPUs after {startup.seconds:.1f} s ({startup.decisions} starts); "
                f"kernels compiled in this process so far: {len(rent.ready)}"
            )
            samples: list[Sample] = []
            applied: list[tuple[float, float]] = []  # (seconds, when)

            timed = _timed_steps(controller, mode, applied)

            stop = asyncio.Event()
            tasks, consumer = await _start_loop(
                js, settings, api, clock=clock, apply=timed, stop=stop
            )
            tasks += [
                asyncio.create_task(controller.keep_house(stop)),
                *_view_watches(api, view, controller, stop),
            ]
            await asyncio.sleep(2.0)  # the bridge's first listing, its arrivals, repeats
            custom = k8s.CustomObjectsApi(api.api_client)
            try:
                for i in range(events):
                    before = len(applied)
                    kind = await _make_event(custom, trace, running, i, efficiency=efficiency)
                    deadline = time.perf_counter() + 30
                    while len(applied) == before:
                        assert time.perf_counter() < deadline, f"event {i} was never applied"
                        await asyncio.sleep(0.01)
                    seconds, _ = applied[-1]
                    core_s, decisions = rounds[-1]
                    samples.append(Sample(kind, seconds, core_s, decisions))
                    await asyncio.sleep(0.3)  # the next event after the next round
            finally:
                stop.set()
                await asyncio.wait(tasks, timeout=10)
                await consumer.close()
                await nc.close()
                api.api_client.close()
    return samples, startup, capacity


def _node_view(
    placement: Placement, capacity: int
) -> tuple[NodeView | None, dict[str, int] | None]:
    """With ``nodes``: the controller's node view, and the cluster's nodes (the capacity
    on nodes of the profile's size)."""
    if placement is not Placement.NODES:
        return None, None
    per_node = default_cluster().gpus_per_node
    nodes = uniform_nodes(-(-capacity // per_node), per_node)
    return NodeView(gpus_per_node=per_node), nodes


def _view_watches(
    api: KubeApi, view: NodeView | None, controller: Controller, stop: asyncio.Event
) -> list[asyncio.Task[None]]:
    """The node view's node and pod watches, as the live controller runs them, until
    ``stop``."""
    if view is None:
        return []
    view.follow(lambda: controller.held)

    async def watching() -> None:
        nodes = watch_capacity(api, CapacitySettings(), _fixed, on_nodes=view.set_nodes)
        watches = [asyncio.create_task(nodes), asyncio.create_task(watch_pods(api, view, (NS,)))]
        await stop.wait()
        for watch in watches:
            watch.cancel()
        await asyncio.gather(*watches, return_exceptions=True)

    return [asyncio.create_task(watching())]


async def _fixed(_gpus: int) -> None:
    """The capacity stays as set: the nodes are watched for the node view only."""


def _timed_steps(controller: Controller, mode: Mode, applied: list[tuple[float, float]]) -> Any:
    """The pump's ``apply``, timed; and ``controller.tick``, timed: each appends (seconds,
    when) to ``applied`` for the step that decides an event (Bellows mode: the apply, whose
    step is a fill; paper mode: the round the core's clock has due, run by ``tick``)."""
    tick = controller.tick

    async def timed(batch: Any) -> Any:
        started = time.perf_counter()
        settled = await controller.apply(batch)
        if mode is Mode.BELLOWS:
            applied.append((time.perf_counter() - started, time.perf_counter()))
        return settled

    async def timed_tick() -> bool:
        started = time.perf_counter()
        ran = await tick()
        if ran and mode is Mode.PAPER:
            applied.append((time.perf_counter() - started, time.perf_counter()))
        return ran

    controller.tick = timed_tick  # type: ignore[method-assign]
    return timed


async def _start_loop(
    js: Any,
    settings: NatsSettings,
    api: KubeApi,
    *,
    clock: ServiceClock,
    apply: Any,
    stop: Any,
) -> tuple[list[asyncio.Task[None]], EventConsumer]:
    """The bridge (one watch per kind) and the pump feeding ``apply`` each fetch at once (as
    the runner sets them, in either mode)."""
    publisher = EventPublisher(js, prefix=settings.subject_prefix, stream=settings.stream)
    store = KvResumeStore(await ensure_kv(js, settings))
    bridges = kube_bridges(api, publisher=publisher, store=store, namespaces=(NS,))
    tasks = [asyncio.create_task(bridge.run(stop)) for bridge in bridges]
    consumer = await EventConsumer.open(js, settings)
    pump = EventPump(
        consumer,
        Batcher(),
        apply,
        clock=clock.now,
        max_deliver=settings.max_deliver,
        ack_wait_s=settings.ack_wait_s,
        poll_s=0.05,
    )
    tasks.append(asyncio.create_task(pump.run(stop)))
    return tasks, consumer


async def _make_event(
    custom: Any, trace: Sequence[Any], running: int, i: int, *, efficiency: bool = False
) -> str:
    """Event ``i``: an arrival (a new job) when even, else a completion (a deletion)."""
    index = running + i if i % 2 == 0 else i // 2  # the oldest running jobs leave first
    _, body = job_manifest(trace[index], index, namespace=NS, efficiency=efficiency)
    group, version = body["apiVersion"].split("/")
    plural = body["kind"].lower() + "s"
    if i % 2 == 0:
        await asyncio.to_thread(
            custom.create_namespaced_custom_object, group, version, NS, plural, body
        )
        return "arrival"
    name = manifest_name(trace[index])
    await asyncio.to_thread(
        custom.delete_namespaced_custom_object, group, version, NS, plural, name
    )
    return "completion"


# ----------------------------------------------------------------------------- report
def _p(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--mode", default="bellows,paper", help="modes, comma-separated")
    parser.add_argument("--optimizer", default="numpy,auto", help="paths, comma-separated")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--placement", choices=["none", "nodes"], default="none",
                        help="nodes: the emulated cluster's capacity on nodes of the "
                        "profile's size, the pods stored, the controller's node view on "
                        "(controller.placement: nodes; issue 37's bound with the node and "
                        "pod watch on)")  # fmt: skip
    parser.add_argument("--efficiency", action="store_true",
                        help="every job's profile names its model: decided by goodput from "
                        "its first round (issue 37)")  # fmt: skip
    args = parser.parse_args()
    paths = [p for p in args.optimizer.split(",") if p]
    bad = [p for p in paths if p not in METHODS]
    if bad:
        parser.error(f"--optimizer {bad[0]!r}: expected one of {', '.join(METHODS)}")
    try:
        modes = [Mode(m) for m in args.mode.split(",") if m]
    except ValueError:
        parser.error(f"--mode {args.mode!r}: expected bellows and/or paper, comma-separated")
    configure_logging(LoggingSettings(level=LogLevel.ERROR))
    print(f"JAX compile cache: {enable_compile_cache() or 'off'}")
    runs = {}
    # this process's, as run_controller's (compiles in child processes): its kernels serve
    # every run
    rent = controller_rent_rule()
    for mode in modes:
        for path in paths:
            before = set(rent.ready)
            # as run_controller: kernels met after the rehearsal compile beside the rounds
            with rent.in_background():
                method = cast(Method, path)
                runs[f"{mode.value}/{path}"] = asyncio.run(
                    _latency(
                        args.running,
                        args.events,
                        args.seed,
                        mode,
                        method,
                        rent=rent,
                        efficiency=args.efficiency,
                        placement=Placement(args.placement),
                    )
                )
            print(f"kernels compiled in this process: {len(rent.ready - before)} more in this "
                  f"run ({len(rent.ready)} in all), {len(rent.pending)} compiling, "
                  f"{len(rent.failed)} failed")  # fmt: skip
    capacity = next(iter(runs.values()))[2]
    print(f"\nevent-to-patch latency, {args.running} jobs running, capacity {capacity} GPUs, "
          f"{args.events} events per run (seconds from the deciding step to the last "
          "patch)")  # fmt: skip
    print(f"{'mode/optimizer':<14} {'events':<12} {'n':>4} {'median':>8} {'p99':>8} {'max':>8} "
          f"{'core p99':>9} {'decisions':>10} {'target':>7} {'p99/target':>11}")  # fmt: skip
    for path, (samples, _, _) in runs.items():
        for label in ("arrival", "completion", "all"):
            chosen = [s for s in samples if label in ("all", s.kind)]
            secs = [s.seconds for s in chosen]
            p99 = _p(secs, 99)
            print(
                f"{path:<14} {label:<12} {len(chosen):>4} {statistics.median(secs):>8.3f} "
                f"{p99:>8.3f} {max(secs):>8.3f} {_p([s.core_s for s in chosen], 99):>9.4f} "
                f"{statistics.median([s.decisions for s in chosen]):>5.0f}/"
                f"{max(s.decisions for s in chosen):<4d} "
                f"{LATENCY_TARGET_S:>7.1f} {p99 / LATENCY_TARGET_S:>11.2f}"
            )  # fmt: skip


if __name__ == "__main__":
    main()
