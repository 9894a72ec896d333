"""Progress on by default (issue 37 item 3): the controller points the pods of every job it
sizes at the progress endpoint, with the batch, on the emulated cluster.

The env goes into the training containers of PyTorchJobs, MPIJobs (the launcher, whose
``mpirun`` forwards it) and TrainJobs (through their re-creation, whose record checks must let
it pass); the URL and reply prefix as optional references to the namespace's Secret (no
password in the job), the job's namespace and name as values; what the owner wrote is kept.
"""

from __future__ import annotations

from typing import Any

from bellows.autoscaler.decisions import Rescale, Start
from bellows.kube import Actuator, KubeApi, MPIJobKind, PyTorchJobKind
from bellows.kube.adapters import ALL_KINDS, TRAINJOB
from bellows.kube.progress_env import PROGRESS_ENV_NAMES, ProgressEndpoint

from .test_actuator import MPI, TORCH, submit
from .test_trainjob import JOB, NAME, crds, example, running_on  # noqa: F401
from .test_trainjob import submit as submit_trainjob

ENDPOINT = ProgressEndpoint("bellows-progress", "bellows")
SECRET_REF = {"name": "bellows-progress", "optional": True}


def _entries(env: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["name"]: {k: v for k, v in e.items() if k != "name"} for e in env}


def _pointed(env: list[dict[str, Any]], job: str) -> None:
    """``env`` points at the endpoint, once each, as job ``job`` of namespace default."""
    names = [e["name"] for e in env]
    assert all(names.count(n) == 1 for n in PROGRESS_ENV_NAMES), names
    got = _entries(env)
    assert got["BELLOWS_PROGRESS_URL"] == {
        "valueFrom": {"secretKeyRef": {**SECRET_REF, "key": "url"}}
    }
    assert got["BELLOWS_PROGRESS_INBOX"] == {
        "valueFrom": {"secretKeyRef": {**SECRET_REF, "key": "inbox"}}
    }
    assert got["BELLOWS_PROGRESS_PREFIX"] == {"value": "bellows"}
    assert got["BELLOWS_JOB_NAMESPACE"] == {"value": "default"}
    assert got["BELLOWS_JOB_NAME"] == {"value": job}


def test_a_pytorchjob_is_pointed_at_the_endpoint_once_and_its_owners_entries_kept(
    on_cluster, examples
) -> None:
    async def scenario(cluster, api: KubeApi) -> None:
        body = examples["PyTorchJob"]
        (container,) = body["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"][
            "containers"
        ]
        owner = {"name": "BELLOWS_PROGRESS_PREFIX", "value": "team-prefix"}
        container.setdefault("env", []).append(owner)
        await submit(api, examples)
        act = Actuator(api, progress=ENDPOINT)
        assert (await act.apply(Start(TORCH, 2, 256))).result == "started"
        assert (await act.apply(Rescale(TORCH, 2, 256, 4, 512))).result == "rescaled"
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        for rtype, spec in obj["spec"]["pytorchReplicaSpecs"].items():
            (c,) = spec["template"]["spec"]["containers"]
            env = c["env"]
            assert _entries(env)["BELLOWS_PROGRESS_PREFIX"] == {"value": "team-prefix"}, rtype
            kept = [e for e in env if e["name"] != "BELLOWS_PROGRESS_PREFIX"]
            _pointed(
                [*kept, {"name": "BELLOWS_PROGRESS_PREFIX", "value": "bellows"}],
                "resnet50-imagenet",
            )

    on_cluster(scenario, compression=20_000.0)


def test_without_an_endpoint_nothing_is_written(on_cluster, examples) -> None:
    async def scenario(cluster, api: KubeApi) -> None:
        await submit(api, examples)
        assert (await Actuator(api).apply(Start(TORCH, 2, 256))).result == "started"
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        for spec in obj["spec"]["pytorchReplicaSpecs"].values():
            (c,) = spec["template"]["spec"]["containers"]
            assert not set(PROGRESS_ENV_NAMES) & {e["name"] for e in c.get("env") or []}

    on_cluster(scenario, compression=20_000.0)


def test_an_mpijob_launcher_is_pointed_at_the_endpoint(on_cluster, examples) -> None:
    async def scenario(cluster, api: KubeApi) -> None:
        await submit(api, examples, "MPIJob")
        act = Actuator(api, progress=ENDPOINT)
        assert (await act.apply(Start(MPI, 2, 256))).result == "started"
        assert (await act.apply(Rescale(MPI, 2, 256, 4, 512))).result == "rescaled"
        obj = await api.get_job(MPIJobKind(), "default", "cifar10-horovod")
        launcher = obj["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        _pointed(launcher["containers"][0]["env"], "cifar10-horovod")
        batch_job = await api.get_batch_job("default", "cifar10-horovod-launcher")
        _pointed(batch_job["spec"]["template"]["spec"]["containers"][0]["env"], "cifar10-horovod")

    on_cluster(scenario, compression=20_000.0)


def test_a_trainjob_recreated_with_the_endpoint_passes_its_record_checks(on_cluster) -> None:
    async def scenario(cluster, api: KubeApi) -> None:
        await submit_trainjob(api, example())
        act = Actuator(api, kinds=ALL_KINDS, halt_timeout_s=10, progress=ENDPOINT)
        outcome = await act.apply(Start(JOB, 3, 192))
        assert outcome.result == "started", outcome
        started = await running_on(api, cluster, 3)
        _pointed(started["spec"]["trainer"]["env"], NAME)
        outcome = await act.apply(Rescale(JOB, 3, 192, 4, 256))
        assert outcome.result == "rescaled", outcome
        again = await running_on(api, cluster, 4)
        _pointed(again["spec"]["trainer"]["env"], NAME)
        env = _entries(again["spec"]["trainer"]["env"])
        assert env["GLOBAL_BATCH_SIZE"] == {"value": "256"}
        assert await api.get_job(TRAINJOB, "default", NAME) is not None

    on_cluster(scenario, trainer=True, compression=1.0)
