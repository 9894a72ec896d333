"""TrainJob (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer v2) on a torch runtime.

A TrainJob names a runtime (``spec.runtimeRef``: a ``ClusterTrainingRuntime`` or a
``TrainingRuntime``) and overrides its trainer: ``spec.trainer.numNodes`` nodes, each with
``spec.trainer.resourcesPerNode``; the Trainer renders a JobSet whose ``node`` Job runs one
pod per node and sets ``PET_NNODES`` from ``numNodes``. GPUs = ``numNodes`` x the
``nvidia.com/gpu`` limit of ``resourcesPerNode`` (both must be set on the TrainJob: the
runtime's defaults are not read, an adapter does no I/O). The batch env vars live in
``spec.trainer.env``, which the Trainer merges into the training container.

``spec.trainer`` is immutable, even while suspended (CEL ``self == oldSelf``, Trainer v2.2+,
kubeflow/trainer PR #3157; kubeflow/trainer#3995 asks for ``numNodes`` mutable when
suspended). So a resize is a re-creation (``bellows.kube.recreation``), unless the API
server accepts the in-place patch of :meth:`TrainJobKind.scale_patch` in a dry run.
Suspend is ``spec.suspend``; ``spec.managedBy`` names the controller
(``trainer.kubeflow.org/trainjob-controller``, or ``kueue.x-k8s.io/multikueue``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bellows.inputs import check_int, parse_int
from bellows.jobs import MAX_GPUS, SpecError
from bellows.kube.kinds import (
    GPU,
    JobView,
    conditions,
    finished_state,
    parse_time,
    with_env,
)
from bellows.kube.kueue import queue_name
from bellows.kube.placement import Ask, Placement, placed_template
from bellows.kube.progress_env import defaults_of
from bellows.refs import JobKind, JobRef

__all__ = [
    "JOBSET_NAME_LABEL",
    "NODE_JOB",
    "PLACEMENT_MANAGER",
    "TRAINER_MANAGER",
    "TrainJobKind",
    "node_pod_template",
    "pod_template_patch",
]

TRAINER_MANAGER = "trainer.kubeflow.org/trainjob-controller"
NODE_JOB = "node"  # the replicated Job of a torch runtime whose pods train (upstream's name)
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"  # on every pod of the TrainJob's JobSet
PLACEMENT_MANAGER = "bellows.io/placement"  # Bellows' entry of spec.runtimePatches
MAX_RUNTIME_PATCHES = 16  # the CRD's maxItems of spec.runtimePatches (Trainer v2.3.0)


def _trainer(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    trainer = (obj.get("spec") or {}).get("trainer")
    if not isinstance(trainer, Mapping):
        raise SpecError(
            "spec.trainer", trainer, "an object with numNodes and resourcesPerNode (GPUs)"
        )
    return trainer


def pod_template_patch(
    pod_spec: Mapping[str, Any],
    *,
    manager: str,
    pod_metadata: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``spec.runtimePatches`` entry (keyed by ``manager``) that gives the training
    pods of a torch runtime's ``node`` Job the fields of ``pod_spec`` (affinity, node
    selector, tolerations, scheduling gates) and of ``pod_metadata`` (labels, annotations).
    The one place Bellows reaches a TrainJob's pod template: a TrainJob has none of its own,
    and ``runtimePatches`` may change only while the job is suspended (Kueue injects its
    node selectors the same way)."""
    template: dict[str, Any] = {"spec": dict(pod_spec)}
    if pod_metadata:
        template = {"metadata": dict(pod_metadata), **template}
    job = {"name": NODE_JOB, "template": {"spec": {"template": template}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


def node_pod_template(patches: Any) -> dict[str, Any]:
    """The ``node`` Job's pod template as ``patches`` (``spec.runtimePatches`` entries)
    make it, in their order: each entry's pod ``metadata`` and ``spec`` fields over the
    earlier ones' (a field replaced whole, lists included, as the Trainer applies them).
    Only what the patches say: the runtime's own template is not read here (no I/O)."""
    out: dict[str, Any] = {}
    for patch in patches if isinstance(patches, list) else []:
        if not isinstance(patch, Mapping):
            continue
        runtime = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        for job in (runtime or {}).get("replicatedJobs") or []:
            if not isinstance(job, Mapping) or job.get("name") != NODE_JOB:
                continue
            template = ((job.get("template") or {}).get("spec") or {}).get("template") or {}
            for part in ("metadata", "spec"):
                fields = template.get(part)
                if isinstance(fields, Mapping):
                    merged = out.setdefault(part, {})
                    if part == "metadata":
                        for key in ("labels", "annotations"):
                            if isinstance(fields.get(key), Mapping):
                                merged[key] = {**merged.get(key, {}), **fields[key]}
                    else:
                        merged.update(copy.deepcopy(dict(fields)))
    return out


class TrainJobKind:
    """The TrainJob adapter (torch runtimes)."""

    kind = JobKind.TRAINJOB
    group = "trainer.kubeflow.org"
    version = "v1alpha1"
    plural = "trainjobs"
    manager = TRAINER_MANAGER
    recreates = True  # spec.trainer is immutable: a resize is a delete and create

    def suspend_spec(self, suspend: bool) -> dict[str, Any]:
        return {"suspend": suspend}

    def nodes(self, obj: Mapping[str, Any]) -> int:
        trainer = _trainer(obj)
        if "numNodes" not in trainer:
            raise SpecError(
                "spec.trainer.numNodes", None, "set on the TrainJob (the runtime's is not read)"
            )
        return check_int("spec.trainer.numNodes", trainer["numNodes"], minimum=1, maximum=MAX_GPUS)

    def gpus_per_node(self, obj: Mapping[str, Any]) -> int:
        resources = _trainer(obj).get("resourcesPerNode") or {}
        where = f"spec.trainer.resourcesPerNode.limits.{GPU}"
        value = (resources.get("limits") or {}).get(GPU) if isinstance(resources, Mapping) else None
        if value is None:
            raise SpecError(where, None, "at least 1 GPU per node, set on the TrainJob")
        if isinstance(value, int) and not isinstance(value, bool):
            return check_int(where, value, minimum=1, maximum=MAX_GPUS)
        return parse_int(where, value, minimum=1, maximum=MAX_GPUS)

    def view(self, obj: Mapping[str, Any], env_names: tuple[str, ...]) -> JobView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        if ref.get("apiGroup", self.group) != self.group:
            raise SpecError("spec.runtimeRef.apiGroup", ref.get("apiGroup"), self.group)
        step = self.gpus_per_node(obj)
        env: dict[str, tuple[str | None, ...]] = {}
        for name in env_names:
            found: str | None = None
            for entry in _trainer(obj).get("env") or []:
                if entry.get("name") == name:
                    if "valueFrom" in entry:
                        raise SpecError(
                            f"spec.trainer.env.{name}", "valueFrom", "a literal Bellows can set"
                        )
                    found = str(entry.get("value", ""))
            env[name] = (found,)
        return JobView(
            ref=JobRef(self.kind, meta.get("namespace", ""), meta.get("name", "")),
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            annotations=dict(meta.get("annotations") or {}),
            suspended=bool(spec.get("suspend", False)),
            finished=finished_state(obj),
            gpus=self.nodes(obj) * step,
            gpu_step=step,
            min_gpus=step,
            env=env,
            blocker=None,
            queue=queue_name(obj),
            raw=obj,
        )

    def trainer_patch(
        self, obj: Mapping[str, Any], gpus: int, env: Mapping[str, str]
    ) -> dict[str, Any]:
        """The whole ``spec.trainer`` for ``gpus`` GPUs and ``env`` (a merge patch replaces
        the env list whole, so every entry is sent)."""
        step = self.gpus_per_node(obj)
        count, rest = divmod(gpus, step)
        if rest or count < 1:
            raise SpecError("gpus", gpus, f"a positive multiple of {step} (nodes x GPUs each)")
        trainer = copy.deepcopy(dict(_trainer(obj)))
        trainer["numNodes"] = count
        if env or defaults_of(env):
            trainer["env"] = with_env({"env": trainer.get("env") or []}, env)["env"]
        return trainer

    def scale_patch(
        self, obj: Mapping[str, Any], gpus: int, env: Mapping[str, str]
    ) -> dict[str, Any]:
        return {"trainer": self.trainer_patch(obj, gpus, env)}

    def halted(self, obj: Mapping[str, Any], since: datetime | None) -> bool:
        """Suspended, the Trainer says so (``Suspended=True`` since ``since``) and no child
        Job has an active pod (``status.jobsStatus[].active``)."""
        if not (obj.get("spec") or {}).get("suspend", False):
            return False
        status = obj.get("status") or {}
        if any(int(j.get("active", 0)) for j in status.get("jobsStatus") or []):
            return False
        suspended = conditions(obj).get("Suspended", {})
        if suspended.get("status") != "True":
            return False
        moment = parse_time(suspended.get("lastTransitionTime"))
        return since is None or (moment is not None and moment >= since.replace(microsecond=0))

    def launcher(self, obj: Mapping[str, Any]) -> str | None:
        return None

    def pod_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        return {NODE_JOB: self.nodes(obj)}

    def pod_selector(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The label JobSet puts on every pod of the TrainJob's JobSet (named as the
        TrainJob), and on no other job's pods."""
        return {JOBSET_NAME_LABEL: str((obj.get("metadata") or {}).get("name", ""))}

    def placement_patch(
        self, obj: Mapping[str, Any], placement: Ask, topology_key: str
    ) -> dict[str, Any]:
        """The ``spec.runtimePatches`` (the whole list: a merge patch replaces it) with
        Bellows' entry (manager :data:`PLACEMENT_MANAGER`) asking ``placement`` of the
        training pods; ``{}`` when nothing needs to change. The other managers' entries
        (the owner's, Kueue's) stay as they are, before Bellows' entry, which carries their
        preferred affinity terms on with its own (the Trainer replaces a list whole).
        Written only while the job is suspended: with the re-created copy, or with the
        patch that sizes a suspended one (an in-place Trainer, or one never started)."""
        if placement is Placement.NONE:
            return {}
        patches = list((obj.get("spec") or {}).get("runtimePatches") or [])
        others = [p for p in patches if p.get("manager") != PLACEMENT_MANAGER]
        if len(others) >= MAX_RUNTIME_PATCHES:
            return {}  # no room for an entry of Bellows' (the CRD's maxItems): as placed
        template = node_pod_template(others)
        placed = placed_template(
            template,
            selector=self.pod_selector(obj),
            placement=placement,
            topology_key=topology_key,
        )
        wanted = list(others)
        if placed:
            pod_spec = dict(placed.get("spec") or {})
            if "affinity" in pod_spec:  # the others' affinity carried on whole, with ours
                owned = copy.deepcopy((template.get("spec") or {}).get("affinity") or {})
                for part, ours in pod_spec["affinity"].items():  # pod and node affinity
                    owned[part] = {**(owned.get(part) or {}), **ours}
                pod_spec["affinity"] = owned
            wanted.append(
                pod_template_patch(
                    pod_spec, manager=PLACEMENT_MANAGER, pod_metadata=placed.get("metadata")
                )
            )
        return {} if wanted == patches else {"runtimePatches": wanted}
