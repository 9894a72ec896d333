"""The Kubeflow Pipelines v2 component ``elastic_training_job`` (the only module importing kfp).

A lightweight Python component (``@dsl.component``) whose body calls
:func:`bellows.kube.pipeline_job.run_job`; it runs on the Bellows image (``BELLOWS_IMAGE``,
built from the repository's Dockerfile, which holds ``bellows`` with the ``pipelines``
extra: the Kubernetes client and ``kfp``, whose executor runs the step), so it installs
nothing at run time (``install_kfp_package=False``, no ``packages_to_install``): the compiled
step has no ``pip install`` and needs no package index
(``tests/ship/test_pipeline_step.py``). Its pod uses
the in-cluster service account, which needs ``create``/``get`` on the job's kind
(``docs/user-guide-annotations.md``, "Pipeline authors"). Install with the ``pipelines``
extra: ``pip install 'bellows[pipelines]'``.
"""

# KFP runs the function's source alone in its pod (imports inside it) and passes its
# parameters by name; it has no keyword-only parameters.
# ruff: noqa: PLC0415, PLR0917

# No `from __future__ import annotations`: KFP reads the real types of the signature.

from typing import NamedTuple

from kfp import dsl

__all__ = ["BELLOWS_IMAGE", "elastic_training_job"]

BELLOWS_IMAGE = "bellows:0.1.0"


@dsl.component(base_image=BELLOWS_IMAGE, install_kfp_package=False)  # type: ignore[untyped-decorator]
def elastic_training_job(
    name: str,
    image: str,
    command: list[str],
    min_batch: int,
    max_batch: int,
    max_gpus: int,
    gpus: int = 1,
    batch: int = 0,
    kind: str = "PyTorchJob",
    namespace: str = "",
    max_batch_per_gpu: int = 0,
    work: int = 0,
    profile_configmap: str = "",
    annotations: dict[str, str] = {},  # noqa: B006 (KFP reads defaults from the signature)
    runtime: str = "torch-distributed",
    timeout_seconds: float = 86400.0,
    poll_seconds: float = 10.0,
    fail_on_failure: bool = True,
) -> NamedTuple("Outputs", [("gpus", int), ("batch", int), ("jct_seconds", float), ("phase", str)]):  # type: ignore[valid-type]
    """Submit a suspended ``kind`` that Bellows sizes, wait for it, return its last GPUs,
    global batch and JCT. ``batch`` 0 asks ``min_batch`` rounded up to ``gpus``;
    ``namespace`` empty is the pipeline pod's own; 0 and empty leave a setting unset."""
    import collections
    from pathlib import Path

    from kubernetes import client as k8s
    from kubernetes import config

    from bellows.kube.pipeline_job import job_manifest, run_job

    try:  # in the step's pod; elsewhere (a local run, the tests) the kubeconfig
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    own = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    space = namespace or (own.read_text().strip() if own.exists() else "default")
    asked = batch or -(-min_batch // gpus) * gpus
    manifest = job_manifest(
        kind=kind,
        name=name,
        namespace=space,
        image=image,
        command=command,
        gpus=gpus,
        batch=asked,
        min_batch=min_batch,
        max_batch=max_batch,
        max_gpus=max_gpus,
        max_batch_per_gpu=max_batch_per_gpu or None,
        work=work or None,
        profile_configmap=profile_configmap or None,
        runtime=runtime,
        annotations=annotations,
    )
    outcome = run_job(k8s.ApiClient(), manifest, timeout_s=timeout_seconds, poll_s=poll_seconds)
    if fail_on_failure and outcome.phase != "Succeeded":
        raise RuntimeError(f"{kind} {space}/{name} ended {outcome.phase}")
    outputs = collections.namedtuple("outputs", ["gpus", "batch", "jct_seconds", "phase"])
    return outputs(outcome.gpus, outcome.batch, outcome.jct_s, outcome.phase)
