"""One elastic training job from a pipeline step: submit it annotated, wait, report the outcome.

The logic of the Kubeflow Pipelines component (:mod:`bellows.kube.kfp_component`, the only
module that imports ``kfp``): :func:`job_manifest` builds a suspended PyTorchJob or TrainJob
that opts in to Bellows (``bellows.io/`` owner annotations, ``docs/user-guide-annotations.md``),
:func:`run_job` creates it, waits until its ``Succeeded`` or ``Failed`` condition (or the
timeout), and returns the GPUs and global batch Bellows last gave it (its journal annotation
``bellows.io/allocation``) and its JCT (submission to ``status.completionTime``). A TrainJob
that Bellows resizes is re-created under the same name: it is followed by name across its
copies, and its JCT counts from the first one's creation.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.inputs import SpecError, check_name
from bellows.kube import keys
from bellows.kube.kinds import parse_time

__all__ = ["KINDS", "JobOutcome", "job_manifest", "run_job"]

# kind -> (group, version, plural)
KINDS: dict[str, tuple[str, str, str]] = {
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
}
_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_VALID_NAME = (
    "a DNS-1123 label: up to 63 lowercase letters, digits and '-', alphanumeric at both ends"
)
BATCH_ENV = "GLOBAL_BATCH_SIZE"
LOCAL_BATCH_ENV = "LOCAL_BATCH_SIZE"


@dataclass(frozen=True)
class JobOutcome:
    """How the job ended: ``phase`` is ``Succeeded`` or ``Failed``; ``gpus``/``batch`` are
    Bellows' last allocation (0 when it never started the job); ``jct_s`` from submission
    (the first object's creation: a resized TrainJob is a copy) to completion
    (``status.completionTime``, else the time of the final condition; 0.0 when neither is
    known)."""

    name: str
    phase: str
    gpus: int
    batch: int
    jct_s: float


def _kind(kind: str) -> tuple[str, str, str]:
    if kind not in KINDS:
        raise SpecError("kind", kind, f"one of {', '.join(sorted(KINDS))}")
    return KINDS[kind]


def _check_annotation(key: str) -> None:
    """Refuse a ``bellows.io/`` key that is not an owner setting: Bellows' own journal
    (``bellows.io/phase``, ``target``, ``allocation``…) is the controller's to write, and a
    pipeline that set it would submit a job claiming decisions nobody made."""
    if not isinstance(key, str) or not key.startswith(keys.PREFIX) or key in keys.OWNER_KEYS:
        return
    what = (
        "Bellows' own journal, written by the controller"
        if key in keys.JOURNAL_KEYS
        else ("not a Bellows setting")
    )
    raise SpecError(
        f"annotations[{key}]",
        key,
        f"an owner setting ({what}); the bellows.io/ keys a pipeline may set are "
        + ", ".join(sorted(keys.OWNER_KEYS)),
    )


def job_manifest(
    *,
    kind: str,
    name: str,
    namespace: str,
    image: str,
    command: Sequence[str],
    gpus: int,
    batch: int,
    min_batch: int,
    max_batch: int,
    max_gpus: int,
    max_batch_per_gpu: int | None = None,
    work: int | None = None,
    profile_configmap: str | None = None,
    runtime: str = "torch-distributed",
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A suspended ``kind`` (PyTorchJob: one GPU per Worker; TrainJob: one GPU per node on
    ``runtime``, a ClusterTrainingRuntime) asking ``gpus`` GPUs and global ``batch``, with
    Bellows' owner annotations; ``annotations`` adds others (e.g. ``bellows.io/profile``),
    but never a ``bellows.io/`` key that is not an owner setting (:data:`keys.JOURNAL_KEYS`:
    Bellows' journal is the controller's). The annotations are checked as the controller
    parses them (:class:`SpecError` naming the key), so that a bad step fails before it
    submits anything."""
    group, version, _ = _kind(kind)
    check_name("name", name, _DNS1123, _VALID_NAME)
    check_name("namespace", namespace, _DNS1123, _VALID_NAME)
    if not command:
        raise SpecError("command", list(command), "a non-empty list of strings")
    owner: dict[str, str] = {
        keys.MIN_BATCH: str(min_batch),
        keys.MAX_BATCH: str(max_batch),
        keys.MAX_GPUS: str(max_gpus),
        keys.BATCH_ENV: BATCH_ENV,
        keys.LOCAL_BATCH_ENV: LOCAL_BATCH_ENV,
    }
    if max_batch_per_gpu is not None:
        owner[keys.MAX_BATCH_PER_GPU] = str(max_batch_per_gpu)
    if work is not None:
        owner[keys.WORK] = str(work)
    if profile_configmap is not None:
        owner[keys.PROFILE_CONFIGMAP] = profile_configmap
    for key in annotations or {}:
        _check_annotation(key)
    owner.update(annotations or {})
    keys.parse_settings(owner)
    if not 1 <= gpus <= max_gpus:
        raise SpecError("gpus", gpus, f"1 <= gpus <= max_gpus ({max_gpus})")
    if not (min_batch <= batch <= max_batch and batch % gpus == 0):
        raise SpecError(
            "batch", batch, f"{min_batch} <= batch <= {max_batch}, a multiple of gpus ({gpus})"
        )
    env = [
        {"name": BATCH_ENV, "value": str(batch)},
        {"name": LOCAL_BATCH_ENV, "value": str(batch // gpus)},
    ]
    limits = {"nvidia.com/gpu": 1}
    spec: dict[str, Any]
    if kind == "TrainJob":
        spec = {
            "suspend": True,
            "runtimeRef": {"name": runtime},
            "trainer": {
                "numNodes": gpus,
                "image": image,
                "command": list(command),
                "env": env,
                "resourcesPerNode": {"limits": limits},
            },
        }
    else:
        container = {
            "name": "pytorch",
            "image": image,
            "command": list(command),
            "env": env,
            "resources": {"limits": limits},
        }
        spec = {
            "runPolicy": {"suspend": True},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": gpus,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            },
        }
    return {
        "apiVersion": f"{group}/{version}",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "annotations": owner},
        "spec": spec,
    }


def _finished(obj: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(phase, when)`` once the job succeeded (PyTorchJob ``Succeeded``, TrainJob
    ``Complete``) or failed; ``when`` its ``completionTime``, else the condition's
    ``lastTransitionTime`` (a TrainJob's status has no ``completionTime``)."""
    status = obj.get("status") or {}
    for found in status.get("conditions") or []:
        if (
            found.get("type") in ("Succeeded", "Failed", "Complete")
            and found.get("status") == "True"
        ):
            phase = "Failed" if found["type"] == "Failed" else "Succeeded"
            return phase, status.get("completionTime") or found.get("lastTransitionTime")
    return None


def _outcome(obj: Mapping[str, Any], phase: str, when: Any, submitted: Any) -> JobOutcome:
    """The outcome of ``obj``, its JCT from ``submitted`` (the creation of the job this step
    created: a TrainJob that Bellows resized is a copy, created later under the same name)."""
    meta = obj["metadata"]
    pair = keys.parse_pair(keys.ALLOCATION, (meta.get("annotations") or {}).get(keys.ALLOCATION))
    gpus, batch = pair or (0, 0)
    created = parse_time(submitted) or parse_time(meta.get("creationTimestamp"))
    done = parse_time(when)
    jct = (done - created).total_seconds() if created and done else 0.0
    return JobOutcome(meta["name"], phase, gpus, batch, max(jct, 0.0))


def run_job(
    api_client: k8s.ApiClient,
    manifest: Mapping[str, Any],
    *,
    timeout_s: float,
    poll_s: float = 5.0,
    gone_s: float = 300.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> JobOutcome:
    """Create ``manifest`` and wait (polling every ``poll_s``) until it succeeds or fails.

    Raises :class:`TimeoutError` (naming the job) when neither happens within ``timeout_s``;
    the job is left as it is, for its owner to inspect or delete. A TrainJob that Bellows
    resizes is deleted and created again under the same name (``bellows.kube.recreation``):
    the job may be missing between two polls, and only one missing for ``gone_s`` on end
    (deleted by someone, not re-created) raises :class:`LookupError`."""
    if not timeout_s > 0:
        raise SpecError("timeout_s", timeout_s, "a number of seconds > 0")
    group, version, plural = _kind(str(manifest.get("kind")))
    meta = manifest["metadata"]
    name, namespace = meta["name"], meta["namespace"]
    custom = k8s.CustomObjectsApi(api_client)
    created = custom.create_namespaced_custom_object(
        group, version, namespace, plural, dict(manifest)
    )
    submitted = ((created or {}).get("metadata") or {}).get("creationTimestamp")
    deadline = clock() + timeout_s
    missing_since: float | None = None
    what = f"{manifest['kind']} {namespace}/{name}"
    while True:
        try:
            obj = custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise
            missing_since = clock() if missing_since is None else missing_since
            if clock() - missing_since >= gone_s:
                raise LookupError(f"{what} was deleted (gone for {gone_s} s)") from err
        else:
            missing_since = None
            finished = _finished(obj)
            if finished is not None:
                return _outcome(obj, *finished, submitted)
        left = deadline - clock()
        if left <= 0:
            raise TimeoutError(f"{what} not finished in {timeout_s} s")
        sleep(min(poll_s, left))
