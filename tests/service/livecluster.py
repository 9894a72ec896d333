"""The live loop for fault tests: nats-server, emulated Kubeflow, ``run_bridge``/``run_controller``
in one process, and a :class:`Witness` that checks "nothing lost, nothing done twice".

The witness subscribes to the emulated API server's store, so it sees every write as it
lands: each job's ``bellows.io/phase`` transitions, each resume (``suspend`` true → false)
with the allocation it resumed at, each Kubernetes Event Bellows records, and — after every
change — the GPUs held by the pods the emulated operators run, against the capacity.

With ``live(nodes={...})`` the capacity is the emulated nodes' (``controller.capacity.gpus``
0, watched by the controller) and changes while the test runs; the witness then judges each
moment against the capacity of that moment, allowing, for ``grace_s`` after a drop, the
capacity before it: the controller cannot halt jobs before it hears of the drop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kubernetes import client as k8s

from bellows.bus.server import NatsServer, running_nats_server
from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths, trainer_crd_paths
from bellows.emulator.nodes import schedulable_gpus
from bellows.emulator.store import Change
from bellows.jobs import SpecError
from bellows.kube import keys, kind_named
from bellows.kube.kinds import conditions, finished_state, suspend_set
from bellows.kube.kueue import CLUSTER_QUEUES, GROUP, VERSION, Strategy, read_cluster_queue
from bellows.scaling import default_cluster
from bellows.scaling.online import SpeedFactors
from bellows.service.clock import ServiceClock
from bellows.service.config import BellowsConfig, load_config
from bellows.service.runner import run_bridge, run_controller
from bellows.sim.workloads import TraceJob
from bellows.sim.workloads.generating import WorkloadSpec, generate
from bellows.twin.replay import BATCH_ENV, job_manifest, manifest_name
from tests.conftest import shared_data_dir

NS = "default"
LEASES = "bellows-system"
SPEEDUP = 1200.0  # one real second is 20 cluster minutes
# One event-to-patch latency, as a bound for a loaded 2-core machine (the benchmark's p99 is
# 0.4 s at 1 000 jobs): how long GPUs may stay over a capacity that just dropped
LATENCY_S = 5.0
JOB_KEYS = {
    "kubeflow.org/v1/pytorchjobs": "PyTorchJob",
    "kubeflow.org/v2beta1/mpijobs": "MPIJob",
    "trainer.kubeflow.org/v1alpha1/trainjobs": "TrainJob",  # served with live(trainer=True)
}
CLUSTER_QUEUE_KEY = f"{GROUP}/{VERSION}/{CLUSTER_QUEUES}"
QUEUE, CLUSTER_QUEUE = "team", "gpus"  # the LocalQueue and ClusterQueue of live(kueue=...)


def crds() -> list[Any]:
    return sorted((shared_data_dir() / "crds").glob("*.yaml"))


def jobs(
    n: int, *, seed: int = 1, categories: tuple[int, ...] = (1, 2), scale: float = 1.0
) -> list[TraceJob]:
    """``n`` jobs of the generated workload, their work multiplied by ``scale``."""
    spec = WorkloadSpec(pattern="high", minutes=max(30.0, n * 4.0), categories=categories, gpus=8)
    trace = generate(spec, np.random.default_rng(seed), cluster=default_cluster())
    assert len(trace) >= n, f"the workload has {len(trace)} jobs, fewer than {n}"
    return [
        dataclasses.replace(j, spec=dataclasses.replace(j.spec, work=j.spec.work * scale))
        for j in trace[:n]
    ]


@dataclass
class JobLog:
    """What the witness saw happen to one job."""

    phases: list[str] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)  # bellows.io/allocation at each resume
    events: Counter[str] = field(default_factory=Counter)
    finished: str | None = None
    after_preemption: set[int] = field(default_factory=set)  # resumes that followed one
    preempted: bool = False  # halted by a capacity drop since its last resume
    # Kueue admits a job the moment it is created, at its owner's size, before Bellows can
    # hold it: such a resume is Kueue's (no Event), then Bellows either takes the job as it
    # runs (its Started Event) or evicts it to wait its turn (evicted_unmanaged)
    unmanaged_resumes: int = 0
    evicted_unmanaged: int = 0
    # starts preempted before Kueue admitted them (a Start journals a size Kueue has yet to
    # admit): a Started Event without a resume
    unrun_starts: int = 0
    # resumes Kueue made while Bellows halted the job: a halt writes its journal, then
    # deactivates the Workload, and Kueue may admit a pending Start's size between the two;
    # the halt then stops the job again, so the next resume is no repeat (nor an Event's)
    halted_resumes: set[int] = field(default_factory=set)  # their indices in resumes


@dataclass
class Drop:
    """The capacity fell (a node lost, cordoned, not ready): when, from what, to what, and
    when the pods' GPUs were first back within it (``None``: not yet)."""

    at: float
    was: int
    gpus: int
    within_at: float | None = None


