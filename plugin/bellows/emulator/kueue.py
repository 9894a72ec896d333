"""Emulated Kueue v0.19.2: its job reconciler, workload controller and scheduler, for the
PyTorchJobs, MPIJobs and TrainJobs that name a LocalQueue (label
``kueue.x-k8s.io/queue-name``). A TrainJob's suspend is ``spec.suspend`` and its podSets are
those of the JobSet its runtime renders (:func:`~bellows.kube.kueue.trainjob_pod_sets`, the
runtime read from the API server as Kueue's TrainJob integration reads it).

What it reproduces (section "Kueue" of the design's ``KUBEFLOW.md``; ``docs/kube.md``):

* **one Workload per job** whose ``spec.runPolicy.managedBy`` is unset or its operator's:
  named :func:`~bellows.kube.kueue.workload_name`, controlled by the job, labelled
  ``kueue.x-k8s.io/job-uid``, one podSet per replica type; recreated when deleted while the
  job exists, and deleted with the job (the API server's garbage collector);
* **admission** per ClusterQueue (LocalQueue ``spec.clusterQueue``): pending Workloads (active,
  without ``QuotaReserved``) in creation order (``creationTimestamp``, then name) are
  admitted while the GPUs reserved plus the Workload's fit the ClusterQueue's
  ``nominalQuota`` summed over its flavors and each podSet gets a **flavor** (``flavors.py``):
  the first of the ClusterQueue's flavors, in order, whose own quota left holds it and whose
  ``nodeLabels`` its pod template's node selector and required affinity allow (on a TAS
  flavor, its topology placed then), written as ``status.admission.podSetAssignments``;
  a reservation counts on its flavors. ``StrictFIFO`` stops at the first that does not
  fit, ``BestEffortFIFO`` tries the next. A ClusterQueue naming a missing ResourceFlavor
  admits nothing (Kueue marks it inactive);
* **Kueue owns suspend**: a suspended job whose Workload is admitted is resumed, its pod
  templates given the assigned flavors' ``nodeLabels`` as node selectors; a running job whose
  Workload is not admitted (or that has none) is suspended, its templates' node selectors
  put back as its Workload recorded them. An external suspend of an admitted job is undone
  at once and recorded in :attr:`EmulatedKueue.fights`;
* **eviction**: ``spec.active: false`` sets ``Evicted`` (reason ``Deactivated``); Kueue
  suspends the job and clears the reservation once the job is halted (the operator's
  ``Suspended=True``, or it never ran). ``active: true`` again clears ``Evicted``: requeued;
* **a suspended job whose Workload holds no reservation may be edited**: the Workload's
  podSets are updated to match. A running job that no longer matches its Workload is
  suspended, its reservation released and the Workload updated; a suspended job edited
  while its Workload still holds a reservation gets its Workload deleted and recreated (as
  ``ensureOneWorkload`` deletes a Workload that no longer matches);
* a **finished** job's Workload gets ``Finished=True`` and its quota is free again;
* **quota lowered** below what is reserved evicts nothing: nothing new is admitted until the
  reservations fall below it;
* **topology-aware scheduling** on a flavor with ``spec.topologyName`` (``tas.py``,
  ``topology.py``): a podSet's topology request, the domains Kueue picks from the nodes' free
  GPUs, the ``topologyAssignment``, and the pods' node selectors (their domain's, the job's
  templates left as they are); the topologies are configuration
  (:meth:`EmulatedKueue.add_topology`: the Topology CRD is not served).

Left out: Kueue's ``kueue.x-k8s.io/manager`` runtime patch of a TrainJob (its admission's
node selectors and tolerations), priorities and preemption, cohorts and borrowing
(``nominalQuota`` only), resources other than ``nvidia.com/gpu``, a flavor's taints and
tolerations, admission checks, partial admission, and the webhook that suspends a job at
creation (a job created running is suspended by the first reconcile instead).
"""

from __future__ import annotations

