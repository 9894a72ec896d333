"""``bellows status`` against the emulated cluster: the rows come from what the actuator
wrote on the jobs (journal, reason, restarts) and the Events Bellows recorded."""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client as k8s

from bellows.autoscaler.decisions import Keep, Rescale, Start
from bellows.cli.main import main
from bellows.cli.status import human_duration, kubectl_bellows
from bellows.kube import Actuator, PyTorchJobKind, keys
from bellows.kube.statuses import State, read_status
from bellows.scaling import default_cluster
from tests.exec_plugin import exec_user

from .test_actuator import MPI, TORCH, submit

CLUSTER = default_cluster()


async def _create(api, body):
    custom = k8s.CustomObjectsApi(api.api_client)
    await asyncio.to_thread(
        custom.create_namespaced_custom_object,
        "kubeflow.org", "v2beta1", body["metadata"].get("namespace", "default"), "mpijobs", body,
    )  # fmt: skip


def _mpijob(examples, name, **annotations):
    body = copy.deepcopy(examples["MPIJob"])
    body["metadata"]["name"] = name
    body["metadata"]["annotations"] = {**body["metadata"]["annotations"], **annotations}
    return body


async def _cli(*args):
    return await asyncio.to_thread(CliRunner().invoke, main, ["status", *args])


