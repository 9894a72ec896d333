"""Replaying a trace onto a cluster: each trace job becomes a suspended, opted-in Kubeflow job.

Used by ``bellows demo`` to drive the emulated cluster with the very workload the simulator
runs. Jobs take the kinds asked for in turn (PyTorchJob and MPIJob by default, so that both
adapters are exercised; TrainJob on the emulated Trainer's ``torch-distributed`` runtime);
a job's profile travels inline in its ``bellows.io/profile`` annotation, with its sections per
GPU type (``types``) where it has them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from bellows.kube import keys as k
from bellows.kube.kinds import KUEUE_QUEUE
from bellows.refs import JobKind, JobRef
from bellows.scaling import MODEL_EFFICIENCY, JobProfile, job_profile_to_json
from bellows.sim.workloads import TraceJob

__all__ = ["BATCH_ENV", "DEFAULT_KINDS", "job_manifest", "manifest_name"]

DEFAULT_KINDS = ("PyTorchJob", "MPIJob")

BATCH_ENV = "GLOBAL_BATCH_SIZE"
_IMAGE = "registry.example/bellows-demo-train:1.0"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def manifest_name(job: TraceJob) -> str:
    """A DNS-1123 name for the trace job."""
    return _NOT_DNS.sub("-", job.spec.name.lower()).strip("-")[:63] or "job"


def _annotations(job: TraceJob, *, efficiency: bool = False) -> dict[str, str]:
    spec = job.spec
    prior = MODEL_EFFICIENCY.get(job.model) if efficiency else None  # {"model": ...}
    profile = JobProfile(
        weights=spec.weights, step=spec.profile, source="bellows demo trace", efficiency=prior,
        types=spec.types,
    )  # fmt: skip
    return {
        k.MIN_BATCH: str(spec.b_min),
        k.MAX_BATCH: str(spec.b_max),
        k.MAX_GPUS: str(spec.k_max),
        k.MAX_BATCH_PER_GPU: str(spec.m_max),
        k.WORK: repr(spec.work),
        k.PROFILE: json.dumps(job_profile_to_json(profile), separators=(",", ":")),
        k.BATCH_ENV: BATCH_ENV,
        k.ELASTIC: "true" if spec.elastic else "false",
    }


def _container(name: str, batch: int, *, gpus: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": _IMAGE,
        "env": [{"name": BATCH_ENV, "value": str(batch)}],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return container


def job_manifest(
    job: TraceJob,
    index: int,
    *,
    namespace: str,
    queue: str | None = None,
    kinds: Sequence[str] = DEFAULT_KINDS,
    efficiency: bool = False,
) -> tuple[JobRef, dict[str, Any]]:
    """The object to create for ``job``: of ``kinds[index % len(kinds)]`` (by default even
    indices PyTorchJob, odd ones MPIJob); with ``queue``, in that Kueue LocalQueue (the
    ``kueue.x-k8s.io/queue-name`` label). ``efficiency``: its profile names its model's
    statistical efficiency (``{"model": ...}``: goodput from the first round)."""
    spec = job.spec
    name = manifest_name(job)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": _annotations(job, efficiency=efficiency),
    }
    if queue is not None:
        metadata["labels"] = {KUEUE_QUEUE: queue}
    # the owner's ask must itself be allowed: enough replicas for the batch to fit per GPU
    replicas = spec.gpus if not spec.elastic else max(spec.gpus, -(-spec.batch_size // spec.m_max))
    kind = kinds[index % len(kinds)]
    if kind == "TrainJob":
        return JobRef(JobKind.TRAINJOB, namespace, name), _trainjob(
            metadata, replicas, spec.batch_size
        )
    if kind == "PyTorchJob":
        body: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": metadata,
            "spec": {
                "runPolicy": {"suspend": True},
                "pytorchReplicaSpecs": {
                    "Worker": {
                        "replicas": replicas,
                        "restartPolicy": "OnFailure",
                        "template": {
                            "spec": {
                                "containers": [_container("pytorch", spec.batch_size, gpus=True)]
                            }
                        },
                    }
                },
            },
        }
        return JobRef(JobKind.PYTORCHJOB, namespace, name), body
    launcher = _container("launcher", spec.batch_size, gpus=False)
    launcher["command"] = ["/bin/sh", "-c"]
    launcher["args"] = [
        f'mpirun -np "$(grep -c . /etc/mpi/hostfile)" -x {BATCH_ENV} python train.py --resume'
    ]
    body = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": metadata,
        "spec": {
            "slotsPerWorker": 1,
            "runPolicy": {"suspend": True},
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
                "Worker": {
                    "replicas": replicas,
                    "template": {
                        "spec": {"containers": [_container("worker", spec.batch_size, gpus=True)]}
                    },
                },
            },
        },
    }
    return JobRef(JobKind.MPIJOB, namespace, name), body


def _trainjob(metadata: dict[str, Any], nodes: int, batch: int) -> dict[str, Any]:
    """A TrainJob on the torch runtime: ``nodes`` nodes of one GPU, the batch env set."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": metadata,
        "spec": {
            "suspend": True,
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": nodes,
                "image": _IMAGE,
                "env": [{"name": BATCH_ENV, "value": str(batch)}],
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}},
            },
        },
    }


def unique_names(trace: Sequence[TraceJob]) -> None:
    """Raise ``ValueError`` if two trace jobs map to the same object name."""
    seen: dict[str, str] = {}
    for job in trace:
        name = manifest_name(job)
        if name in seen:
            raise ValueError(
                f"trace jobs {seen[name]!r} and {job.spec.name!r} both map to {name!r}"
            )
        seen[name] = job.spec.name
