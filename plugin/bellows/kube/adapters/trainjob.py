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
from bellows.kube.placement import Placement
from bellows.refs import JobKind, JobRef

__all__ = ["NODE_JOB", "TRAINER_MANAGER", "TrainJobKind", "pod_template_patch"]

TRAINER_MANAGER = "trainer.kubeflow.org/trainjob-controller"
NODE_JOB = "node"  # the replicated Job of a torch runtime whose pods train (upstream's name)


def _trainer(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    trainer = (obj.get("spec") or {}).get("trainer")
    if not isinstance(trainer, Mapping):
        raise SpecError(
            "spec.trainer", trainer, "an object with numNodes and resourcesPerNode (GPUs)"
        )
    return trainer


def pod_template_patch(pod_spec: Mapping[str, Any], *, manager: str) -> dict[str, Any]:
    """The ``spec.runtimePatches`` entry (keyed by ``manager``) that gives the training
    pods of a torch runtime's ``node`` Job the fields of ``pod_spec`` (affinity, node
    selector, tolerations, scheduling gates). The one place Bellows reaches a TrainJob's
    pod template: a TrainJob has none of its own, and ``runtimePatches`` may change only
    while the job is suspended (Kueue injects its node selectors the same way)."""
    job = {"name": NODE_JOB, "template": {"spec": {"template": {"spec": dict(pod_spec)}}}}
    return {
        "manager": manager,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


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
        if env:
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

    def placement_patch(
        self, obj: Mapping[str, Any], placement: Placement, topology_key: str
    ) -> dict[str, Any]:
        """Nothing yet: a TrainJob's pod template is its runtime's, reachable only through
        ``spec.runtimePatches`` while suspended (``bellows.kube.placement.placed_template``
        is meant for it), and its resize is a re-creation that does not send this patch."""
        return {}