def test_status_shows_each_decision_and_its_reason(on_cluster, examples, tmp_path):  # noqa: PLR0915 - one cluster, every row and format
    async def scenario(cluster, api):  # noqa: PLR0915
        await submit(api, examples)  # the PyTorchJob, its profile in a ConfigMap
        await submit(api, examples, kind="MPIJob")
        bad = _mpijob(examples, "bad-gpus", **{keys.MAX_GPUS: "zero"})
        await _create(api, bad)
        multikueue = _mpijob(examples, "copy")
        multikueue["spec"]["runPolicy"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        await _create(api, multikueue)
        plain = _mpijob(examples, "not-opted-in")
        plain["metadata"]["annotations"] = {}
        await _create(api, plain)

        act = Actuator(api)
        started = await act.apply(Start(TORCH, 2, 256, reason="started into free GPUs"))
        assert started.result == "started"
        why = "scaled 2→4 into free GPUs: it finishes sooner, its restart included"
        assert (await act.apply(Rescale(TORCH, 2, 256, 4, 512, reason=why))).result == "rescaled"
        assert (await act.hold(MPI)).result == "queued"
        invalid = await act.report_problem("mpijob/default/bad-gpus", "bellows.io/max-gpus: x")
        assert invalid.result == "invalid"

        rows = {r.name: r for r in await read_status(api, now=datetime.now(UTC), cluster=CLUSTER)}
        assert set(rows) == {"resnet50-imagenet", "cifar10-horovod", "bad-gpus", "copy"}
        torch = rows["resnet50-imagenet"]
        assert (torch.kind, torch.state, torch.gpus, torch.target, torch.batch) == (
            "PyTorchJob", State.RUNNING, 4, 4, 512,
        )  # fmt: skip
        assert torch.reason == why
        assert torch.restarts == 1
        assert torch.waited_s is not None
        assert torch.waited_s >= 0
        assert torch.predicted is not None  # from the ConfigMap's profile, read once
        assert torch.predicted > 0
        assert torch.learned is None  # no bellows.io/fit yet
        assert torch.event is not None
        assert torch.event.startswith("Rescaled: rescaled on 4 GPUs with global batch 512: ")
        mpi = rows["cifar10-horovod"]
        assert (mpi.state, mpi.gpus, mpi.phase) == (State.WAITING, 0, "queued")
        assert mpi.reason == "queued by Bellows until it is started"
        assert rows["bad-gpus"].state is State.INVALID
        assert rows["bad-gpus"].reason == "invalid: bellows.io/max-gpus: x"
        assert rows["copy"].state is State.SKIPPED
        assert "managedBy=kueue.x-k8s.io/multikueue" in rows["copy"].reason

        # a round kept the job: the reason says so once, with an Event
        keep = Keep(TORCH, 4, 512, 8, "kept on 4 GPUs: 8 would run it faster but not pay")
        await act.note_kept(keep)
        await act.note_kept(keep)  # the same again: nothing written
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        assert obj["metadata"]["annotations"][keys.REASON] == keep.reason
        core = k8s.CoreV1Api(api.api_client)
        listed = await asyncio.to_thread(core.list_namespaced_event, "default")
        assert [e.reason for e in listed.items].count("Kept") == 1
        # a note for an allocation the job no longer has is not written
        stale = Keep(TORCH, 2, 256, 8, "stale")
        assert (await act.note_kept(stale)).detail == "stale"
        obj = await api.get_job(PyTorchJobKind(), "default", "resnet50-imagenet")
        assert obj["metadata"]["annotations"][keys.REASON] == keep.reason

        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        shown = await _cli("--kubeconfig", config)
        assert shown.exit_code == 0, shown.output
        lines = shown.output.splitlines()
        assert lines[0].startswith("cluster: ")
        assert "4 in use" in lines[0]
        assert "jobs: 1 waiting, 1 running, 0 halted, 1 invalid, 1 skipped" in lines[0]
        assert lines[1].split()[:5] == ["KIND", "NAME", "STATE", "GPUS", "TARGET"]
        assert lines[1].endswith("REASON")
        body = {line.split()[1]: line for line in lines[2:]}
        assert body["resnet50-imagenet"].split()[:6] == [
            "PyTorchJob", "resnet50-imagenet", "running", "4", "4", "512",
        ]  # fmt: skip
        assert body["resnet50-imagenet"].endswith(keep.reason)
        assert body["bad-gpus"].endswith("invalid: bellows.io/max-gpus: x")

        as_json = json.loads((await _cli("--kubeconfig", config, "-o", "json")).output)
        assert as_json["cluster"]["inUse"] == 4
        assert {i["name"]: i["state"] for i in as_json["items"]} == {
            "resnet50-imagenet": "running",
            "cifar10-horovod": "waiting",
            "bad-gpus": "invalid",
            "copy": "skipped",
        }
        as_yaml = yaml.safe_load((await _cli("--kubeconfig", config, "-o", "yaml")).output)
        for document in (as_yaml, as_json):  # waited grows between the two calls
            for item in document["items"]:
                item.pop("waitedSeconds")
        assert as_yaml == as_json

        waiting = await _cli("--kubeconfig", config, "--state", "waiting", "--no-headers")
        assert [line.split()[1] for line in waiting.output.splitlines()] == ["cifar10-horovod"]
        mpis = await _cli("--kubeconfig", config, "-A", "--kind", "MPIJob", "--no-headers")
        assert sorted(line.split()[1] for line in mpis.output.splitlines()) == [
            "default/bad-gpus", "default/cifar10-horovod", "default/copy",
        ]  # fmt: skip
        wide = await _cli("--kubeconfig", config, "-o", "wide")
        assert "EVENT" in wide.output.splitlines()[1]
        assert "Kept: kept on 4 GPUs" in wide.output
        other = await _cli("--kubeconfig", config, "-n", "elsewhere")
        assert "No opted-in jobs found in namespace elsewhere." in other.output
        bad_kind = await _cli("--kubeconfig", config, "--kind", "tfjob")
        assert bad_kind.exit_code == 2
        assert "mpijob" in bad_kind.output
        assert "pytorchjob" in bad_kind.output

    on_cluster(scenario, limit_s=60.0)


def test_status_makes_no_read_per_job(on_cluster, examples, tmp_path):
    """Lists only: a GET of any one job would fail (and the command with it)."""

    async def scenario(cluster, api):
        for i in range(30):
            await _create(api, _mpijob(examples, f"job-{i}"))
        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        cluster.faults.inject("GET", r"/(mpijobs|pytorchjobs)/[^/]+$", 500, count=1000)
        shown = await _cli("--kubeconfig", config)
        assert shown.exit_code == 0, shown.output
        assert len(shown.output.splitlines()) == 2 + 30
        assert cluster.faults.pending == 1000

    on_cluster(scenario, limit_s=60.0)


def test_human_durations_read_as_kubectl_prints_ages():
    assert [human_duration(s) for s in (5, 119, 130, 600, 7200, 3 * 86400, 30 * 86400)] == [
        "5s", "119s", "2m10s", "10m", "120m", "3d", "30d",
    ]  # fmt: skip
    assert human_duration(None) == "-"


def test_kubectl_plugin_is_the_bellows_command(monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["kubectl-bellows", "status", "--help"])
    with pytest.raises(SystemExit) as done:
        kubectl_bellows()
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: kubectl bellows status [OPTIONS]")


def _lease(mode: str, renewed: datetime) -> dict:
    stamp = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "bellows-controller", "annotations": {keys.MODE: mode}},
        "spec": {"holderIdentity": "c-1", "leaseDurationSeconds": 15, "renewTime": stamp},
    }


