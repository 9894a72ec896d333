"""Emulated Kubeflow Trainer v2 controller: TrainJobs on torch ``ClusterTrainingRuntime`` s.

What it reproduces of Trainer v2.3 (see ``KUBEFLOW.md``, "Trainer v2"): a TrainJob names a
runtime (``spec.runtimeRef``, a cluster-scoped ``ClusterTrainingRuntime`` by default, or a
``TrainingRuntime`` in its namespace); the controller resolves it, renders the trainer
node's pods (here: the twin in ``training.py``) with ``PET_NNODES`` = ``spec.trainer
.numNodes``, ``PET_NPROC_PER_NODE`` and the runtime's trainer env merged with
``spec.trainer.env`` (the TrainJob's wins); ``spec.suspend`` stops the pods (condition
``Suspended=True``, reason ``Suspended``, every child Job counted ``suspended`` in
``status.jobsStatus``) and clearing it starts them again from the spec *as it is then*
(``Suspended=False``, reason ``Resumed``); finished jobs (``Complete`` or ``Failed``)
ignore suspend. A TrainJob whose ``spec.managedBy`` is ``kueue.x-k8s.io/multikueue`` is
left to Kueue. A runtime that does not exist, or is not a torch runtime, leaves the
TrainJob unstarted with one Warning Event (the real controller requeues it).

The API server enforces the CRDs' CEL rules (``spec.trainer`` immutable, ``self ==
oldSelf``), so nothing here checks them again. ``mutable_trainer=True`` emulates a
future Trainer in which ``spec.trainer`` may change while suspended (kubeflow/trainer#3995):
the cluster then loads the CRD with that rule relaxed (:func:`relax_trainer_rule`).

A TrainJob deleted and created again under the same name with the annotation
``bellows.io/recreated-from: <old uid>`` resumes from the old one's progress, as a
training script does from its checkpoint on a shared volume (the path is the job's name);
any other TrainJob starts from zero. Pods are not stored objects: the trainer node's pod
template is rendered as the Trainer renders it (the runtime's, then each
``spec.runtimePatches`` entry's pod metadata and fields in order: :meth:`pod_template`), and
with a :class:`~bellows.emulator.scheduling.Placer` (a cluster with nodes) its ``numNodes``
pods (labelled ``jobset.sigs.k8s.io/jobset-name``, as JobSet labels them) are bound to nodes
as kube-scheduler would, by that template's preferred pod affinity, and released when the
TrainJob stops.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from bellows.emulator.affinity import node_requirement
from bellows.emulator.operator import (
    Progress,
    parse_batch,
    progress_of,
    waited,
    warning_event,
)
from bellows.emulator.pods import pod_manifest
from bellows.emulator.scheduling import Placer, Pod, preferred_terms
from bellows.emulator.store import ApiError, Store, rfc3339
from bellows.emulator.tas import tas_pods
from bellows.emulator.training import Training, stop
from bellows.emulator.typed import GPU_PRODUCT, NodeTypes, Speeds
from bellows.inputs import DATA_ERRORS
from bellows.kube import keys
from bellows.kube.adapters.trainjob import NODE_JOB, TrainJobKind, node_pod_template
from bellows.kube.kinds import MULTIKUEUE, conditions, finished_state
from bellows.kube.nodes import pod_gpus
from bellows.kube.specs import build_spec
from bellows.scaling import ClusterProfile, EfficiencyProfile, JobProfile, default_cluster
from bellows.scaling.gpu_types import TypedCluster

__all__ = [
    "RECREATED_FROM",
    "TORCH_DISTRIBUTED",
    "EmulatedTrainer",
    "relax_trainer_rule",
]

RECREATED_FROM: Final = keys.RECREATED_FROM
GROUP: Final = "trainer.kubeflow.org"
TRAINJOBS: Final = f"{GROUP}/v1alpha1/trainjobs"
CLUSTER_RUNTIMES: Final = f"{GROUP}/v1alpha1/clustertrainingruntimes"
RUNTIMES: Final = f"{GROUP}/v1alpha1/trainingruntimes"
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"
_IMAGE: Final = "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
_log = structlog.get_logger("bellows.emulator")

TORCH_DISTRIBUTED: Final[Mapping[str, Any]] = {
    "apiVersion": f"{GROUP}/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "torch-distributed",
        "labels": {"trainer.kubeflow.org/framework": "torch"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": NODE_JOB,
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": NODE_JOB,
                                                "image": _IMAGE,
                                                "command": ["torchrun", "train.py"],
                                            }
                                        ]
                                    }
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}
"""A torch runtime as upstream's ``torch-distributed`` (one ``node`` Job, torchrun), for the
demo and the tests (:meth:`bellows.emulator.cluster.EmulatedCluster.add_training_runtime`)."""


def relax_trainer_rule(schema: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob schema of a future Trainer (kubeflow/trainer#3995): ``spec.trainer``
    may change while the job is and stays suspended, and is immutable otherwise."""
    out = copy.deepcopy(schema)
    spec = out["properties"]["spec"]
    trainer = spec["properties"]["trainer"]
    trainer["x-kubernetes-validations"] = [
        r
        for r in trainer.get("x-kubernetes-validations") or []
        if r.get("rule") != "self == oldSelf"
    ]
    spec.setdefault("x-kubernetes-validations", []).append(
        {
            "message": "spec.trainer is immutable unless the TrainJob is suspended",
            "rule": "(has(oldSelf.suspend) && oldSelf.suspend && has(self.suspend) && self.suspend)"
            " || (has(self.trainer) == has(oldSelf.trainer)"
            " && (!has(self.trainer) || self.trainer == oldSelf.trainer))",
        }
    )
    return out