class Witness:
    """Every write to the jobs, and the GPUs in use after each one (see the module docstring)."""

    def __init__(
        self,
        kube: EmulatedCluster,
        capacity: int,
        *,
        nodes: bool = False,
        grace_s: float = 0.0,
        cluster_queue: str | None = None,
    ) -> None:
        """``nodes``: the capacity is the nodes' and follows them (``capacity`` is ignored);
        ``cluster_queue``: it is that Kueue ClusterQueue's GPU quota, and follows it;
        ``grace_s``: how long after a drop the capacity before it still holds."""
        self.kube = kube
        self.jobs: dict[str, JobLog] = defaultdict(JobLog)
        self.uids: dict[str, str] = {}  # uid -> job name
        self.peak_gpus = 0
        self.samples = 0
        self.overcommits: list[tuple[int, dict[str, int]]] = []
        self.phase_hooks: list[Callable[[str, str, dict[str, Any]], None]] = []
        self.grace_s = grace_s
        self.drops: list[Drop] = []
        self._nodes: dict[str, dict[str, Any]] | None = None
        self._cluster_queue = cluster_queue
        self.workload_hooks: list[Callable[[Change], None]] = []
        if nodes:  # read in the same step as the subscription below: no change falls between
            listed = kube.store.list_objects(kube.store.resources["v1/nodes"], None)[0]
            self._nodes = {n["metadata"]["name"]: n for n in listed}
            capacity = schedulable_gpus(self._nodes.values())
        self.capacity = capacity  # now
        self.max_capacity = capacity  # the most there ever was
        self._queue = kube.store.subscribe()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def close(self) -> None:
        self.kube.store.unsubscribe(self._queue)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while (change := await self._queue.get()) is not None:
            self._note(change)
            self._sample()

    async def settle(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) until every change so far has been looked at."""
        started = time.monotonic()
        while not self._queue.empty():
            assert time.monotonic() - started < timeout_s, "the witness fell behind"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)  # the last change taken is noted before the next await

    def _note(self, change: Change) -> None:
        if change.resource == "v1/nodes":
            self._note_node(change)
            return
        if change.resource == CLUSTER_QUEUE_KEY:
            if change.obj["metadata"]["name"] == self._cluster_queue and change.kind != "DELETED":
                self._set_capacity(read_cluster_queue(change.obj).gpus)
            return
        if change.resource.endswith("/workloads"):
            for hook in self.workload_hooks:
                hook(change)
            return
        if change.resource == "v1/events":
            involved = change.obj.get("involvedObject") or {}
            if change.kind == "ADDED" and involved.get("namespace") == NS:
                self.jobs[involved["name"]].events[change.obj["reason"]] += 1
            return
        if change.resource not in JOB_KEYS or change.kind == "DELETED":
            return
        meta = change.obj["metadata"]
        name = meta["name"]
        self.uids[meta["uid"]] = name
        log = self.jobs[name]
        notes = meta.get("annotations") or {}
        phase = notes.get(keys.PHASE)
        if phase and (not log.phases or log.phases[-1] != phase):
            if not log.phases and phase == "queued" and log.unmanaged_resumes:
                log.evicted_unmanaged += 1
                log.preempted = True  # its next resume is a start, not a repeat
            if phase == "preempted":
                if log.phases[-1:] == ["done"] and suspend_set(change.old or {}):
                    log.unrun_starts += 1  # never ran since its start: nothing was halted
                else:
                    log.preempted = True
            log.phases.append(phase)
            for hook in self.phase_hooks:
                hook(name, phase, change.obj)
        was = suspend_set(change.old) if change.old is not None else True
        if was and not suspend_set(change.obj):
            if not log.phases:
                log.unmanaged_resumes += 1
            if log.preempted:
                log.after_preemption.add(len(log.resumes))
                log.preempted = False
            if log.phases[-1:] in (["preempted"], ["queued"]):
                log.halted_resumes.add(len(log.resumes))
            log.resumes.append(_allocation(change.resource, change.obj))
        log.finished = finished_state(change.obj)

    def _note_node(self, change: Change) -> None:
        if self._nodes is None:
            return  # a fixed capacity: nodes do not count
        name = change.obj["metadata"]["name"]
        if change.kind == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = change.obj
        self._set_capacity(schedulable_gpus(self._nodes.values()))

    def _set_capacity(self, gpus: int) -> None:
        before, self.capacity = self.capacity, gpus
        self.max_capacity = max(self.max_capacity, self.capacity)
        if self.capacity < before:
            self.drops.append(Drop(time.monotonic(), before, self.capacity))
            # judge the moment the grace ends even if nothing changes then
            loop = asyncio.get_running_loop()
            loop.call_later(self.grace_s + 0.01, self._sample)

    def _allowed(self, now: float) -> int:
        """The capacity now, or a larger one a drop less than ``grace_s`` ago took away."""
        recent = [d.was for d in self.drops if now - d.at < self.grace_s]
        return max([self.capacity, *recent])

    def held(self) -> dict[str, int]:
        """The GPUs each job's running pods hold now (jobs without pods left out)."""
        operator = self.kube.operator
        assert operator is not None
        held: dict[str, int] = {}
        trainer = self.kube.trainer
        for uid, name in self.uids.items():
            progress = operator.progress(uid)
            if progress is None and trainer is not None:
                progress = trainer.progress(uid)
            if progress is not None and progress.gpus is not None:
                held[name] = progress.gpus
        return held

    def _sample(self) -> None:
        held = self.held()
        total = sum(held.values())
        self.samples += 1
        self.peak_gpus = max(self.peak_gpus, total)
        now = time.monotonic()
        if total > self._allowed(now):
            self.overcommits.append((total, held))
        for drop in self.drops:
            if drop.within_at is None and total <= self.capacity:
                drop.within_at = now

    def check(
        self, names: Sequence[str], *, events_exact: bool = True, repeats_ok: bool = False
    ) -> None:
        """Every job in ``names`` succeeded; it was never stopped and resumed at the same
        allocation twice in a row (unless a capacity drop halted it between); the operator
        restarted it exactly as often as it was resumed; the pods never held more GPUs than
        the capacity (see the module docstring for a changing one); and at most one Started
        Event was recorded for it (one more per preemption), one Started or Rescaled Event
        per resume.

        ``events_exact=False`` (a controller killed at any moment, or an API answer lost):
        Events are best effort, so one may be missing, never one too many.
        ``repeats_ok``: someone else may stop and resume a job at the same allocation (Kueue,
        whose Workload a test deleted, resumes the job before Bellows halts it again); each
        resume must still be one operator restart, and no job may lose its work.
        """
        assert self.samples > 0
        assert not self.overcommits, f"GPUs over-committed: {self.overcommits[:3]}"
        assert self.peak_gpus <= self.max_capacity
        problems = []
        for name in names:
            log = self.jobs.get(name)
            if log is None or log.finished != "Succeeded":
                problems.append(f"{name}: finished={log and log.finished}")
                continue
            repeats = [
                i
                for i in range(1, len(log.resumes))
                if log.resumes[i] == log.resumes[i - 1]
                and i not in log.after_preemption
                and i - 1 not in log.halted_resumes
            ]
            if (repeats and not repeats_ok) or not log.resumes:
                problems.append(f"{name}: resumes {log.resumes}")
            if not log.phases:
                # Kueue admitted it and it ran to its end before Bellows took it (a short job
                # on a loaded machine): never Bellows', so no Event is owed
                if log.events["Started"] + log.events["Rescaled"] or len(log.resumes) != 1:
                    problems.append(f"{name}: untouched, events {dict(log.events)}")
                continue
            restarts = self._restarts(name)
            resumed = len(log.resumes)
            # a resume the operator never saw (suspend undone before it reconciled) is no
            # restart: only where someone else toggles suspend too (repeats_ok)
            if restarts is not None and (
                restarts > resumed or (restarts < resumed and not repeats_ok)
            ):
                problems.append(f"{name}: operator restarts {restarts} vs resumes {log.resumes}")
            started, recorded = (
                log.events["Started"],
                log.events["Started"] + log.events["Rescaled"],
            )
            # a preempted job is started again (also one Kueue had not admitted yet)
            starts = 1 + len(log.after_preemption) + log.unrun_starts - log.evicted_unmanaged
            kueue_resumes = log.evicted_unmanaged + len(log.halted_resumes)
            bellows_resumes = len(log.resumes) - kueue_resumes + log.unrun_starts
            if started > starts or recorded > bellows_resumes:
                problems.append(f"{name}: events {dict(log.events)} vs resumes {log.resumes}")
            exact = recorded == bellows_resumes
            if events_exact and (started != starts or not exact):
                problems.append(f"{name}: events {dict(log.events)} vs resumes {log.resumes}")
        assert not problems, "\n".join(problems)

    def events_caught_up(self, names: Sequence[str]) -> bool:
        """Every job has at least one Started or Rescaled Event per resume seen."""
        for name in names:
            log = self.jobs.get(name)
            if log is not None and log.events["Started"] + log.events["Rescaled"] < len(
                log.resumes
            ):
                return False
        return True

    def _restarts(self, name: str) -> int | None:
        operator = self.kube.operator
        assert operator is not None
        for uid, n in self.uids.items():
            if n == name and (p := operator.progress(uid)) is not None:
                return p.restarts
        return None


