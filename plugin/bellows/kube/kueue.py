"""Kueue's objects as Bellows reads them: pure views, no I/O (Kueue v0.19.2, ``v1beta2``).

Facts from Kueue's job reconciler (``pkg/controller/jobframework/reconciler.go``; see
``docs/kube.md``, "Beside Kueue"):

* a job names its queue with the label ``kueue.x-k8s.io/queue-name`` (the annotation of the
  same name is Kueue's deprecated spelling, still read);
* Kueue creates one Workload per job, in the job's namespace, controlled by the job (an
  ``ownerReferences`` entry with ``controller: true`` and the job's uid) and labelled
  ``kueue.x-k8s.io/job-uid``; its name is ``<kind>-<job>-<5 hex>``
  (:func:`workload_name`);
* a Workload holds quota while its ``QuotaReserved`` condition is ``True``, and is admitted
  while ``Admitted`` is; ``spec.active: false`` evicts it (``Evicted``, reason
  ``Deactivated``) and keeps it out of admission until ``active`` is true again;
* a ``LocalQueue`` points at one ``ClusterQueue``, whose ``resourceGroups[].flavors[]``
  give each resource a ``nominalQuota``; its ``queueingStrategy`` is ``StrictFIFO`` or
  ``BestEffortFIFO`` (the default);
* a ClusterQueue admits Workloads only from the namespaces its ``namespaceSelector`` (a
  ``metav1.LabelSelector``) matches: ``{}`` matches every namespace, and a missing (null)
  selector matches none (Kueue reads it with ``LabelSelectorAsSelector``, whose ``nil`` is
  ``labels.Nothing()``); a Workload from another namespace stays pending, "Workload
  namespace doesn't match ClusterQueue selector" (:class:`NamespaceSelector`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from bellows.inputs import SpecError, parse_quantity, shown
from bellows.kube.kinds import GPU, KUEUE_QUEUE, MULTIKUEUE, conditions

__all__ = [
    "GROUP",
    "JOB_UID",
    "KUEUE_QUEUE",
    "MULTIKUEUE",
    "VERSION",
    "ClusterQueueView",
    "NamespaceSelector",
    "WorkloadView",
    "job_pod_sets",
    "owned_workload",
    "pod_set_gpus",
    "queue_name",
    "read_cluster_queue",
    "read_namespace_selector",
    "read_workload",
    "trainjob_pod_sets",
    "workload_gpus",
    "workload_name",
]

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"  # the storage version of every Kueue kind in v0.19.2
JOB_UID = "kueue.x-k8s.io/job-uid"  # label: the uid of the Workload's job
WORKLOADS, LOCAL_QUEUES, CLUSTER_QUEUES = "workloads", "localqueues", "clusterqueues"
RESOURCE_FLAVORS = "resourceflavors"
Strategy = Literal["StrictFIFO", "BestEffortFIFO"]
_HASH = 5
_MAX_PREFIX = 252 - _HASH


def queue_name(obj: Mapping[str, Any]) -> str | None:
    """The LocalQueue a job names (label, else the deprecated annotation), or ``None``."""
    meta = obj.get("metadata") or {}
    for source in (meta.get("labels"), meta.get("annotations")):
        value = (source or {}).get(KUEUE_QUEUE) if isinstance(source, Mapping) else None
        if value:
            return str(value)
    return None


def workload_name(kind: str, name: str, uid: str, group: str = "kubeflow.org") -> str:
    """The name Kueue gives the Workload of job ``kind``/``name`` (its
    ``GetWorkloadNameForOwnerWithGVK``: lower-case kind, name, a short hash of both and the
    uid; the hash input is Bellows' own, only the shape matters to the emulator)."""
    prefix = f"{kind.lower()}-{name}"[:_MAX_PREFIX]
    digest = hashlib.sha1(f"{kind}/{group}/{name}/{uid}".encode()).hexdigest()
    return f"{prefix}-{digest[:_HASH]}"


@dataclass(frozen=True)
class WorkloadView:
    """What Bellows needs of one Workload, read at one ``resource_version``."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    job_uid: str | None
    queue: str | None
    active: bool
    quota_reserved: bool
    admitted: bool
    evicted_reason: str | None  # the Evicted condition's reason while True
    cluster_queue: str | None  # status.admission.clusterQueue while admitted
    pod_counts: Mapping[str, int]  # podSets[].name -> count


def read_workload(obj: Mapping[str, Any]) -> WorkloadView:
    """The view of a Workload object; :class:`SpecError` names a field that is malformed."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    by_type = conditions(obj)

    def true(kind: str) -> bool:
        return by_type.get(kind, {}).get("status") == "True"

    active = spec.get("active", True)
    if not isinstance(active, bool):
        raise SpecError("workload spec.active", active, "true or false")
    counts: dict[str, int] = {}
    for i, pod_set in enumerate(spec.get("podSets") or []):
        if not isinstance(pod_set, Mapping):
            raise SpecError(f"workload spec.podSets[{i}]", pod_set, "an object")
        count = pod_set.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SpecError(f"workload spec.podSets[{i}].count", count, "a whole number >= 0")
        counts[str(pod_set.get("name", f"podset-{i}"))] = count
    admission = (obj.get("status") or {}).get("admission") or {}
    evicted = by_type.get("Evicted", {})
    return WorkloadView(
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        job_uid=(meta.get("labels") or {}).get(JOB_UID),
        queue=spec.get("queueName"),
        active=active,
        quota_reserved=true("QuotaReserved"),
        admitted=true("Admitted"),
        evicted_reason=str(evicted.get("reason")) if evicted.get("status") == "True" else None,
        cluster_queue=admission.get("clusterQueue") if isinstance(admission, Mapping) else None,
        pod_counts=counts,
    )


def owned_workload(
    job: Mapping[str, Any], workloads: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The Workload Kueue keeps for ``job``: the one the job controls (owner uid), or
    ``None`` (not created yet, or deleted and not yet recreated)."""
    uid = (job.get("metadata") or {}).get("uid")
    if not uid:
        return None
    for workload in workloads:
        meta = workload.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        for ref in meta.get("ownerReferences") or []:
            if isinstance(ref, Mapping) and ref.get("uid") == uid and ref.get("controller"):
                return workload
    return None


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True)
class NamespaceSelector:
    """A ClusterQueue's ``namespaceSelector``: ``requirements`` ANDed, each ``(key,
    operator, values)``; ``None`` is the null selector, which matches no namespace."""

    requirements: tuple[tuple[str, str, tuple[str, ...]], ...] | None

    def admits(self, labels: Mapping[str, str]) -> bool:
        """Whether a namespace with ``labels`` may submit to the ClusterQueue
        (``metav1.LabelSelector`` semantics: ``NotIn`` and ``DoesNotExist`` match a
        namespace without the key)."""
        if self.requirements is None:
            return False
        for key, operator, values in self.requirements:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True

    def __str__(self) -> str:
        if self.requirements is None:
            return "null (no namespace)"
        if not self.requirements:
            return "{} (every namespace)"
        return ", ".join(
            f"{k} {op} ({','.join(v)})" if v else f"{k} {op}" for k, op, v in self.requirements
        )


def read_namespace_selector(field: str, value: object) -> NamespaceSelector:
    """The selector of ``value`` (a LabelSelector, or ``None``); :class:`SpecError` names
    a malformed part (Kueue's webhook refuses such a ClusterQueue)."""
    if value is None:
        return NamespaceSelector(None)
    if not isinstance(value, Mapping):
        raise SpecError(field, value, "a label selector (matchLabels, matchExpressions)")
    out: list[tuple[str, str, tuple[str, ...]]] = []
    labels = value.get("matchLabels") or {}
    if not isinstance(labels, Mapping):
        raise SpecError(f"{field}.matchLabels", labels, "a map of label keys to values")
    for key, wanted in sorted(labels.items()):
        if not isinstance(key, str) or not key or not isinstance(wanted, str):
            raise SpecError(f"{field}.matchLabels", {key: wanted}, "string keys and values")
        out.append((key, "In", (wanted,)))
    expressions = value.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise SpecError(f"{field}.matchExpressions", expressions, "a list of requirements")
    for i, expr in enumerate(expressions):
        where = f"{field}.matchExpressions[{i}]"
        if not isinstance(expr, Mapping):
            raise SpecError(where, expr, "an object with key, operator and values")
        key, operator, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if not isinstance(key, str) or not key:
            raise SpecError(f"{where}.key", key, "a label key")
        if operator not in _OPERATORS:
            raise SpecError(f"{where}.operator", operator, f"one of {', '.join(_OPERATORS)}")
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise SpecError(f"{where}.values", values, "a list of strings")
        if operator in ("In", "NotIn") and not values:
            raise SpecError(f"{where}.values", values, f"at least one value for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise SpecError(f"{where}.values", values, f"no values for {operator}")
        out.append((key, str(operator), tuple(sorted(set(values)))))
    return NamespaceSelector(tuple(out))


@dataclass(frozen=True)
class ClusterQueueView:
    """A ClusterQueue's GPUs (its ``nominalQuota`` of ``resource`` summed over every flavor
    of every resource group) and its admission order."""

    name: str
    gpus: int
    strategy: Strategy
    cohort: str | None
    namespaces: NamespaceSelector = NamespaceSelector(())  # {}: every namespace
    flavors: tuple[str, ...] = ()  # the flavors that give it GPUs, in order
    quotas: tuple[int, ...] = ()  # each flavor's GPU nominalQuota, in the same order

    @property
    def backfill(self) -> bool:
        """Whether a younger job may be admitted past an older one that does not fit."""
        return self.strategy == "BestEffortFIFO"


def read_cluster_queue(obj: Mapping[str, Any], resource: str = GPU) -> ClusterQueueView:
    """The view of a ClusterQueue; :class:`SpecError` names a malformed quota or strategy.

    Borrowing from a cohort is not counted: Bellows plans on the ``nominalQuota`` only
    (a borrowed GPU may be reclaimed by its lender at any time).
    """
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = obj.get("spec") or {}
    strategy = spec.get("queueingStrategy", "BestEffortFIFO")
    if strategy not in ("StrictFIFO", "BestEffortFIFO"):
        raise SpecError(
            f"clusterqueue {shown(name)} spec.queueingStrategy",
            strategy,
            "StrictFIFO or BestEffortFIFO",
        )
    gpus, flavors, quotas = 0, [], []
    for g, group in enumerate(spec.get("resourceGroups") or []):
        for f, flavor in enumerate((group or {}).get("flavors") or []):
            for r, entry in enumerate((flavor or {}).get("resources") or []):
                if (entry or {}).get("name") != resource:
                    continue
                flavors.append(str((flavor or {}).get("name", "")))
                field = (
                    f"clusterqueue {shown(name)} spec.resourceGroups[{g}].flavors[{f}]"
                    f".resources[{r}].nominalQuota"
                )
                quota = entry.get("nominalQuota", "0")
                if isinstance(quota, int) and not isinstance(quota, bool):
                    quota = str(quota)  # int-or-string: the API server may store either
                amount = parse_quantity(field, quota)
                if amount.denominator != 1:
                    raise SpecError(field, entry.get("nominalQuota"), "a whole number of GPUs")
                gpus += int(amount)
                quotas.append(int(amount))
    cohort = spec.get("cohortName") or spec.get("cohort")
    selector = read_namespace_selector(
        f"clusterqueue {shown(name)} spec.namespaceSelector", spec.get("namespaceSelector")
    )
    cohort_name = str(cohort) if cohort else None
    return ClusterQueueView(
        name, gpus, strategy, cohort_name, selector, tuple(flavors), tuple(quotas)
    )


# The replica specs of each job kind Kueue integrates, and the order of their podSets
# (Kueue's ``OrderedReplicaTypes``: the coordinating replica first).
_REPLICA_SPECS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker")),
    "MPIJob": ("mpiReplicaSpecs", ("Launcher", "Worker")),
}


def job_pod_sets(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``spec.podSets`` Kueue derives from a PyTorchJob or MPIJob: one per replica type
    (name = the type lower-case, count = its replicas, template = its pod template), the
    coordinating type first; :class:`SpecError` names a field that is malformed."""
    kind = str(job.get("kind", ""))
    if kind not in _REPLICA_SPECS:
        raise SpecError("kind", kind, f"one of {sorted(_REPLICA_SPECS)}")
    field, order = _REPLICA_SPECS[kind]
    specs = (job.get("spec") or {}).get(field)
    if not isinstance(specs, Mapping) or not specs:
        raise SpecError(f"spec.{field}", specs, "a map of replica specs")
    ranked = sorted(specs, key=lambda t: (order.index(t) if t in order else len(order), t))
    out: list[dict[str, Any]] = []
    for rtype in ranked:
        spec = specs[rtype]
        if not isinstance(spec, Mapping):
            raise SpecError(f"spec.{field}.{rtype}", spec, "a replica spec")
        count = spec.get("replicas", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise SpecError(f"spec.{field}.{rtype}.replicas", count, "a whole number >= 0")
        template = spec.get("template") or {}
        out.append({"name": rtype.lower(), "count": count, "template": dict(template)})
    return out


_ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"  # label: which step a Job runs
_TRAINER_STEP = "trainer"  # the runtime's replicated Job that trains (torch: ``node``)


def trainjob_pod_sets(job: Mapping[str, Any], runtime: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``spec.podSets`` Kueue derives from a TrainJob on ``runtime`` (its
    ``ClusterTrainingRuntime`` or ``TrainingRuntime``), as Kueue's TrainJob integration does:
    the JobSet the Trainer would render, one podSet per replicated Job (name = the Job's
    name, count = ``replicas`` x ``parallelism``, template = its pod template). The trainer
    step (label ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``) gets
    ``spec.trainer``'s ``numNodes`` as its parallelism and its ``image``, ``command``,
    ``args``, ``resourcesPerNode`` and ``env`` on its container of the same name; the pod
    specs of ``spec.runtimePatches`` are merged by Job name (a field replaced whole, as the
    Trainer's patch does for lists).
    :class:`SpecError` names a malformed field."""
    jobs = (((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "replicatedJobs"
    )
    if not isinstance(jobs, list) or not jobs:
        raise SpecError("runtime spec.template.spec.replicatedJobs", jobs, "a list of Jobs")
    spec = job.get("spec") or {}
    trainer = spec.get("trainer") or {}
    policy = (runtime.get("spec") or {}).get("mlPolicy") or {}
    patches: dict[str, list[Mapping[str, Any]]] = {}
    for patch in spec.get("runtimePatches") or []:
        patched = (
            ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        ) or {}
        for rj in patched.get("replicatedJobs") or []:
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
            if isinstance(pod, Mapping):
                patches.setdefault(str(rj.get("name", "")), []).append(pod)
    out: list[dict[str, Any]] = []
    for i, rj in enumerate(jobs):
        name = str(rj.get("name", ""))
        where = f"runtime replicatedJobs[{i}]"
        job_tpl = rj.get("template") or {}
        job_spec = job_tpl.get("spec") or {}
        template = copy.deepcopy(dict(job_spec.get("template") or {}))
        pod = template.setdefault("spec", {})
        parallelism = job_spec.get("parallelism", 1)
        if ((job_tpl.get("metadata") or {}).get("labels") or {}).get(_ANCESTOR) == _TRAINER_STEP:
            parallelism = trainer.get("numNodes", policy.get("numNodes", 1))
            for container in pod.get("containers") or []:
                if container.get("name") != name:
                    continue
                for field in ("image", "command", "args"):
                    if trainer.get(field):
                        container[field] = copy.deepcopy(trainer[field])
                if trainer.get("resourcesPerNode"):
                    container["resources"] = copy.deepcopy(trainer["resourcesPerNode"])
                env = [
                    e
                    for e in container.get("env") or []
                    if e.get("name") not in {t.get("name") for t in trainer.get("env") or []}
                ]
                env += copy.deepcopy(list(trainer.get("env") or []))
                if env:
                    container["env"] = env
        for fields in patches.get(name, []):
            pod.update(copy.deepcopy(dict(fields)))
        replicas = rj.get("replicas", 1)
        for field, value in (
            (f"{where}.replicas", replicas),
            (f"{where}.parallelism", parallelism),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SpecError(field, value, "a whole number >= 0")
        out.append({"name": name, "count": replicas * parallelism, "template": template})
    return out


def pod_set_gpus(pod_set: Mapping[str, Any], resource: str = GPU) -> int:
    """The GPUs one pod of ``pod_set`` asks for: its containers' ``limits`` of ``resource``
    summed (``requests`` where a container sets no limit)."""
    name = pod_set.get("name", "?")
    pod = (pod_set.get("template") or {}).get("spec") or {}
    total = 0
    for i, container in enumerate(pod.get("containers") or []):
        resources = (container or {}).get("resources") or {}
        value = (resources.get("limits") or {}).get(resource)
        if value is None:
            value = (resources.get("requests") or {}).get(resource, 0)
        where = f"podSet {shown(str(name))} containers[{i}].resources {resource}"
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        amount = parse_quantity(where, value)
        if amount.denominator != 1 or amount < 0:
            raise SpecError(where, value, "a whole number of GPUs")
        total += int(amount)
    return total


def workload_gpus(pod_sets: Iterable[Mapping[str, Any]], resource: str = GPU) -> int:
    """A Workload's GPU request: over its podSets, ``count`` times the GPUs of one pod."""
    return sum(int(p.get("count", 1)) * pod_set_gpus(p, resource) for p in pod_sets)
