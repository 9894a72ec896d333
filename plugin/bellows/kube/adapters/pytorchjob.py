"""PyTorchJob (``kubeflow.org/v1``, training-operator): Master (0 or 1) and Workers.

The training container is the one named ``pytorch`` (the operator requires the name);
GPUs per replica are its ``nvidia.com/gpu`` limit. Bellows changes ``Worker.replicas``
(never 0: the operator needs one Worker; suspend stops a job instead). A job with
``spec.elasticPolicy.metrics`` has an HPA from the operator and is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bellows.jobs import SpecError
from bellows.kube.adapters.replicated import ReplicatedKind
from bellows.kube.kinds import gpu_limit
from bellows.refs import JobKind

__all__ = ["PyTorchJobKind"]

CONTAINER = "pytorch"


class PyTorchJobKind(ReplicatedKind):
    """The PyTorchJob adapter."""

    kind = JobKind.PYTORCHJOB
    version = "v1"
    plural = "pytorchjobs"
    manager = "kubeflow.org/training-operator"
    operator_name = "pytorchjob-controller"
    specs_field = "pytorchReplicaSpecs"
    allowed_types = ("Master", "Worker")

    def training_containers(self, rtype: str, pod: Mapping[str, Any]) -> list[int]:
        return [i for i, c in enumerate(pod.get("containers") or []) if c.get("name") == CONTAINER]

    def gpus_per_replica(self, obj: Mapping[str, Any], rtype: str) -> int:
        containers = self.containers(obj, rtype)
        where = f"spec.{self.specs_field}.{rtype}.template.spec.containers"
        chosen = self.training_containers(rtype, {"containers": containers})
        if not chosen:
            raise SpecError(
                where, [c.get("name") for c in containers], f"a container named {CONTAINER!r}"
            )
        if rtype == "Master" and self.replicas(obj, "Master") != 1:
            raise SpecError(
                f"spec.{self.specs_field}.Master.replicas",
                self.replicas(obj, "Master"),
                "exactly 1",
            )
        return gpu_limit(containers[chosen[0]], f"{where}[{chosen[0]}]")

    def extra_blocker(self, obj: Mapping[str, Any]) -> str | None:
        metrics = ((obj.get("spec") or {}).get("elasticPolicy") or {}).get("metrics")
        if metrics:
            return (
                "spec.elasticPolicy.metrics is set: the training operator scales this job with "
                "an HPA, and two autoscalers would fight; remove the metrics or the bellows.io/ "
                "annotations"
            )
        return None
