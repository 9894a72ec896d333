"""Emulated training-operator (PyTorchJob) and mpi-operator (MPIJob), reacting as the real ones.

What it reproduces (see ``KUBEFLOW.md``): conditions ``Created``, ``Running``,
``Suspended``, ``Succeeded``, ``Failed`` with the operators' reasons; ``startTime`` reset on
every resume and ``completionTime`` on completion; suspend stops the job, resume starts it
from the spec *as it is then*; a running job's spec edits reach nothing (no pod is rolled);
an MPIJob's launcher batch Job (``<name>-launcher``) is created from the spec, suspended
and resumed with it, and on resume gets only its labels and annotations synced, so a stale
launcher keeps its old env unless it was deleted while suspended (then it is recreated from
the current spec). A batch Job of that name the MPIJob does not control is never touched:
the MPIJob gets a Warning Event ``ErrResourceExists`` and waits, as mpi-operator's
``getLauncherJob`` does. Finished jobs ignore suspend. A job whose
``spec.runPolicy.managedBy`` names another controller (``kueue.x-k8s.io/multikueue``) is not
reconciled at all, as both operators leave it to that controller. One job's bad data fails
that job (or is logged), never the operator.

Training itself is the twin in ``training.py``: speed from the JSA for the running
``(k, b)``, read from the job's ``bellows.io/`` settings and its batch env var (for an
MPIJob, from the launcher's env, where ``mpirun`` takes it). A per-GPU batch above
``max-batch-per-gpu`` fails the job as an out-of-memory error would. With a
:class:`~bellows.emulator.scheduling.Placer` (a cluster with nodes) a started job's GPU pods
(one per replica, named ``<job>-<replica type>-<index>``, the operator's labels, its
template's spec: affinity, node selector) are bound to nodes as kube-scheduler would, stored
as Pods (``pods.py``), and deleted when it stops; the job trains once its last pod is bound
(a pod no node fits holds it, Pending, until one does). On a cluster of several GPU types
(``typed``) a job trains at the speed of the type its pods run on (``typed.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from bellows.emulator.affinity import node_requirement
from bellows.emulator.pods import REPLICA_INDEX_LABEL, pod_manifest
from bellows.emulator.scheduling import Placer, Pod, preferred_terms
from bellows.emulator.store import ApiError, Store, rfc3339
from bellows.emulator.tas import tas_pods
from bellows.emulator.training import Training, pods_waited, stop
from bellows.emulator.typed import GPU_PRODUCT, NodeTypes, Speeds
from bellows.inputs import DATA_ERRORS, SpecError, parse_int
from bellows.kube import keys
from bellows.kube.adapters import KINDS
from bellows.kube.adapters.replicated import ReplicatedKind
from bellows.kube.kinds import (
    KindAdapter,
    conditions,
    finished_state,
    foreign_manager,
    pod_templates,
    suspend_set,
)
from bellows.kube.nodes import pod_gpus
from bellows.kube.specs import build_spec
from bellows.scaling import ClusterProfile, EfficiencyProfile, JobProfile, default_cluster
from bellows.scaling.gpu_types import TypedCluster
from bellows.scaling.online import SpeedFactors

__all__ = [
    "EmulatedOperator",
    "Progress",
    "parse_batch",
    "progress_of",
    "replica_pods",
    "warning_event",
]

_BATCH_JOBS = "batch/v1/jobs"
_LAUNCHER = "-launcher"
_REPLICA_TYPE = "training.kubeflow.org/replica-type"  # pod label: the replica type, lower-case
_log = structlog.get_logger("bellows.emulator")


@dataclass(frozen=True)
class Progress:
    """Where one emulated job stands (emulated seconds and samples).

    ``step_seconds`` is the job's true step time in its current run (``None`` while
    stopped): what its training helper would report. ``samples`` are the samples it has
    processed; ``done``, when it trains at goodput, its progress toward ``work`` in reference
    samples (:mod:`bellows.emulator.training`; ``None`` otherwise: its samples are).
    """

    samples: float
    work: float
    gpus: int | None
    batch: int | None
    restarts: int
    step_seconds: float | None = None
    done: float | None = None


def progress_of(state: Training, now: float) -> Progress:
    """Where the training ``state`` stands at emulated time ``now``."""
    seg = state.segment
    return Progress(
        state.seen(now),
        state.work,
        seg.gpus if seg else None,
        seg.batch if seg else None,
        state.restarts,
        seg.batch / seg.rate if seg and seg.rate > 0 else None,
        None if state.efficiency is None else state.samples(now),
    )


def warning_event(
    obj: Mapping[str, Any], reason: str, message: str, *, component: str, now: datetime
) -> dict[str, Any]:
    """A Warning Event on ``obj`` as an operator's recorder writes it."""
    meta = obj["metadata"]
    stamp = rfc3339(now)
    return {
        "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj["apiVersion"],
            "kind": obj["kind"],
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": component},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class EmulatedOperator:
    """Reconciles every PyTorchJob and MPIJob in ``store``; start with :meth:`run`."""

    def __init__(
        self,
        store: Store,
        *,
        compression: float = 60.0,
        restart_s: float = 30.0,
        cluster: ClusterProfile | None = None,
        clock: Callable[[], float] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        true_speed: Callable[[str, str], SpeedFactors | None] | None = None,
        placer: Placer | None = None,
        efficiency: Callable[[str, str], EfficiencyProfile | None] | None = None,
        typed: TypedCluster | None = None,
        type_label: str = GPU_PRODUCT,
    ) -> None:
        """``true_speed(namespace, name)``, when given, says how a job really runs against
        its annotated profile (``None``: as annotated); the job trains at that speed.
        ``placer``: where the started jobs' pods are bound (``None``: nowhere).
        ``efficiency(namespace, name)``: the statistical efficiency a job really trains
        with (``None``: none, its work counts samples). ``typed``: the cluster's GPU types,
        which its nodes' ``type_label`` names: each job trains at its type's speed
        (``typed.py``; ``None``: every job on ``cluster``)."""
        self._store = store
        self._placer = placer
        self._true_speed = true_speed
        self._efficiency = efficiency
        self._compression = compression
        self._restart_s = restart_s
        self._cluster = cluster or default_cluster()
        types = None if typed is None else NodeTypes(typed, type_label)
        self._speeds = Speeds(self._cluster, types, placer)
        self._clock = clock
        self._now = now
        self._kinds: dict[str, KindAdapter] = {
            f"{k.group}/{k.version}/{k.plural}": k
            for k in KINDS
            if f"{k.group}/{k.version}/{k.plural}" in store.resources
        }
        self._training: dict[str, Training] = {}  # by uid, for jobs with a speed model
        self._running: set[str] = set()  # uids whose (emulated) pods run
        self._timers: dict[str, asyncio.TimerHandle] = {}  # uid -> its completion check
        self._reported: set[tuple[str, str]] = set()  # (MPIJob uid, foreign launcher uid)
        self._dirty: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
        self._names: dict[str, tuple[str, str, str]] = {}  # uid -> its key, ns, name (bound)
        self._origin = 0.0
        if placer is not None:
            placer.on_ready(self._ready)

    def _ready(self, uid: str) -> None:
        """The placer bound ``uid``'s last pending pod: reconcile it (it may train now)."""
        if uid in self._names:
            self._dirty.put_nowait(self._names[uid])

    def emulated_now(self) -> float:
        """Emulated training seconds since the operator started."""
        return (self._time() - self._origin) * self._compression

    def _time(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    def progress(self, uid: str) -> Progress | None:
        """The training progress of the job with ``uid`` (None if it never had a model)."""
        state = self._training.get(uid)
        return None if state is None else progress_of(state, self.emulated_now())

    async def run(self) -> None:
        """Reconcile on every change until cancelled."""
        self._origin = self._time()
        changes = self._store.subscribe()
        pump = asyncio.create_task(self._pump(changes))
        for key in self._kinds:
            for obj in self._store.list_objects(self._store.resources[key], None)[0]:
                self._dirty.put_nowait((key, obj["metadata"]["namespace"], obj["metadata"]["name"]))
        try:
            while True:
                key, ns, name = await self._dirty.get()
                try:
                    self._reconcile(self._kinds[key], self._store.resources[key], ns, name)
                except ApiError:
                    continue  # deleted or changed meanwhile, or blocked: the next event retries
                except DATA_ERRORS:  # one job's data no check foresaw: that job's problem
                    _log.exception("emulator.reconcile_failed", job=f"{ns}/{name}")
        finally:
            for timer in self._timers.values():
                timer.cancel()
            pump.cancel()
            self._store.unsubscribe(changes)

    async def _pump(self, changes: asyncio.Queue[Any]) -> None:
        while (change := await changes.get()) is not None:
            meta = change.obj["metadata"]
            if change.resource in self._kinds and change.kind != "DELETED":
                self._dirty.put_nowait((change.resource, meta["namespace"], meta["name"]))
            elif change.resource in self._kinds:
                self._training.pop(meta["uid"], None)
                self._running.discard(meta["uid"])
                self._unbind(meta["uid"], self.emulated_now())
            elif change.resource == _BATCH_JOBS:
                for ref in meta.get("ownerReferences") or []:
                    if ref.get("kind") == "MPIJob" and ref.get("controller") is True:
                        self._dirty.put_nowait((self._mpi_key(), meta["namespace"], ref["name"]))
                if change.kind == "DELETED" and meta["name"].endswith(_LAUNCHER):
                    # a Job that held an MPIJob's launcher name is gone: mpi-operator's
                    # failed sync of that MPIJob is retried (its rate-limited requeue)
                    owner = meta["name"].removesuffix(_LAUNCHER)
                    self._dirty.put_nowait((self._mpi_key(), meta["namespace"], owner))

    def _mpi_key(self) -> str:
        return next(k for k, kind in self._kinds.items() if kind.kind == "MPIJob")

    # ----- reconcile ---------------------------------------------------------------------------

    def _reconcile(self, kind: KindAdapter, res: Any, ns: str, name: str) -> None:
        obj = self._store.get(res, ns, name)
        if finished_state(obj) is not None or foreign_manager(obj, kind.manager) is not None:
            return  # a managedBy other than the operator's: the real operators skip it too
        uid = obj["metadata"]["uid"]
        suspended = suspend_set(obj)
        launcher = self._sync_launcher(kind, obj, suspended) if kind.kind == "MPIJob" else None
        state = self._training.get(uid)
        running = uid in self._running
        status = copy.deepcopy(obj.get("status") or {})

        def mark(condition: str, value: str, reason: str, verb: str) -> None:
            """Set a condition as the operator words it: ``<Kind><reason>``, "is <verb>"."""
            _condition(
                status,
                condition,
                value,
                reason=f"{kind.kind}{reason}",
                message=f"{kind.kind} {name} is {verb}.",
                now=self._now(),
            )

        mark("Created", "True", "Created", "created")
        now = self.emulated_now()
        if suspended and running:
            self._unbind(uid, now)
            if state is not None:
                self._training[uid] = stop(state, now)
            mark("Running", "False", "Suspended", "suspended")
        if suspended:
            mark("Suspended", "True", "Suspended", "suspended")
            status["replicaStatuses"] = {t: {"active": 0} for t in _replica_types(kind, obj)}
        elif not running:
            failure = self._start(kind, obj, launcher, now)
            if "Suspended" in conditions({"status": status}):
                mark("Suspended", "False", "Resumed", "resumed")
            status["startTime"] = rfc3339(self._now())
            if failure:
                self._finish(status, kind, name, "Failed", failure)
            else:
                self._running.add(uid)
                self._bind(kind, obj, now)
                mark("Running", "True", "Running", "running")
                status["replicaStatuses"] = {
                    t: {"active": _count(kind, obj, t)} for t in _replica_types(kind, obj)
                }
        state = self._waited(uid, status, kind, name, now)
        if state is not None and state.segment is not None:
            finish = state.finish_time()
            if finish is not None and finish <= now:
                self._training[uid] = stop(state, now)
                self._unbind(uid, now)
                self._finish(
                    status,
                    kind,
                    name,
                    "Succeeded",
                    f"{kind.kind} {name} is successfully completed.",
                )
                if launcher is not None:
                    self._complete_launcher(launcher)
            elif finish is not None:
                delay = (finish - now) / self._compression
                if uid in self._timers:
                    self._timers[uid].cancel()  # the finish time moved: one check, the latest
                self._timers[uid] = asyncio.get_running_loop().call_later(
                    delay + 1e-3, self._dirty.put_nowait, (self._key(kind), ns, name)
                )
        if status != (obj.get("status") or {}):
            obj["status"] = status
            self._store.update_with(res, ns, name, lambda _: obj, subresource="status")

    def _waited(
        self, uid: str, status: dict[str, Any], kind: KindAdapter, name: str, now: float
    ) -> Training | None:
        """``uid``'s training (:func:`waited`); on several GPU types, once its pods are
        bound, at the speed of their type, or failed there (out of memory)."""
        if uid in self._running and (failure := self._speeds.settle(self._training, uid)):
            self._unbind(uid, now)
            self._training[uid] = stop(self._training[uid], now)
            self._finish(status, kind, name, "Failed", failure)
        return waited(self._training, self._placer, uid, now)

    def _bind(self, kind: KindAdapter, obj: Mapping[str, Any], now: float) -> None:
        """Bind the started job's GPU pods to nodes (with a placer)."""
        if self._placer is None or not isinstance(kind, ReplicatedKind):
            return
        meta = obj["metadata"]
        self._names[meta["uid"]] = (self._key(kind), meta["namespace"], meta["name"])
        try:
            pods = tas_pods(
                self._store, obj, replica_pods(kind, obj), pod_set=_pod_set,
                index_label=REPLICA_INDEX_LABEL,
            )  # fmt: skip
            self._placer.place(meta["uid"], pods, now)
        except DATA_ERRORS:  # a template no check foresaw: its pods left unplaced
            meta = obj["metadata"]
            _log.exception("emulator.placement_failed", job=f"{meta['namespace']}/{meta['name']}")

    def _unbind(self, uid: str, now: float) -> None:
        """The job's pods stopped: not running, released from their nodes."""
        self._running.discard(uid)
        self._names.pop(uid, None)
        if self._placer is not None:
            self._placer.release(uid, now)

    def _key(self, kind: KindAdapter) -> str:
        return f"{kind.group}/{kind.version}/{kind.plural}"

    def _finish(
        self, status: dict[str, Any], kind: KindAdapter, name: str, state: str, message: str
    ) -> None:
        now = self._now()
        _condition(
            status, "Running", "False", reason=f"{kind.kind}{state}", message=message, now=now
        )
        _condition(status, state, "True", reason=f"{kind.kind}{state}", message=message, now=now)
        status["completionTime"] = rfc3339(now)
        for entry in (status.get("replicaStatuses") or {}).values():
            active = entry.pop("active", 0)
            if active:
                entry["succeeded" if state == "Succeeded" else "failed"] = active

    def _start(
        self, kind: KindAdapter, obj: dict[str, Any], launcher: Mapping[str, Any] | None, now: float
    ) -> str | None:
        """Start the twin at the spec's ``(k, b)``; returns a failure message, if it fails."""
        uid = obj["metadata"]["uid"]
        notes = obj["metadata"].get("annotations") or {}
        if not keys.opted_in(notes):
            return None  # a job without a model runs until deleted
        try:
            settings = keys.parse_settings(notes)
            view = kind.view(obj, settings.env_names)
            profile = self._profile(obj, settings.profile)
            meta = obj["metadata"]
            truth = self._true_speed(meta["namespace"], meta["name"]) if self._true_speed else None
            if truth is not None:
                profile = truth.apply(profile)
            job = build_spec(view, settings, profile)
            batch = parse_batch(view.env, settings, view.gpus, launcher)
            pods = _pod_specs(kind, obj)
        except DATA_ERRORS as err:  # SpecError, or a value no check foresaw
            return f"the training script cannot start: {err}"
        state = self._training.get(uid) or self._new_training(obj, settings.work)
        started = self._speeds.start(state, job, gpus=view.gpus, batch=batch, pods=pods, now=now)
        if isinstance(started, str):
            return started  # out of memory
        self._training[uid] = started
        return None

    def _new_training(self, obj: Mapping[str, Any], work: float) -> Training:
        """A job's training before its first start, at goodput when its efficiency is known."""
        meta = obj["metadata"]
        truth = self._efficiency(meta["namespace"], meta["name"]) if self._efficiency else None
        return Training(work, self._restart_s, efficiency=truth)

    def _profile(
        self, obj: Mapping[str, Any], source: JobProfile | keys.ConfigMapRef
    ) -> JobProfile:
        if isinstance(source, JobProfile):
            return source
        configmap = self._store.get(
            self._store.resources["v1/configmaps"], obj["metadata"]["namespace"], source.name
        )
        return keys.parse_profile_text(
            source.key, (configmap.get("data") or {}).get(source.key, "")
        )

    # ----- MPIJob launcher ---------------------------------------------------------------------

    def _sync_launcher(
        self, kind: KindAdapter, obj: Mapping[str, Any], suspended: bool
    ) -> dict[str, Any]:
        """The MPIJob's launcher, created or synced. When a batch Job the MPIJob does not
        control holds its name, the sync ends there with an error (:class:`ApiError`) and
        nothing is written but a Warning Event, as in mpi-operator."""
        res = self._store.resources[_BATCH_JOBS]
        meta = obj["metadata"]
        name = kind.launcher(obj) or ""
        template = copy.deepcopy(obj["spec"]["mpiReplicaSpecs"]["Launcher"].get("template") or {})
        try:
            current = self._store.get(res, meta["namespace"], name)
        except ApiError:
            pod = template.setdefault("spec", {})
            policy = obj["spec"]["mpiReplicaSpecs"]["Launcher"].get("restartPolicy")
            pod["restartPolicy"] = policy if policy in ("Never", "OnFailure") else "OnFailure"
            body = {
                "metadata": {
                    "name": name,
                    "namespace": meta["namespace"],
                    "labels": {
                        "training.kubeflow.org/job-name": meta["name"],
                        "training.kubeflow.org/job-role": "launcher",
                    },
                    "ownerReferences": [
                        {
                            "apiVersion": obj["apiVersion"],
                            "kind": "MPIJob",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                            "blockOwnerDeletion": True,
                        }
                    ],
                },
                "spec": {"suspend": suspended, "backoffLimit": 6, "template": template},
            }
            return self._store.create(res, meta["namespace"], body)
        if not _controlled_by(current, meta["uid"]):
            raise self._resource_exists(obj, current)
        if current["spec"].get("suspend", False) == suspended:
            return current
        # On resume mpi-operator syncs only these launcher fields (mpi-operator#687).
        pod_meta = current["spec"]["template"].setdefault("metadata", {})
        for field in ("labels", "annotations"):
            if field in (template.get("metadata") or {}):
                pod_meta[field] = template["metadata"][field]
        current["spec"]["suspend"] = suspended
        return self._store.update_with(res, meta["namespace"], name, lambda _: current)

    def _resource_exists(self, obj: Mapping[str, Any], launcher: Mapping[str, Any]) -> ApiError:
        """mpi-operator's Warning Event for a dependent it does not control (once per pair:
        the real recorder folds repeats into one Event's count), and the sync's error."""
        meta, name = obj["metadata"], launcher["metadata"]["name"]
        message = f'Resource "{name}" of Kind "Job" already exists and is not managed by MPIJob'
        error = ApiError(409, "AlreadyExists", message)
        pair = (meta["uid"], launcher["metadata"]["uid"])
        if pair in self._reported:
            return error
        self._reported.add(pair)
        event = warning_event(
            obj, "ErrResourceExists", message, component="mpi-job-controller", now=self._now()
        )
        self._store.create(self._store.resources["v1/events"], meta["namespace"], event)
        return error

    def _complete_launcher(self, launcher: Mapping[str, Any]) -> None:
        res = self._store.resources[_BATCH_JOBS]
        meta = launcher["metadata"]
        done = copy.deepcopy(dict(launcher))
        done["status"] = {
            "succeeded": 1,
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": rfc3339(self._now())}
            ],
        }
        with contextlib.suppress(ApiError):
            self._store.update_with(
                res, meta["namespace"], meta["name"], lambda _: done, subresource="status"
            )


def waited(
    training: dict[str, Training], placer: Placer | None, uid: str, now: float
) -> Training | None:
    """``uid``'s training in ``training``, held while any of its pods is Pending in
    ``placer`` (it trains once all are bound)."""
    if uid in training:
        pending = bool(placer and placer.pending(uid))
        training[uid] = pods_waited(training[uid], pending, now)
    return training.get(uid)


def _controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    """``metav1.IsControlledBy``: ``obj``'s controller reference names ``uid``."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(r.get("controller") is True and r.get("uid") == uid for r in refs)


def replica_pods(kind: ReplicatedKind, obj: Mapping[str, Any]) -> list[Pod]:
    """The GPU pods the operator runs for ``obj``: ``replicas`` of each replica type, named
    and labelled as the operator does, with the type's template's preferred pod affinity
    and node filter (``nodeSelector``, required node affinity)."""
    selector = kind.pod_selector(obj)
    meta = obj["metadata"]
    pods: list[Pod] = []
    for rtype, spec in kind.specs(obj).items():
        template = spec.get("template") or {}
        pod_spec = template.get("spec") or {}
        gpus = pod_gpus(pod_spec)
        if gpus < 1:
            continue  # an MPIJob's launcher: no GPUs to place
        labels = {**selector, _REPLICA_TYPE: rtype.lower()}
        terms = preferred_terms(template)
        required = node_requirement(pod_spec)
        for index in range(int(spec.get("replicas", 1))):
            name = f"{meta['name']}-{rtype.lower()}-{index}"
            named = {**labels, REPLICA_INDEX_LABEL: str(index)}
            manifest = pod_manifest(obj, name, template, named)
            pods.append(Pod(meta["uid"], named, gpus, terms, required, manifest))
    return pods


def _pod_specs(kind: KindAdapter, obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of ``obj``'s replica templates."""
    return [dict(t.get("spec") or {}) for t in pod_templates(kind, obj)]


def _pod_set(pod: Pod) -> str:
    """The Kueue podSet of one of the operator's pods: its replica type, lower-case."""
    return pod.labels.get(_REPLICA_TYPE, "")


def _replica_types(kind: KindAdapter, obj: Mapping[str, Any]) -> list[str]:
    field = "pytorchReplicaSpecs" if kind.kind == "PyTorchJob" else "mpiReplicaSpecs"
    return sorted((obj.get("spec") or {}).get(field) or {})


def _count(kind: KindAdapter, obj: Mapping[str, Any], rtype: str) -> int:
    field = "pytorchReplicaSpecs" if kind.kind == "PyTorchJob" else "mpiReplicaSpecs"
    return int(obj["spec"][field][rtype].get("replicas", 1))


def parse_batch(
    env: Mapping[str, tuple[str | None, ...]],
    settings: keys.Settings,
    gpus: int,
    launcher: Mapping[str, Any] | None,
) -> int:
    """The global batch the script sees: launcher env for an MPIJob, else the pods' env."""
    if launcher is not None:
        pod = launcher["spec"]["template"].get("spec") or {}
        env = {
            n: tuple(
                next((e.get("value") for e in c.get("env") or [] if e.get("name") == n), None)
                for c in pod.get("containers") or []
            )
            for n in settings.env_names
        }
    found: dict[str, int] = {}
    for name in settings.env_names:
        values = {v for v in env.get(name, ()) if v is not None}
        if len(values) != 1:
            raise SpecError(
                f"env {name}", sorted(values), "one integer value on every training container"
            )
        found[name] = parse_int(f"env {name}", values.pop(), minimum=1)
    glob = found.get(settings.batch_env or "")
    local = found.get(settings.local_batch_env or "")
    if glob is not None and local is not None and -(-glob // gpus) != local:
        raise SpecError(f"env {settings.local_batch_env}", local, f"ceil({glob} / {gpus} GPUs)")
    return glob if glob is not None else (local or 0) * gpus


def _condition(
    status: dict[str, Any], kind: str, value: str, *, reason: str, message: str, now: datetime
) -> None:
    items: list[dict[str, Any]] = status.setdefault("conditions", [])
    stamp = rfc3339(now)
    condition = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
    }
    for i, cond in enumerate(items):
        if cond["type"] == kind:
            if cond["status"] != value:
                items[i] = condition
            return
    if value == "False" and kind == "Running":
        return  # a job that never ran has no Running condition
    items.append(condition)
