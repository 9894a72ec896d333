"""What PyTorchJob and MPIJob share: replica specs, run policy, conditions, the env patch.

Each kind module subclasses :class:`ReplicatedKind` and says which replica types train,
which containers carry the batch size and how GPUs are counted; everything else (reading
replicas and env values, building the merge patch that rewrites them) is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bellows.inputs import check_int
from bellows.jobs import MAX_GPUS, SpecError
from bellows.kube.kinds import (
    JobView,
    env_values,
    finished_state,
    halted_by_conditions,
    with_env,
)
from bellows.kube.kueue import queue_name
from bellows.kube.placement import Ask, placed_template
from bellows.kube.progress_env import defaults_of
from bellows.refs import JobKind, JobRef

__all__ = ["JOB_NAME_LABEL", "OPERATOR_NAME_LABEL", "ReplicatedKind"]

# The labels both Kubeflow v1 operators put on a job's pods (kubeflow/common's constants).
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"


class ReplicatedKind:
    """Base of the Kubeflow kinds: ``spec.<specs_field>.<Type>.{replicas,template}``."""

    kind: JobKind  # each kind's own
    group = "kubeflow.org"
    version = ""
    plural = ""
    specs_field = ""
    manager = ""  # the operator's own spec.runPolicy.managedBy value
    scaled_type = "Worker"  # the replica type whose count Bellows changes
    operator_name = ""  # the operator's training.kubeflow.org/operator-name label on its pods
    allowed_types: tuple[str, ...] = ()

    # ----- per-kind hooks --------------------------------------------------------------------

    def training_containers(self, rtype: str, pod: Mapping[str, Any]) -> list[int]:
        """Indices of the containers of replica type ``rtype`` that get the batch env vars."""
        raise NotImplementedError

    def gpus_per_replica(self, obj: Mapping[str, Any], rtype: str) -> int:
        """GPUs one replica of ``rtype`` trains on (0 for a launcher that does not)."""
        raise NotImplementedError

    def extra_blocker(self, obj: Mapping[str, Any]) -> str | None:
        return None

    def launcher(self, obj: Mapping[str, Any]) -> str | None:
        return None

    # ----- shared reading --------------------------------------------------------------------

    def specs(self, obj: Mapping[str, Any]) -> Mapping[str, Mapping[str, Any]]:
        specs = (obj.get("spec") or {}).get(self.specs_field)
        where = f"spec.{self.specs_field}"
        if not isinstance(specs, Mapping) or self.scaled_type not in specs:
            raise SpecError(f"{where}.{self.scaled_type}", None, "a replica spec")
        for rtype in specs:
            if rtype not in self.allowed_types:
                raise SpecError(
                    f"{where}.{rtype}", "(replica type)", f"one of {self.allowed_types}"
                )
        return specs

    def replicas(self, obj: Mapping[str, Any], rtype: str) -> int:
        spec = self.specs(obj).get(rtype)
        if spec is None:
            return 0
        where = f"spec.{self.specs_field}.{rtype}.replicas"
        return check_int(where, spec.get("replicas", 1), minimum=0, maximum=MAX_GPUS)

    def containers(self, obj: Mapping[str, Any], rtype: str) -> list[Mapping[str, Any]]:
        pod = ((self.specs(obj)[rtype].get("template") or {}).get("spec")) or {}
        return list(pod.get("containers") or [])

    def view(self, obj: Mapping[str, Any], env_names: tuple[str, ...]) -> JobView:
        meta = obj.get("metadata") or {}
        specs = self.specs(obj)
        step = self.gpus_per_replica(obj, self.scaled_type)
        fixed = sum(
            self.replicas(obj, t) * self.gpus_per_replica(obj, t)
            for t in specs
            if t != self.scaled_type
        )
        env: dict[str, tuple[str | None, ...]] = {}
        for name in env_names:
            values: list[str | None] = []
            for rtype in specs:
                containers = self.containers(obj, rtype)
                where = f"spec.{self.specs_field}.{rtype}.template.spec"
                chosen = [
                    containers[i]
                    for i in self.training_containers(rtype, {"containers": containers})
                ]
                values.extend(env_values(chosen, name, where))
            env[name] = tuple(values)
        run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
        return JobView(
            ref=JobRef(self.kind, meta.get("namespace", ""), meta.get("name", "")),
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            annotations=dict(meta.get("annotations") or {}),
            suspended=bool(run_policy.get("suspend", False)),
            finished=finished_state(obj),
            gpus=fixed + self.replicas(obj, self.scaled_type) * step,
            gpu_step=step,
            min_gpus=fixed + step,
            env=env,
            blocker=self.extra_blocker(obj),
            queue=queue_name(obj),
            raw=obj,
        )

    def pod_counts(self, obj: Mapping[str, Any]) -> dict[str, int]:
        return {rtype.lower(): self.replicas(obj, rtype) for rtype in self.specs(obj)}

    # ----- shared patching -------------------------------------------------------------------

    def scale_patch(
        self, obj: Mapping[str, Any], gpus: int, env: Mapping[str, str]
    ) -> dict[str, Any]:
        view = self.view(obj, ())
        fixed = view.min_gpus - view.gpu_step
        count, rest = divmod(gpus - fixed, view.gpu_step) if view.gpu_step else (0, 1)
        if rest or count < 1:
            raise SpecError(
                "gpus",
                gpus,
                f"{fixed} + a positive multiple of {view.gpu_step} "
                f"(GPUs of the other replicas + {self.scaled_type} replicas x GPUs each)",
            )
        patched: dict[str, Any] = {}
        for rtype in self.specs(obj):
            containers = self.containers(obj, rtype)
            chosen = set(self.training_containers(rtype, {"containers": containers}))
            entry: dict[str, Any] = {}
            if rtype == self.scaled_type:
                entry["replicas"] = count
            if chosen and (env or defaults_of(env)):
                # A merge patch replaces lists whole: send every container, edited or not.
                entry["template"] = {
                    "spec": {
                        "containers": [
                            with_env(c, env) if i in chosen else dict(c)
                            for i, c in enumerate(containers)
                        ]
                    }
                }
            if entry:
                patched[rtype] = entry
        return {self.specs_field: patched}

    def pod_selector(self, obj: Mapping[str, Any]) -> dict[str, str]:
        """The labels the operator puts on this job's pods, and on no other job's: the
        job's name and the operator's (a PyTorchJob and an MPIJob may share a name)."""
        return {
            JOB_NAME_LABEL: str((obj.get("metadata") or {}).get("name", "")),
            OPERATOR_NAME_LABEL: self.operator_name,
        }

    def placement_patch(
        self, obj: Mapping[str, Any], placement: Ask, topology_key: str
    ) -> dict[str, Any]:
        selector = self.pod_selector(obj)
        patched: dict[str, Any] = {}
        for rtype, spec in self.specs(obj).items():
            template = spec.get("template") or {}
            placed = placed_template(
                template, selector=selector, placement=placement, topology_key=topology_key
            )
            if placed:
                patched[rtype] = {"template": placed}
        return {self.specs_field: patched} if patched else {}

    def halted(self, obj: Mapping[str, Any], since: datetime | None) -> bool:
        return halted_by_conditions(obj, since)

    def suspend_spec(self, suspend: bool) -> dict[str, Any]:
        return {"runPolicy": {"suspend": suspend}}