import asyncio
import copy
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from bellows.emulator import flavors, tas
from bellows.emulator.pods import REPLICA_INDEX_LABEL
from bellows.emulator.resources import ResourceType
from bellows.emulator.store import ApiError, Change, Store, rfc3339
from bellows.emulator.topology import Request, topology_levels
from bellows.emulator.trainer import COMPLETION_INDEX_LABEL
from bellows.inputs import DATA_ERRORS
from bellows.kube.adapters import ALL_KINDS
from bellows.kube.kinds import (
    GPU,
    KindAdapter,
    conditions,
    finished_state,
    foreign_manager,
    halted_by_conditions,
    suspend_set,
)
from bellows.kube.kueue import (
    CLUSTER_QUEUES,
    GROUP,
    JOB_UID,
    LOCAL_QUEUES,
    VERSION,
    WORKLOADS,
    job_pod_sets,
    queue_name,
    trainjob_pod_sets,
    workload_gpus,
    workload_name,
)

__all__ = ["KUEUE_KINDS", "EmulatedKueue", "Fight"]

FLAVORS = "resourceflavors"
KUEUE_KINDS = (FLAVORS, CLUSTER_QUEUES, LOCAL_QUEUES, WORKLOADS)
"""The plurals of the Kueue kinds the emulated Kueue needs the API server to serve."""

_PREFIX = f"{GROUP}/{VERSION}/"
_TRAINER = "trainer.kubeflow.org"
NAMESPACES = "v1/namespaces"
NODES, PODS = "v1/nodes", "v1/pods"  # what TAS counts free capacity from
_log = structlog.get_logger("bellows.emulator")


@dataclass(frozen=True)
class Fight:
    """An external suspend of an admitted job that Kueue undid (it resumed the job)."""

    kind: str
    namespace: str
    name: str
    workload: str
    at: datetime