class EmulatedTrainer:
    """Reconciles every TrainJob in ``store``; start with :meth:`run`."""

    def __init__(
        self,
        store: Store,
        *,
        compression: float = 60.0,
        restart_s: float = 30.0,
        cluster: ClusterProfile | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        placer: Placer | None = None,
        efficiency: Callable[[str, str], EfficiencyProfile | None] | None = None,
        typed: TypedCluster | None = None,
        type_label: str = GPU_PRODUCT,
    ) -> None:
        """``placer``: where the trainer node pods of a started TrainJob are bound.
        ``efficiency(namespace, name)``: the statistical efficiency a job trains with.
        ``typed``, ``type_label``: as the operator's (a job at its GPU type's speed)."""
        if TRAINJOBS not in store.resources or CLUSTER_RUNTIMES not in store.resources:
            raise ValueError(
                "the emulated Trainer needs the CRDs of ../shared/data/crds/trainer-v2.3.0/ "
                "(trainjobs, clustertrainingruntimes, trainingruntimes)"
            )
        self._store = store
        self._kind = TrainJobKind()
        self._compression = compression
        self._restart_s = restart_s
        self._cluster = cluster or default_cluster()
        types = None if typed is None else NodeTypes(typed, type_label)
        self._speeds = Speeds(self._cluster, types, placer)
        self._now = now
        self._training: dict[str, Training] = {}  # by uid
        self._checkpoints: dict[tuple[str, str, str], Training] = {}  # (ns, name, uid) deleted
        self._running: set[str] = set()
        self._env: dict[str, dict[str, str]] = {}  # uid -> the node pods' env when started
        self._templates: dict[str, dict[str, Any]] = {}  # uid -> the node pods' template
        self._placer = placer
        self._efficiency = efficiency
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._warned: set[tuple[str, str]] = set()
        self._dirty: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self._names: dict[str, tuple[str, str]] = {}  # uid -> (ns, name) of jobs with pods
        self._origin = 0.0
        if placer is not None:
            placer.on_ready(self._ready)
        self.starts: list[tuple[str, str, int]] = []  # (namespace/name, uid, numNodes) started

    def _ready(self, uid: str) -> None:
        """The placer bound ``uid``'s last pending pod: reconcile it (it may train now)."""
        if uid in self._names:
            self._dirty.put_nowait(self._names[uid])

    def _release(self, uid: str, now: float) -> None:
        self._names.pop(uid, None)
        if self._placer is not None:
            self._placer.release(uid, now)

    def emulated_now(self) -> float:
        return (asyncio.get_running_loop().time() - self._origin) * self._compression

    def progress(self, uid: str) -> Progress | None:
        state = self._training.get(uid)
        return None if state is None else progress_of(state, self.emulated_now())

    def describe(self, uid: str) -> str:
        """What the emulated Trainer holds of TrainJob ``uid`` (for a test's failure message):
        running or not, samples done of the work, emulated seconds to its finish, restarts."""
        state = self._training.get(uid)
        if state is None:
            return "no training"
        now = self.emulated_now()
        finish = state.finish_time()
        left = "stopped" if finish is None else f"finish in {finish - now:.0f} s"
        return (
            f"{'running' if uid in self._running else 'not running'},"
            f" {state.samples(now):.0f}/{state.work:.0f} samples, {left},"
            f" {state.restarts} starts, timer {'set' if uid in self._timers else 'none'}"
        )

    def pod_env(self, uid: str) -> Mapping[str, str]:
        """The env the trainer node pods of TrainJob ``uid`` last started with."""
        return dict(self._env.get(uid, {}))

    def pod_template(self, uid: str) -> Mapping[str, Any]:
        """The pod template the trainer node pods of TrainJob ``uid`` last started with
        (the runtime's, the runtime patches applied)."""
        return copy.deepcopy(self._templates.get(uid, {}))

    async def run(self) -> None:
        self._origin = asyncio.get_running_loop().time()
        changes = self._store.subscribe()
        pump = asyncio.create_task(self._pump(changes))
        for obj in self._store.list_objects(self._store.resources[TRAINJOBS], None)[0]:
            self._dirty.put_nowait((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        try:
            while True:
                ns, name = await self._dirty.get()
                try:
                    self._reconcile(ns, name)
                except ApiError:
                    continue
                except DATA_ERRORS:
                    _log.exception("emulator.trainer_reconcile_failed", job=f"{ns}/{name}")
        finally:
            for timer in self._timers.values():
                timer.cancel()
            pump.cancel()
            self._store.unsubscribe(changes)

    async def _pump(self, changes: asyncio.Queue[Any]) -> None:
        while (change := await changes.get()) is not None:
            meta = change.obj["metadata"]
            if change.resource == TRAINJOBS and change.kind == "DELETED":
                uid = meta["uid"]
                state = self._training.pop(uid, None)
                if state is not None:  # the checkpoint stays on its volume
                    self._checkpoints[(meta["namespace"], meta["name"], uid)] = stop(
                        state, self.emulated_now()
                    )
                self._running.discard(uid)
                self._release(uid, self.emulated_now())
                if uid in self._timers:
                    self._timers.pop(uid).cancel()
            elif change.resource == TRAINJOBS:
                self._dirty.put_nowait((meta["namespace"], meta["name"]))
            elif change.resource in (CLUSTER_RUNTIMES, RUNTIMES):
                for obj in self._store.list_objects(self._store.resources[TRAINJOBS], None)[0]:
                    self._dirty.put_nowait((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    # ----- reconcile ---------------------------------------------------------------------------

    def _runtime(self, obj: Mapping[str, Any]) -> Mapping[str, Any] | str:
        """The runtime the job names, or why there is none to run it on."""
        ref = obj["spec"]["runtimeRef"]
        kind = ref.get("kind", "ClusterTrainingRuntime")
        if ref.get("apiGroup", GROUP) != GROUP or kind not in (
            "ClusterTrainingRuntime",
            "TrainingRuntime",
        ):
            return f"runtimeRef {ref.get('apiGroup')}/{kind} is not a training runtime"
        res = self._store.resources.get(
            CLUSTER_RUNTIMES if kind == "ClusterTrainingRuntime" else RUNTIMES
        )
        ns = "" if kind == "ClusterTrainingRuntime" else obj["metadata"]["namespace"]
        try:
            runtime = self._store.get(res, ns, ref["name"]) if res else None
        except ApiError:
            runtime = None
        if runtime is None:
            return f'{kind} "{ref["name"]}" not found'
        if "torch" not in ((runtime.get("spec") or {}).get("mlPolicy") or {}):
            return f'{kind} "{ref["name"]}" is not a torch runtime (mlPolicy.torch)'
        return runtime

    def _reconcile(self, ns: str, name: str) -> None:
        res = self._store.resources[TRAINJOBS]
        obj = self._store.get(res, ns, name)
        spec = obj.get("spec") or {}
        if finished_state(obj) is not None or spec.get("managedBy") == MULTIKUEUE:
            return
        uid = obj["metadata"]["uid"]
        status = copy.deepcopy(obj.get("status") or {})
        suspended = bool(spec.get("suspend", False))
        now = self.emulated_now()
        nodes = int((spec.get("trainer") or {}).get("numNodes", 1))
        if suspended:
            if uid in self._running:
                self._running.discard(uid)
                if uid in self._training:
                    self._training[uid] = stop(self._training[uid], now)
                self._release(uid, now)
            _condition(
                status, "Suspended", "True", "Suspended", "TrainJob is suspended", now=self._now()
            )
            status["jobsStatus"] = [_jobs_status(NODE_JOB, active=0, suspended=1)]
        elif uid not in self._running:
            runtime = self._runtime(obj)
            if isinstance(runtime, str):
                self._warn(obj, "TrainingRuntimeNotFound", runtime)
                return
            failure = self._start(obj, runtime, now)
            if "Suspended" in conditions({"status": status}):
                _condition(
                    status, "Suspended", "False", "Resumed", "TrainJob is resumed", now=self._now()
                )
            if failure:
                self._finish(status, "Failed", "TrainJobFailed", failure)
            else:
                self._running.add(uid)
                self.starts.append((f"{ns}/{name}", uid, nodes))
                self._place(obj, nodes, now)
                status["jobsStatus"] = [_jobs_status(NODE_JOB, active=1, ready=1)]
        self._settle(uid, status, now)
        state = waited(self._training, self._placer, uid, now)
        if state is not None and state.segment is not None and uid in self._running:
            finish = state.finish_time()
            if finish is not None and finish <= now:
                self._training[uid] = stop(state, now)
                self._running.discard(uid)
                self._release(uid, now)
                self._finish(status, "Complete", "JobsCompleted", "TrainJob is completed")
            elif finish is not None:
                if uid in self._timers:
                    self._timers[uid].cancel()
                self._timers[uid] = asyncio.get_running_loop().call_later(
                    (finish - now) / self._compression + 1e-3, self._dirty.put_nowait, (ns, name)
                )
        if status != (obj.get("status") or {}):
            obj["status"] = status
            self._store.update_with(res, ns, name, lambda _: obj, subresource="status")

    def _settle(self, uid: str, status: dict[str, Any], now: float) -> None:
        """As the operator's: at its GPU type's speed once bound, or failed (out of memory)."""
        if uid in self._running and (failure := self._speeds.settle(self._training, uid)):
            self._running.discard(uid)
            self._training[uid] = stop(self._training[uid], now)
            self._release(uid, now)
            self._finish(status, "Failed", "TrainJobFailed", failure)

    def _finish(self, status: dict[str, Any], kind: str, reason: str, message: str) -> None:
        _condition(status, kind, "True", reason, message, now=self._now())
        failed = kind == "Failed"
        status["jobsStatus"] = [
            _jobs_status(NODE_JOB, succeeded=0 if failed else 1, failed=int(failed))
        ]

    def _start(self, obj: dict[str, Any], runtime: Mapping[str, Any], now: float) -> str | None:
        """Start the twin on the rendered pods; returns a failure message, if it fails."""
        meta = obj["metadata"]
        uid = meta["uid"]
        env = _node_env(obj, runtime)
        self._env[uid] = env
        self._templates[uid] = _node_template(obj, runtime)
        notes = meta.get("annotations") or {}
        if not keys.opted_in(notes):
            return None  # a job without a model runs until deleted
        try:
            settings = keys.parse_settings(notes)
            view = self._kind.view(obj, settings.env_names)
            profile = self._profile(obj, settings.profile)
            job = build_spec(view, settings, profile)
            values = {n: (env.get(n),) for n in settings.env_names}
            batch = parse_batch(values, settings, view.gpus, None)
        except DATA_ERRORS as err:
            return f"the training script cannot start: {err}"
        state = (
            self._training.get(uid)
            or self._checkpoint(obj)
            or self._new_training(obj, settings.work)
        )
        pods = [self._templates[uid].get("spec") or {}]
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

    def _place(self, obj: Mapping[str, Any], nodes: int, now: float) -> None:
        """Bind the ``nodes`` trainer pods of the started ``obj`` (with a placer), named as
        JobSet names them (``<name>-node-0-<index>``, without its random suffix)."""
        if self._placer is None:
            return
        meta = obj["metadata"]
        template = self._templates.get(meta["uid"], {})
        try:
            labels = {**((template.get("metadata") or {}).get("labels") or {})}
            labels |= self._kind.pod_selector(obj)
            pod_spec = template.get("spec") or {}
            gpus = pod_gpus(pod_spec)
            terms, required = preferred_terms(template), node_requirement(pod_spec)
            pods = []
            for i in range(nodes):
                named = labels | {COMPLETION_INDEX_LABEL: str(i)}
                name = f"{meta['name']}-{NODE_JOB}-0-{i}"
                manifest = pod_manifest(obj, name, template, named)
                pods.append(Pod(meta["uid"], named, gpus, terms, required, manifest))
        except DATA_ERRORS:  # a template no check foresaw: its pods unplaced
            _log.exception("emulator.placement_failed", job=f"{meta['namespace']}/{meta['name']}")
            return
        if gpus > 0:
            self._names[meta["uid"]] = (meta["namespace"], meta["name"])
            pods = tas_pods(
                self._store, obj, pods, pod_set=lambda _: NODE_JOB,
                index_label=COMPLETION_INDEX_LABEL,
            )  # fmt: skip
            self._placer.place(meta["uid"], pods, now)

    def _checkpoint(self, obj: Mapping[str, Any]) -> Training | None:
        """The progress of the TrainJob this one re-creates (its checkpoint), if any."""
        meta = obj["metadata"]
        old = (meta.get("annotations") or {}).get(RECREATED_FROM)
        if not old:
            return None
        return self._checkpoints.pop((meta["namespace"], meta["name"], old), None)

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

    def _warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        meta = obj["metadata"]
        if (meta["uid"], reason) in self._warned:
            return
        self._warned.add((meta["uid"], reason))
        event = warning_event(
            obj, reason, message, component="trainjob-controller", now=self._now()
        )
        self._store.create(self._store.resources["v1/events"], meta["namespace"], event)


def _node_env(obj: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, str]:
    """The env of the trainer node's container: the runtime's, then ``spec.trainer.env``,
    then what the torch plugin injects (``PET_NNODES`` from ``numNodes``)."""
    env: dict[str, str] = {}
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "replicatedJobs"
    ) or []
    for job in jobs:
        if job.get("name") != NODE_JOB:
            continue
        pod = ((job.get("template") or {}).get("spec") or {}).get("template", {}).get("spec") or {}
        for container in pod.get("containers") or []:
            if container.get("name") == NODE_JOB:
                env.update({e["name"]: str(e.get("value", "")) for e in container.get("env") or []})
    trainer = obj["spec"].get("trainer") or {}
    env.update({e["name"]: str(e.get("value", "")) for e in trainer.get("env") or []})
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    nodes = trainer.get("numNodes", policy.get("numNodes", 1))
    gpus = ((trainer.get("resourcesPerNode") or {}).get("limits") or {}).get("nvidia.com/gpu", 1)
    env["PET_NNODES"] = str(nodes)
    env["PET_NPROC_PER_NODE"] = str(trainer.get("numProcPerNode", gpus))
    env["PET_NODE_RANK"] = "$(JOB_COMPLETION_INDEX)"
    return env


def _node_template(obj: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer node's pod template as the Trainer renders it: the runtime's ``node``
    Job's, ``spec.trainer.resourcesPerNode`` on its container of that name, then each of
    ``spec.runtimePatches`` in order (pod labels and annotations merged, the other pod
    fields each replaced whole)."""
    template: dict[str, Any] = {}
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec", {}).get(
        "replicatedJobs"
    ) or []
    for job in jobs:
        if job.get("name") == NODE_JOB:
            found = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
            template = copy.deepcopy(dict(found))
    spec = template.setdefault("spec", {})
    resources = (obj["spec"].get("trainer") or {}).get("resourcesPerNode")
    for container in spec.get("containers") or []:
        if container.get("name") == NODE_JOB and resources:
            container["resources"] = copy.deepcopy(resources)
    patched = node_pod_template(obj["spec"].get("runtimePatches"))
    meta = template.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        extra = (patched.get("metadata") or {}).get(key)
        if extra:
            meta[key] = {**(meta.get(key) or {}), **extra}
    spec.update(patched.get("spec") or {})
    return template


def _jobs_status(name: str, **counts: int) -> dict[str, Any]:
    out = {"name": name, "active": 0, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}
    out.update(counts)
    return out


def _condition(
    status: dict[str, Any], kind: str, value: str, reason: str, message: str, *, now: datetime
) -> None:
    items: list[dict[str, Any]] = status.setdefault("conditions", [])
    condition = {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    }
    for i, cond in enumerate(items):
        if cond["type"] == kind:
            if cond["status"] != value:
                items[i] = condition
            return
    items.append(condition)