def _allocation(resource: str, obj: dict[str, Any]) -> str:
    """The ``(k, b)`` a job resumes at, read from its spec (replicas' GPUs and the batch env),
    in the journal's form: what the pods really get, whoever resumed them (Bellows, or
    Kueue on admission, before or after Bellows journals it)."""
    kind = kind_named(JOB_KEYS[resource])
    try:
        view = kind.view(obj, (BATCH_ENV,))
        batch = {v for v in view.env.get(BATCH_ENV, ()) if v is not None}
        return keys.format_pair(view.gpus, int(batch.pop())) if len(batch) == 1 else "?"
    except (SpecError, ValueError):
        return "?"


@dataclass
class Live:
    """A running stack; the tests start and kill controllers and bridges on it."""

    nats: NatsServer
    kube: EmulatedCluster
    clock: ServiceClock
    witness: Witness
    capacity: int
    overrides: list[str]
    tasks: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = field(default_factory=dict)
    queue: str | None = None  # the LocalQueue every submitted job names (live(kueue=...))
    kinds: tuple[str, ...] = ("PyTorchJob", "MPIJob")  # the kinds submitted jobs take in turn

    def config(self, *more: str) -> BellowsConfig:
        return load_config(None, env={}, overrides=[*self.overrides, *more])

    def start_controller(self, name: str, *more: str, client: k8s.ApiClient | None = None) -> None:
        stop = asyncio.Event()
        coro = run_controller(
            self.config(*more),
            stop=stop,
            api_client=client or self.kube.api_client(),
            clock=self.clock,
        )
        self.tasks[name] = (asyncio.create_task(coro, name=name), stop)

    def start_bridge(self, name: str = "bridge", *, client: k8s.ApiClient | None = None) -> None:
        stop = asyncio.Event()
        coro = run_bridge(self.config(), stop=stop, api_client=client or self.kube.api_client())
        self.tasks[name] = (asyncio.create_task(coro, name=name), stop)

    async def kill(self, name: str) -> None:
        """Cancel the task without a graceful stop (its lease, its deliveries stay behind).

        Cancelled again until it ends: on Python 3.11 ``asyncio.wait_for`` (inside nats-py's
        fetch) can swallow a cancellation that lands as its wait completes.
        """
        task, _ = self.tasks.pop(name)
        started = time.monotonic()
        while not task.done():
            assert time.monotonic() - started < 10, f"{name} does not end when cancelled"
            task.cancel()
            await asyncio.wait({task}, timeout=0.2)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def stop(self, name: str) -> None:
        task, stop = self.tasks.pop(name)
        stop.set()
        await asyncio.wait_for(task, 15)

    def alive(self) -> None:
        """Fail if a controller or bridge, or an emulated controller, died with an error."""
        self.kube.check_alive()
        for name, (task, _) in self.tasks.items():
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise AssertionError(f"{name} died") from task.exception()

    async def submit(self, trace: Sequence[TraceJob], *, first: int = 0) -> list[str]:
        custom = k8s.CustomObjectsApi(self.kube.api_client())
        names = []
        for i, job in enumerate(trace, start=first):
            ref, body = job_manifest(job, i, namespace=NS, queue=self.queue, kinds=self.kinds)
            group, version = body["apiVersion"].split("/")
            await asyncio.to_thread(
                custom.create_namespaced_custom_object,
                group,
                version,
                NS,
                ref.kind.lower() + "s",
                body,
            )
            names.append(manifest_name(job))
        return names

    def objects(self) -> dict[str, dict[str, Any]]:
        store = self.kube.store
        out = {}
        for key in JOB_KEYS:
            if key not in store.resources:
                continue  # TrainJob, without live(trainer=True)
            for obj in store.list_objects(store.resources[key], NS)[0]:
                out[obj["metadata"]["name"]] = obj
        return out

    def states(self) -> dict[str, str]:
        """Each job's state: Succeeded/Failed, else its phase (or "new")."""
        out = {}
        for name, obj in self.objects().items():
            notes = obj["metadata"].get("annotations") or {}
            out[name] = finished_state(obj) or notes.get(keys.PHASE) or "new"
        return out

    def describe(self) -> str:
        """Each unfinished job's spec and journal in one line (for a timeout's message)."""
        rows = []
        for name, obj in sorted(self.objects().items()):
            if finished_state(obj):
                continue
            spec, meta = obj.get("spec") or {}, obj["metadata"]
            notes = {k: v for k, v in (meta.get("annotations") or {}).items() if "bellows" in k}
            size = (spec.get("trainer") or {}).get("numNodes", spec.get("pytorchReplicaSpecs"))
            trainer = self.kube.trainer
            held = "" if trainer is None else f" trainer: {trainer.describe(meta.get('uid', ''))}"
            rows.append(
                f"{name}: uid {meta.get('uid')} suspend {spec.get('suspend')} size {size}"
                f" conditions {[(t, c.get('status')) for t, c in conditions(obj).items()]}"
                f" notes {notes}{held}"
            )
        return "unfinished: " + " | ".join(rows)

    async def until(
        self, what: str, predicate: Callable[[], bool], timeout_s: float = 30.0
    ) -> float:
        """Wait (bounded) until ``predicate()``; returns the seconds it took."""
        started = time.monotonic()
        while not predicate():
            self.alive()
            if time.monotonic() - started > timeout_s:
                raise AssertionError(
                    f"not {what} within {timeout_s} s; jobs: {self.states()}; {self.describe()}"
                )
            await asyncio.sleep(0.02)
        return time.monotonic() - started

    async def all_done(self, names: Sequence[str], timeout_s: float = 30.0) -> float:
        """Wait until every job in ``names`` finished and the witness saw it all."""

        def done() -> bool:
            states = self.states()
            return all(states.get(n) in ("Succeeded", "Failed") for n in names)

        took = await self.until("all jobs finished", done, timeout_s)
        await self.witness.settle()
        # an Event is recorded right after the write it reports: give the last ones a moment
        # (bounded, and not an error here: Events are best effort, check() judges them)
        started = time.monotonic()
        while not self.witness.events_caught_up(names) and time.monotonic() - started < 5.0:
            await asyncio.sleep(0.02)
        await self.witness.settle()
        return took