class EmulatedKueue:
    """Reconciles Kueue's objects and the jobs that name a queue in ``store``; start with
    :meth:`run`. ``now`` stamps the conditions it writes."""

    def __init__(
        self,
        store: Store,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        topologies: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        missing = [p for p in KUEUE_KINDS if _PREFIX + p not in store.resources]
        if missing:
            raise ValueError(
                f"the emulated Kueue needs the API server to serve {', '.join(missing)} "
                f"({GROUP}/{VERSION}): pass Kueue's CRDs too "
                "(bellows.emulator.crds.kueue_crd_paths())"
            )
        self._store = store
        self._now = now
        self._res = {p: store.resources[_PREFIX + p] for p in KUEUE_KINDS}
        self._kinds: dict[str, KindAdapter] = {
            f"{k.group}/{k.version}/{k.plural}": k
            for k in ALL_KINDS
            if f"{k.group}/{k.version}/{k.plural}" in store.resources
        }
        self.topologies: dict[str, tuple[str, ...]] = {}
        """The Topology objects by name: their levels, node label keys highest first (the
        Topology CRD is not served: ``tas.py``). Add with :meth:`add_topology`."""
        for name, levels in (topologies or {}).items():
            self.add_topology(name, levels)
        # the namespaces too: a ClusterQueue's namespaceSelector matches their labels; the
        # nodes and pods: TAS's free capacity
        self._watched = {
            *self._kinds, *(_PREFIX + p for p in KUEUE_KINDS), NAMESPACES, NODES, PODS
        }  # fmt: skip
        self.fights: list[Fight] = []
        """Every external suspend of an admitted job that was undone, oldest first."""
        self.passes = 0  # reconcile passes made (each one after a batch of changes)
        self.paused = False  # see pause()
        self._changes: asyncio.Queue[Change | None] | None = None  # while run() runs
        self._admitted = 0
        self._admission: dict[str, int] = {}  # Workload uid -> number of its admission
        self._resumed: dict[str, tuple[str, int]] = {}  # job uid -> (Workload uid, admission)
        self._reported: set[str] = set()  # ClusterQueues whose bad spec was logged
        # An informer's cache: the watched objects by resource key and (namespace, name),
        # kept from the change stream and from this controller's own writes. Its objects
        # are shared with other subscribers: read, never changed in place.
        self._cache: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        # job uid -> (generation, the podSets of the job's spec at that generation)
        self._pod_sets_of: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    def add_topology(self, name: str, levels: Sequence[str]) -> None:
        """Register the Topology ``name`` with ``levels`` (node label keys, highest first),
        as an admin creates one. ``ValueError`` names a bad level list."""
        keys = topology_levels(name, levels)
        self.topologies[name] = keys

    async def run(self) -> None:
        """Reconcile after every batch of changes to the jobs or Kueue's objects, until
        cancelled (:meth:`reconcile` each time; nothing while :attr:`paused`)."""
        self._changes = self._store.subscribe()
        try:
            self._load()
            self.reconcile()
            while True:
                relevant = self._apply(await self._changes.get())
                relevant = self._drain() or relevant  # one pass for all queued meanwhile
                if relevant and not self.paused:
                    self.reconcile()
        finally:
            self._store.unsubscribe(self._changes)
            self._changes = None

    def reconcile(self) -> None:
        """One pass of Kueue's controllers over the objects as they are now (no I/O, no
        await); :meth:`run` makes one after every batch of changes."""
        if self._changes is None:
            self._load()  # not running: read the store afresh
        else:
            self._drain()
        self._pass()

    def pause(self) -> None:
        """Stop reconciling, as when Kueue's controller is down (changes are still seen)."""
        self.paused = True

    def resume(self) -> None:
        """Reconcile again, at once and after every change."""
        self.paused = False
        self.reconcile()

    def _load(self) -> None:
        self._cache = {key: {} for key in self._watched}
        for key in self._watched:
            for obj in self._store.list_objects(self._store.resources[key], None)[0]:
                self._keep(key, obj)

    def _drain(self) -> bool:
        relevant = False
        while self._changes is not None and not self._changes.empty():
            relevant = self._apply(self._changes.get_nowait()) or relevant
        return relevant

    def _apply(self, change: Change | None) -> bool:
        """Bring the cache up to ``change``; whether it concerns this controller."""
        if change is None or change.resource not in self._watched:
            return False
        relevant = True
        if change.resource in (NODES, PODS):  # TAS's capacity: a pod TAS admitted counts
            labels = change.obj["metadata"].get("labels") or {}  # by its assignment
            relevant = bool(self.topologies) and tas.TAS_LABEL not in labels
        if change.kind == "DELETED":
            meta = change.obj["metadata"]
            self._cache[change.resource].pop((meta.get("namespace", ""), meta["name"]), None)
            self._pod_sets_of.pop(meta.get("uid", ""), None)
        else:
            self._keep(change.resource, change.obj)
        return relevant

    def _keep(self, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        self._cache[key][(meta.get("namespace", ""), meta["name"])] = obj
        return obj

    def _pass(self) -> None:
        """One pass of Kueue's controllers over the cache."""
        self.passes += 1
        for wl in self._list(WORKLOADS):
            self._guard(wl, self._workload_controller, wl)
        owned: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for wl in self._list(WORKLOADS):
            for ref in wl["metadata"].get("ownerReferences") or []:
                if ref.get("controller") is True and ref.get("uid"):
                    owned[ref["uid"]].append(wl)
        for key, kind in self._kinds.items():
            res = self._store.resources[key]
            for job in list(self._cache[key].values()):
                found = owned.get(job["metadata"]["uid"], [])
                self._guard(job, self._reconcile_job, kind, res, job, found)
        self._guard(None, self._schedule)

    def _guard(self, obj: Mapping[str, Any] | None, step: Callable[..., Any], *args: Any) -> Any:
        """Run one object's step, its result (``None`` when it failed: logged, and retried
        on the next change)."""
        try:
            return step(*args)
        except ApiError as err:  # a write refused: the next change retries
            where = _where(obj) if obj is not None else "scheduler"
            _log.warning("kueue.write_refused", object=where, error=str(err))
        except DATA_ERRORS:  # one object's data no check foresaw: that object's problem
            where = _where(obj) if obj is not None else "scheduler"
            _log.exception("kueue.reconcile_failed", object=where)

    def _list(self, plural: str) -> list[dict[str, Any]]:
        return list(self._cache[_PREFIX + plural].values())

    # ----- the workload controller: deactivation ----------------------------------------------

    def _workload_controller(self, wl: dict[str, Any]) -> None:
        by_type = conditions(wl)
        if _true(by_type, "Finished"):
            return
        evicted = by_type.get("Evicted", {})
        if not (wl.get("spec") or {}).get("active", True):
            if evicted.get("status") != "True":
                status = copy.deepcopy(wl.get("status") or {})
                self._set(status, "Evicted", True, "Deactivated", "The workload is deactivated")
                self._write_status(wl, status)
        elif (evicted.get("status"), evicted.get("reason")) == ("True", "Deactivated") and not (
            _true(by_type, "QuotaReserved")
        ):  # active again once the eviction ran to its end (the job halted): requeued
            status = copy.deepcopy(wl.get("status") or {})
            message = "The workload was reactivated"
            self._set(status, "Evicted", False, "Reactivated", message)
            self._set(status, "Requeued", True, "Reactivated", message)
            self._write_status(wl, status)

    # ----- the job reconciler ------------------------------------------------------------------

    def _reconcile_job(
        self,
        kind: KindAdapter,
        res: ResourceType,
        job: dict[str, Any],
        owned: list[dict[str, Any]],
    ) -> None:
        queue = queue_name(job)
        if queue is None or foreign_manager(job, kind.manager) is not None:
            return  # not Kueue's, or run by another controller (MultiKueue's worker cluster)
        state = finished_state(job)
        if state is not None:
            self._resumed.pop(job["metadata"]["uid"], None)
            if owned and not _true(conditions(owned[0]), "Finished"):
                status = copy.deepcopy(owned[0].get("status") or {})
                self._set(status, "Finished", True, state, f"Job finished: {state}")
                self._write_status(owned[0], status)
            return
        job, wl = self._ensure_one_workload(kind, res, job, owned, queue)
        if wl is None:
            return
        by_type = conditions(wl)
        reserved = _true(by_type, "QuotaReserved")
        suspended = suspend_set(job)
        if _true(by_type, "Evicted"):
            if not suspended:
                job = self._set_suspend(res, job, True, restore=wl)
            if reserved and halted_by_conditions(job, None):
                message = str(by_type["Evicted"].get("message") or "The workload is evicted")
                reason = str(by_type["Evicted"].get("reason") or "Evicted")
                self._release(wl, "Pending", message, requeued=(False, reason))
            return
        admitted = reserved and _true(by_type, "Admitted")
        if suspended and admitted:
            uid = job["metadata"]["uid"]
            token = (wl["metadata"]["uid"], self._admission_of(wl))
            selectors = self._selectors(job, wl)
            if isinstance(selectors, str):  # startJob fails: retried on the next change
                _log.warning("kueue.flavor_missing", workload=_where(wl), flavor=selectors)
                return
            if self._resumed.get(uid) == token:  # it ran under this admission: someone fights
                self._fight(kind, job, wl)
            self._set_suspend(res, job, False, inject=selectors)
            self._resumed[uid] = token
        elif not suspended and not admitted:  # "not admitted by cluster queue"
            self._set_suspend(res, job, True, restore=wl)
        if (wl.get("spec") or {}).get("queueName") != queue and not reserved:
            self._update_spec(wl, lambda spec: spec.__setitem__("queueName", queue))

    def _ensure_one_workload(
        self,
        kind: KindAdapter,
        res: ResourceType,
        job: dict[str, Any],
        owned: list[dict[str, Any]],
        queue: str,
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """``ensureOneWorkload``: the job (suspended when it has no matching Workload) and its
        one Workload, updated to match the job, or ``None`` when it was just created."""
        want = self._pod_sets(job)
        suspended = suspend_set(job)
        match = next((w for w in owned if self._matches(job, w, want, suspended)), None)
        wl = match if match is not None else (owned[0] if owned else None)
        for extra in owned:  # one Workload per job: duplicates are deleted
            if extra is not wl:
                self._delete(extra)
        if wl is not None and match is None:
            if suspended and not _true(conditions(wl), "QuotaReserved"):
                wl = self._update_pod_sets(wl, want)  # updateWorkloadToMatchJob
            elif not suspended:  # "job with no matching workload, suspending": the templates
                job = self._set_suspend(res, job, True, restore=wl)  # restored from it first
                wl = self._release(wl, "Pending", "No matching Workload: the job changed")
                wl = self._update_pod_sets(wl, self._pod_sets(job))
            else:  # suspended, its Workload still reserving: deleted, and recreated below
                self._delete(wl)
                wl = None
        if wl is None:
            if not suspend_set(job):
                job = self._set_suspend(res, job, True)
            self._create_workload(kind, job, queue, want)
        return job, wl

    def _pod_sets(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The job's podSets as the API server stores them in a Workload (its defaults),
        computed once per job generation (the spec's version)."""
        meta = job["metadata"]
        known = self._pod_sets_of.get(meta["uid"])
        if known is not None and known[0] == meta.get("generation"):
            return known[1]
        body = {"metadata": {}, "spec": {"podSets": self._job_pod_sets(job)}}
        pod_sets = list(self._res[WORKLOADS].defaulted(copy.deepcopy(body))["spec"]["podSets"])
        self._pod_sets_of[meta["uid"]] = (int(meta.get("generation", 0)), pod_sets)
        return pod_sets

    def _job_pod_sets(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        """``PodSets``: a PyTorchJob's or MPIJob's from its replica specs, a TrainJob's from
        the JobSet its runtime renders (read from the API server, as Kueue does)."""
        if job.get("kind") != "TrainJob":
            return tas.requested(job_pod_sets(job), REPLICA_INDEX_LABEL)
        ref = (job.get("spec") or {}).get("runtimeRef") or {}
        cluster = ref.get("kind", "ClusterTrainingRuntime") == "ClusterTrainingRuntime"
        key = f"{ref.get('apiGroup', _TRAINER)}/v1alpha1/" + (
            "clustertrainingruntimes" if cluster else "trainingruntimes"
        )
        res = self._store.resources.get(key)
        if res is None:
            raise ApiError(404, "NotFound", f"{key} is not served: runtime '{ref.get('name')}'")
        ns = "" if cluster else job["metadata"]["namespace"]
        runtime = self._store.get(res, ns, str(ref.get("name", "")))
        return tas.requested(trainjob_pod_sets(job, runtime), COMPLETION_INDEX_LABEL)

    def _matches(
        self,
        job: Mapping[str, Any],
        wl: Mapping[str, Any],
        want: list[dict[str, Any]],
        suspended: bool,
    ) -> bool:
        """``equivalentToWorkload``: the same podSets (names, counts, pod templates) as the
        Workload's as they run (its flavors' node selectors merged in) while it holds a
        reservation, or as recorded (the only ones when it does not, or the job is
        suspended)."""
        fields = ("name", "count", "template")

        def same(have: Sequence[Mapping[str, Any]]) -> bool:
            return [{f: p.get(f) for f in fields} for p in have] == [
                {f: p.get(f) for f in fields} for p in want
            ]

        have = (wl.get("spec") or {}).get("podSets") or []
        if _true(conditions(wl), "QuotaReserved"):
            selectors = self._selectors(job, wl)
            if not isinstance(selectors, str):
                if same(flavors.running_pod_sets(have, selectors)):
                    return True
                return suspended and same(have)
        return same(have)

    def _selectors(
        self, job: Mapping[str, Any], wl: Mapping[str, Any]
    ) -> dict[str, dict[str, str]] | str:
        """The node selectors ``wl``'s admission puts on ``job``'s podSets, by podSet (none
        on a kind they are not put on), or the name of an assigned flavor not found."""
        if not flavors.injects(job):
            return {}
        labels = {f["metadata"]["name"]: flavors.node_labels(f) for f in self._list(FLAVORS)}
        return flavors.flavor_selectors(wl, labels)

    def _create_workload(
        self, kind: KindAdapter, job: Mapping[str, Any], queue: str, pod_sets: list[dict[str, Any]]
    ) -> None:
        meta = job["metadata"]
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(kind.kind, meta["name"], meta["uid"], kind.group),
                "namespace": meta["namespace"],
                "labels": {JOB_UID: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": job["apiVersion"],
                        "kind": kind.kind,
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": queue, "active": True, "podSets": pod_sets},
        }
        self._keep(
            _PREFIX + WORKLOADS, self._store.create(self._res[WORKLOADS], meta["namespace"], body)
        )

    def _fight(self, kind: KindAdapter, job: Mapping[str, Any], wl: Mapping[str, Any]) -> None:
        meta = job["metadata"]
        fight = Fight(
            kind.kind, meta["namespace"], meta["name"], wl["metadata"]["name"], self._now()
        )
        self.fights.append(fight)
        _log.warning(
            "kueue.fight",
            job=f"{kind.kind}/{meta['namespace']}/{meta['name']}",
            workload=fight.workload,
            message="an admitted job was suspended by someone else; Kueue resumed it",
        )

    def _admission_of(self, wl: Mapping[str, Any]) -> int:
        """The number of the Workload's current admission (one given on first sight when
        something other than this scheduler admitted it)."""
        uid = wl["metadata"]["uid"]
        if uid not in self._admission:
            self._admitted += 1
            self._admission[uid] = self._admitted
        return self._admission[uid]

    # ----- the scheduler -----------------------------------------------------------------------

    def _schedule(self) -> None:
        """Admit pending Workloads in each ClusterQueue's order while its quota allows."""
        queues = self._cluster_queues()
        used: dict[str, int] = defaultdict(int)
        by_flavor: dict[tuple[str, str], int] = defaultdict(int)
        pending: dict[str, list[dict[str, Any]]] = defaultdict(list)
        local = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): (q.get("spec") or {}).get(
                "clusterQueue"
            )
            for q in self._list(LOCAL_QUEUES)
        }
        for wl in self._list(WORKLOADS):
            by_type = conditions(wl)
            if _true(by_type, "Finished"):
                continue
            if _true(by_type, "QuotaReserved"):
                admission = (wl.get("status") or {}).get("admission") or {}
                cq = str(admission.get("clusterQueue", ""))
                for flavor, gpus in flavors.reserved(wl):
                    used[cq] += gpus
                    by_flavor[(cq, flavor)] += gpus
                continue
            if not (wl.get("spec") or {}).get("active", True):
                continue  # an inactive Workload is never admitted
            queue = (wl.get("spec") or {}).get("queueName")
            cq_name = local.get((wl["metadata"]["namespace"], queue)) if queue else None
            if cq_name is None:
                self._guard(wl, self._note_pending, wl, f"LocalQueue {queue} doesn't exist")
            elif cq_name not in queues:
                self._guard(wl, self._note_pending, wl, f"ClusterQueue {cq_name} doesn't exist")
            elif not queues[cq_name].namespaces.admits(self._labels(wl["metadata"]["namespace"])):
                # Kueue's scheduler: inadmissible, set aside (it blocks no StrictFIFO head)
                message = "Workload namespace doesn't match ClusterQueue selector"
                self._guard(wl, self._note_pending, wl, message)
            else:
                pending[cq_name].append(wl)
        for cq_name, items in pending.items():
            items.sort(key=lambda w: (w["metadata"]["creationTimestamp"], w["metadata"]["name"]))
            self._admit_in_order(cq_name, queues[cq_name], items, used, by_flavor)

    def _admit_in_order(
        self,
        cq_name: str,
        queue_: flavors.Queue,
        items: list[dict[str, Any]],
        used: dict[str, int],
        by_flavor: dict[tuple[str, str], int],
    ) -> None:
        """Admit a ClusterQueue's pending Workloads (oldest first) while they fit."""
        blocked = False
        for wl in items:
            if blocked:  # StrictFIFO: the head that does not fit blocks the rest
                message = (
                    f"waits in StrictFIFO order behind an older Workload that does not fit "
                    f"in ClusterQueue {cq_name}"
                )
                self._guard(wl, self._note_pending, wl, message)
                continue
            if queue_.inactive is not None:
                self._guard(wl, self._note_pending, wl, queue_.inactive)
                continue
            try:
                request = workload_gpus((wl.get("spec") or {}).get("podSets") or [])
            except DATA_ERRORS as err:
                self._guard(wl, self._note_pending, wl, f"cannot read its requests: {err}")
                continue
            if used[cq_name] + request <= queue_.quota:
                admitted = self._guard(wl, self._admit, wl, cq_name, queue_, by_flavor)
                if admitted is True:
                    used[cq_name] += request
                if not isinstance(admitted, str):
                    continue  # admitted, or a failure logged (the next change retries)
                message = admitted  # the quota fits, a flavor or its topology does not
            else:
                message = (
                    f"couldn't assign flavors: insufficient unused quota for {GPU} in "
                    f"ClusterQueue {cq_name}: the Workload requests {request}, "
                    f"the nominal quota is {queue_.quota}"
                )
            self._guard(wl, self._note_pending, wl, message)
            blocked = queue_.strict

    def _labels(self, namespace: str) -> Mapping[str, str]:
        """The labels of ``namespace`` as last seen (none when it is not seen)."""
        obj = self._cache[NAMESPACES].get(("", namespace)) or {}
        labels = (obj.get("metadata") or {}).get("labels")
        return labels if isinstance(labels, Mapping) else {}

    def _cluster_queues(self) -> dict[str, flavors.Queue]:
        """Every valid ClusterQueue by name (an invalid one is logged once and admits nothing)."""

        def invalid(name: str, err: Exception) -> None:
            if name not in self._reported:
                self._reported.add(name)
                _log.warning("kueue.clusterqueue_invalid", clusterqueue=name, error=str(err))

        return flavors.read_queues(
            self._list(FLAVORS), self._list(CLUSTER_QUEUES), self.topologies, invalid
        )

    def _admit(
        self,
        wl: dict[str, Any],
        cq: str,
        queue: flavors.Queue,
        by_flavor: dict[tuple[str, str], int],
    ) -> bool | str:
        """Admit ``wl`` (its quota checked): ``True``, or why a podSet fits no flavor (with
        TAS, a flavor's topology; nothing is reserved then)."""
        free: dict[str, dict[tuple[str, ...], int]] = {}  # TAS flavor -> free GPUs per domain
        used = {f: by_flavor[(cq, f)] for f, _ in queue.flavors}
        pod_sets = (wl.get("spec") or {}).get("podSets") or []
        assignments = flavors.assign(
            pod_sets, queue, used, lambda flavor, ps, req: self._place(flavor, free, ps, req)
        )
        if isinstance(assignments, str):
            return assignments
        for flavor, gpus in flavors.usage(assignments):
            by_flavor[(cq, flavor)] += gpus
        status = copy.deepcopy(wl.get("status") or {})
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": assignments}
        self._set(
            status, "QuotaReserved", True, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"
        )
        self._set(status, "Admitted", True, "Admitted", "The workload is admitted")
        self._write_status(wl, status)
        self._admitted += 1
        self._admission[wl["metadata"]["uid"]] = self._admitted
        return True

    def _place(
        self,
        flavor: tas.TasFlavor,
        free: dict[str, dict[tuple[str, ...], int]],
        pod_set: Mapping[str, Any],
        request: Request,
    ) -> dict[str, Any] | str | None:
        """``pod_set``'s topology assignment on ``flavor``, taken from ``free`` (what this
        Workload's podSets before it left free there), or why it does not fit."""
        if flavor.name not in free:
            nodes, pods = self._cache[NODES].values(), self._cache[PODS].values()
            free[flavor.name] = tas.free_gpus(flavor, nodes, pods, self._list(WORKLOADS))
        return tas.assign(flavor, free[flavor.name], pod_set, request)

    def _note_pending(self, wl: dict[str, Any], message: str) -> None:
        status = copy.deepcopy(wl.get("status") or {})
        self._set(status, "QuotaReserved", False, "Pending", message)
        self._write_status(wl, status)

    # ----- writes ------------------------------------------------------------------------------

    def _set(
        self, status: dict[str, Any], kind: str, value: bool, reason: str, message: str
    ) -> None:
        """Set a ``metav1.Condition`` (its transition time moves only when its status does)."""
        items: list[dict[str, Any]] = status.setdefault("conditions", [])
        flag = "True" if value else "False"
        for i, cond in enumerate(items):
            if cond.get("type") == kind:
                if (cond.get("status"), cond.get("reason"), cond.get("message")) != (
                    flag,
                    reason,
                    message,
                ):
                    stamp = cond.get("lastTransitionTime") if cond.get("status") == flag else None
                    items[i] = _condition(
                        kind, flag, reason, message, stamp or rfc3339(self._now())
                    )
                return
        items.append(_condition(kind, flag, reason, message, rfc3339(self._now())))

    def _write_status(self, wl: Mapping[str, Any], status: dict[str, Any]) -> dict[str, Any]:
        if status == (wl.get("status") or {}):
            return dict(wl)
        meta = wl["metadata"]

        def change(current: dict[str, Any]) -> dict[str, Any]:
            current["status"] = status
            return current

        return self._keep(
            _PREFIX + WORKLOADS,
            self._store.update_with(
                self._res[WORKLOADS], meta["namespace"], meta["name"], change, subresource="status"
            ),
        )

    def _release(
        self,
        wl: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        requeued: tuple[bool, str] | None = None,
    ) -> dict[str, Any]:
        """Clear the Workload's reservation (``UnsetQuotaReservationWithCondition``)."""
        status = copy.deepcopy(wl.get("status") or {})
        status.pop("admission", None)
        self._set(status, "QuotaReserved", False, reason, message)
        self._set(status, "Admitted", False, "NoReservation", "The workload has no reservation")
        if requeued is not None:
            self._set(status, "Requeued", requeued[0], requeued[1], message)
        self._admission.pop(wl["metadata"]["uid"], None)
        return self._write_status(wl, status)

    def _update_spec(
        self, wl: Mapping[str, Any], edit: Callable[[dict[str, Any]], object]
    ) -> dict[str, Any]:
        meta = wl["metadata"]

        def change(current: dict[str, Any]) -> dict[str, Any]:
            edit(current.setdefault("spec", {}))
            return current

        return self._keep(
            _PREFIX + WORKLOADS,
            self._store.update_with(self._res[WORKLOADS], meta["namespace"], meta["name"], change),
        )

    def _update_pod_sets(
        self, wl: Mapping[str, Any], pod_sets: list[dict[str, Any]]
    ) -> dict[str, Any]:
        fresh = copy.deepcopy(pod_sets)  # the memo stays this controller's own
        return self._update_spec(wl, lambda spec: spec.__setitem__("podSets", fresh))

    def _delete(self, wl: Mapping[str, Any]) -> None:
        meta = wl["metadata"]
        self._admission.pop(meta["uid"], None)
        self._store.delete(self._res[WORKLOADS], meta["namespace"], meta["name"], uid=meta["uid"])
        self._cache[_PREFIX + WORKLOADS].pop((meta["namespace"], meta["name"]), None)

    def _set_suspend(
        self,
        res: ResourceType,
        job: Mapping[str, Any],
        value: bool,
        *,
        inject: Mapping[str, Mapping[str, str]] | None = None,
        restore: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Set the job's suspend flag, in the same write merging the node selectors of
        ``inject`` into its pod templates (``startJob``) or putting them back as the Workload
        ``restore`` records them (``stopJob``)."""
        meta = job["metadata"]

        def change(current: dict[str, Any]) -> dict[str, Any]:
            if current.get("kind") == "TrainJob":  # Kueue's TrainJob integration: spec.suspend
                current.setdefault("spec", {})["suspend"] = value
            else:
                current.setdefault("spec", {}).setdefault("runPolicy", {})["suspend"] = value
            if inject:
                flavors.inject(current, inject)
            if restore is not None:
                flavors.restore(current, restore)
            return current

        return self._keep(
            res.key, self._store.update_with(res, meta["namespace"], meta["name"], change)
        )


def _true(by_type: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return by_type.get(kind, {}).get("status") == "True"


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('namespace', '')}/{meta.get('name')}"


def _condition(kind: str, status: str, reason: str, message: str, stamp: str) -> dict[str, Any]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": stamp,
    }