def test_an_exec_credential_plugin_reads_the_same_as_a_static_token(on_cluster, examples, tmp_path):
    """A server that authenticates every request (issue 38 item 3): a kubeconfig with an
    ``exec`` credential plugin (as ``aws eks get-token`` or ``kubelogin``) reads the same
    rows and cluster line as one with the token itself, the mode from the controller's Lease
    on both; with no credentials, or a wrong token, the command fails in one line."""

    async def scenario(cluster, api):
        await submit(api, examples)
        await submit(api, examples, kind="MPIJob")
        act = Actuator(api)
        await act.apply(Start(TORCH, 2, 256, reason="started into free GPUs"))
        await act.hold(MPI)
        plain = cluster.write_kubeconfig(tmp_path / "plain", "default")
        config = yaml.safe_load(plain.read_text())
        config["users"][0]["user"], runs = exec_user(tmp_path, "t0ken-from-the-plugin")
        (tmp_path / "exec").write_text(yaml.safe_dump(config))
        lines = {}
        for name in ("plain", "exec"):
            shown = await _cli("--kubeconfig", str(tmp_path / name), "-o", "json")
            assert shown.exit_code == 0, shown.output
            document = json.loads(shown.output)
            for item in document["items"]:
                item.pop("waitedSeconds")
            lines[name] = document
        assert lines["plain"] == lines["exec"]
        assert runs.read_text().count("ran") >= 1  # the token came from the plugin
        assert lines["plain"]["cluster"]["mode"] == "unknown"  # no controller's Lease yet
        coordination = k8s.CoordinationV1Api(api.api_client)
        body = _lease("paper", datetime.now(UTC))
        await asyncio.to_thread(coordination.create_namespaced_lease, "bellows-system", body)
        for name in ("plain", "exec"):
            shown = await _cli("--kubeconfig", str(tmp_path / name))
            assert shown.output.splitlines()[0].startswith("cluster: ")
            assert ", mode paper; jobs: " in shown.output.splitlines()[0]
        for user in ({}, {"token": "wrong"}):
            config["users"][0]["user"] = user
            (tmp_path / "refused").write_text(yaml.safe_dump(config))
            refused = await _cli("--kubeconfig", str(tmp_path / "refused"))
            assert refused.exit_code == 1, refused.output
            assert (
                refused.output == "Error: cannot read the jobs: (401) Unauthorized: Unauthorized\n"
            )
        elsewhere = await _cli("--kubeconfig", str(plain), "--controller-lease", "ml/ctl")
        assert ", mode unknown; jobs: " in elsewhere.output.splitlines()[0]
        bad = await _cli("--kubeconfig", str(plain), "--controller-lease", "Bad")
        assert bad.exit_code == 2
        assert "expected NAMESPACE/NAME" in bad.output

    on_cluster(
        scenario,
        limit_s=60.0,
        namespaces=("default", "bellows-system"),
        tokens=["t0ken-from-the-plugin"],
    )


def test_a_bad_context_or_kubeconfig_is_one_line(on_cluster, tmp_path):
    async def scenario(cluster, api):
        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        shown = await _cli("--kubeconfig", config, "--context", "nowhere")
        assert shown.exit_code == 2
        assert "'nowhere' is not a context of ['bellows-emulator']" in shown.output
        (tmp_path / "empty").write_text("")
        empty = await _cli("--kubeconfig", str(tmp_path / "empty"))
        assert empty.exit_code == 1
        assert empty.output.startswith("Error: cannot read the jobs: kubeconfig ")

    on_cluster(scenario, limit_s=30.0)