@contextlib.asynccontextmanager
async def live(
    *,
    capacity: int = 8,
    delta_s: float = 600.0,
    extra: Sequence[str] = (),
    namespaces: Sequence[str] = (),
    nodes: Mapping[str, int] | None = None,
    grace_s: float = LATENCY_S,
    true_speed: Callable[[str, str], SpeedFactors | None] | None = None,
    kueue: int | None = None,
    strategy: Strategy = "BestEffortFIFO",
    trainer: bool = False,
    tokens: Sequence[str] | None = None,
) -> AsyncIterator[Live]:
    """The stack with no controller or bridge started yet; everything stopped on exit.

    ``delta_s`` is the controller's Δ in cluster seconds (600 s pass in half a real second).
    ``nodes`` (GPUs by node name): the capacity comes from these emulated nodes, which the
    controller watches (``controller.capacity.gpus=0``), and ``capacity`` is ignored; the
    witness allows ``grace_s`` real seconds after a drop for the controller to catch up.
    ``true_speed`` makes the emulated jobs train faster or slower than their annotations.
    ``kueue`` (a GPU quota): the emulated Kueue runs, every job is submitted to LocalQueue
    :data:`QUEUE` of ClusterQueue :data:`CLUSTER_QUEUE` with that quota and ``strategy``, the
    controller cooperates (``controller.kueue.enabled``), and the witness judges the GPUs
    against the quota as it changes (``capacity`` still sizes the default pool).
    ``trainer``: the emulated Kubeflow Trainer runs, every job is submitted as a TrainJob and
    the stack sizes TrainJobs (``controller.trainer.enabled``). ``tokens``: the emulated API
    server authenticates every request by one of these bearer tokens (the stack's own
    clients carry the first).
    """
    more_crds = [
        *(kueue_crd_paths(shared_data_dir() / "crds") if kueue else ()),
        *(trainer_crd_paths(shared_data_dir() / "crds") if trainer else ()),
    ]
    async with (
        running_nats_server() as nats_server,
        EmulatedCluster(
            crds=[*crds(), *more_crds],
            compression=SPEEDUP,
            restart_s=0.0,
            namespaces=(NS, LEASES, *namespaces),
            gpu_nodes=nodes,
            true_speed=true_speed,
            kueue=kueue is not None,
            trainer=trainer,
            tokens=tokens,
        ) as kube,
    ):
        if trainer:
            extra = ["controller.trainer.enabled=true", *extra]
        if kueue is not None:
            kube.add_cluster_queue(CLUSTER_QUEUE, kueue, strategy=strategy)
            kube.add_local_queue(QUEUE, CLUSTER_QUEUE, namespace=NS)
            extra = ["controller.kueue.enabled=true", *extra]
        witness = Witness(
            kube,
            capacity if kueue is None else kueue,
            nodes=nodes is not None,
            grace_s=grace_s,
            cluster_queue=CLUSTER_QUEUE if kueue is not None else None,
        )
        capacity = witness.capacity
        witness.start()
        overrides = [
            f"nats.servers={nats_server.url}",
            "nats.ackWaitSeconds=1",
            f"controller.capacity.gpus={0 if nodes is not None else capacity}",
            f"controller.deltaSeconds={delta_s}",
            "controller.haltTimeoutSeconds=20",
            "leaderElection.enabled=false",
            "metrics.host=127.0.0.1",
            "metrics.port=0",
            f"namespaces={NS}",
            "logging.level=warning",
            *extra,
        ]
        stack = Live(
            nats_server,
            kube,
            ServiceClock(speedup=SPEEDUP),
            witness,
            capacity,
            overrides,
            queue=QUEUE if kueue is not None else None,
            kinds=("TrainJob",) if trainer else ("PyTorchJob", "MPIJob"),
        )
        try:
            yield stack
        finally:
            for name in list(stack.tasks):
                await stack.kill(name)
            await witness.close()
