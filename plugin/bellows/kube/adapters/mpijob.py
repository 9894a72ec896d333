"""MPIJob (``kubeflow.org/v2beta1``, mpi-operator): one Launcher and Workers.

GPUs = ``Worker.replicas x slotsPerWorker`` (the workers' ``nvidia.com/gpu`` limit, when
set, must agree with ``slotsPerWorker``). Every container of the Launcher and the Workers
gets the batch env vars: ``mpirun`` forwards the launcher's environment to the ranks. On
resume the operator does not refresh the launcher batch Job's command or env, so the
actuator deletes ``<name>-launcher`` while the job is suspended (:meth:`launcher`), and only
when the MPIJob controls that Job (``journal.foreign_launcher``): the name alone proves
nothing, since anyone who may create a batch Job in the namespace may take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bellows.jobs import SpecError
from bellows.kube.adapters.replicated import ReplicatedKind
from bellows.kube.kinds import gpu_limit
from bellows.refs import JobKind

__all__ = ["MPIJobKind"]


class MPIJobKind(ReplicatedKind):
    """The MPIJob adapter."""

    kind = JobKind.MPIJOB
    version = "v2beta1"
    plural = "mpijobs"
    manager = "kubeflow.org/mpi-operator"
    operator_name = "mpi-operator"
    specs_field = "mpiReplicaSpecs"
    allowed_types = ("Launcher", "Worker")

    def training_containers(self, rtype: str, pod: Mapping[str, Any]) -> list[int]:
        return list(range(len(pod.get("containers") or [])))

    def gpus_per_replica(self, obj: Mapping[str, Any], rtype: str) -> int:
        spec = obj.get("spec") or {}
        if rtype == "Launcher":
            if spec.get("runLauncherAsWorker"):
                raise SpecError(
                    "spec.runLauncherAsWorker", True, "false (Bellows counts GPUs on Workers only)"
                )
            if self.replicas(obj, "Launcher") != 1:
                raise SpecError(
                    f"spec.{self.specs_field}.Launcher.replicas",
                    self.replicas(obj, "Launcher"),
                    "exactly 1",
                )
            return 0
        slots = spec.get("slotsPerWorker", 1)
        if isinstance(slots, bool) or not isinstance(slots, int) or slots < 1:
            raise SpecError("spec.slotsPerWorker", slots, "an integer >= 1")
        where = f"spec.{self.specs_field}.Worker.template.spec.containers"
        for i, container in enumerate(self.containers(obj, "Worker")):
            limit = gpu_limit(container, f"{where}[{i}]")
            if limit not in (0, slots):
                raise SpecError(
                    f"{where}[{i}].resources.limits.nvidia.com/gpu",
                    limit,
                    f"equal to spec.slotsPerWorker ({slots})",
                )
        return int(slots)

    def launcher(self, obj: Mapping[str, Any]) -> str | None:
        return f"{(obj.get('metadata') or {}).get('name', '')}-launcher"
