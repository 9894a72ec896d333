"""Real ``kubectl`` against the emulated API server (issue 38, item 1).

Each kind Bellows touches (PyTorchJob, MPIJob, TrainJob, Kueue Workload, ConfigMap, Event,
Node, Pod, Lease) is got (table and ``-o json``), described, watched, patched with a merge
patch and deleted by the kubectl installed on the machine; ``kubectl bellows status`` runs
through kubectl's own plugin lookup (the package's ``kubectl-bellows`` console script on
``PATH``). The cluster runs on a loop of its own in a thread; kubectl runs as a subprocess
with a fresh discovery cache, every wait bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from bellows.emulator import EmulatedCluster
from bellows.emulator.crds import kueue_crd_paths, trainer_crd_paths
from bellows.emulator.resources import builtin_resources
from bellows.emulator.tables import human_duration, jsonpath, table

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "manifests" / "examples"
KUBECTL = shutil.which("kubectl")
LIMIT_S = 30.0
needs_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl is not installed (on PATH): these tests run the real one"
)


class Twin:
    """An emulated cluster served from a thread, and kubectl pointed at it."""

    def __init__(self, crds: list[Path], folder: Path) -> None:
        self.kubeconfig = folder / "kubeconfig"
        self.cache = folder / "kube-cache"
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cluster: EmulatedCluster | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(crds,), daemon=True)

    def _run(self, crds: list[Path]) -> None:
        async def main() -> None:
            async with EmulatedCluster(
                crds=crds, kueue=True, trainer=True, gpu_nodes={"node-a": 4}
            ) as cluster:
                self.cluster, self._loop, self._stop = cluster, asyncio.get_running_loop(), None
                self._stop = asyncio.Event()
                cluster.write_kubeconfig(self.kubeconfig)
                cluster.add_cluster_queue("gpus", 8)
                cluster.add_local_queue("team", "gpus")
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(main())
        except BaseException as err:  # surfaced by start()
            self._error = err
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(LIMIT_S), "the emulated cluster did not start"
        if self._error is not None:
            raise self._error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(LIMIT_S)

    def env(self) -> dict[str, str]:
        # the venv's bin first: kubectl finds the kubectl-bellows plugin there
        bin_dir = str(Path(sys.executable).parent)
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}  # fmt: skip

    def args(self, *args: str, plugin: bool = False) -> list[str]:
        """kubectl's command line (a plugin's takes no kubectl flags before its name)."""
        assert KUBECTL is not None
        flags = [] if plugin else [f"--cache-dir={self.cache}", "--request-timeout=20s"]
        return [KUBECTL, *flags, *args]

    def run(
        self, *args: str, stdin: str | None = None, ok: bool = True, plugin: bool = False
    ) -> str:
        done = subprocess.run(
            self.args(*args, plugin=plugin), input=stdin, env=self.env(),
            capture_output=True, text=True, timeout=LIMIT_S, check=False,
        )  # fmt: skip
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
            return done.stdout
        assert done.returncode != 0, f"kubectl {' '.join(args)} succeeded: {done.stdout}"
        return done.stderr

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json"))


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Iterator[Twin]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed (on PATH): these tests run the real one")
    folder = shared_data / "crds"
    crds = [*sorted(folder.glob("*.yaml")), *kueue_crd_paths(folder), *trainer_crd_paths(folder)]
    running = Twin(crds, tmp_path_factory.mktemp("kubectl"))
    running.start()
    yield running
    running.stop()


def _examples() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "busybox"}]},
    }


def _event(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "default"},
        "involvedObject": {"kind": "PyTorchJob", "name": "resnet50-imagenet",
                           "namespace": "default", "apiVersion": "kubeflow.org/v1"},
        "reason": "Resized", "message": "2 -> 4 GPUs", "type": "Normal",
    }  # fmt: skip


def _lease(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"holderIdentity": "bellows-0", "leaseDurationSeconds": 15},
    }


def _workload(name: str) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"queueName": "nowhere", "podSets": [
            {"name": "main", "count": 1, "template": template}]},
    }  # fmt: skip


# (resource as kubectl names it, object name, manifest to create, or None: there already)
KINDS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("pytorchjobs", "resnet50-imagenet", _examples()["PyTorchJob"]),
    ("mpijobs", "cifar10-horovod", _examples()["MPIJob"]),
    ("trainjobs", "resnet50-trainjob", _examples()["TrainJob"]),
    ("workloads.kueue.x-k8s.io", "standalone", _workload("standalone")),
    ("configmaps", "resnet50-profile", _examples()["ConfigMap"]),
    ("events", "resized.1", _event("resized.1")),
    ("pods", "worker-0", _pod("worker-0")),
    ("leases", "bellows-leader", _lease("bellows-leader")),
    ("nodes", "node-a", None),
]


@pytest.fixture(scope="module")
def created(twin: Twin) -> Twin:
    # --validate=false: client-side validation downloads OpenAPI schemas, not emulated
    for _, _, manifest in KINDS:
        if manifest is not None:
            twin.run("create", "--validate=false", "-f", "-", stdin=json.dumps(manifest))
    return twin


@needs_kubectl
def test_discovery_lists_every_kind_with_its_names(twin: Twin) -> None:
    lines = twin.run("api-resources", "--no-headers").splitlines()
    rows = {line.split()[0]: line.split() for line in lines}
    for plural in ("pytorchjobs", "mpijobs", "trainjobs", "workloads", "configmaps", "events",
                   "nodes", "pods", "leases", "localqueues", "clusterqueues"):  # fmt: skip
        assert plural in rows, plural
    assert rows["workloads"][1] == "kwl,kueueworkload,kueueworkloads"  # the CRD's shortNames
    assert rows["nodes"][1:] == ["no", "v1", "false", "Node"]
    version = json.loads(twin.run("version", "-o", "json"))
    assert version["serverVersion"]["major"] == "1"


@needs_kubectl
@pytest.mark.parametrize(("resource", "name", "manifest"), KINDS, ids=[k[0] for k in KINDS])
def test_get_describe_patch_of_each_kind(
    created: Twin, resource: str, name: str, manifest: dict[str, Any] | None
) -> None:
    ns = [] if resource == "nodes" else ["-n", "default"]
    header, *rows = created.run("get", resource, name, *ns).splitlines()
    assert header.split()[0] == "NAME"
    assert rows[0].split()[0] == name
    obj = created.json("get", resource, name, *ns)
    assert obj["metadata"]["name"] == name
    assert manifest is None or obj["kind"] == manifest["kind"]
    assert name in created.run("describe", resource, name, *ns)
    created.run("patch", resource, name, *ns, "--type", "merge",
                "-p", json.dumps({"metadata": {"labels": {"team": "vision"}}}))  # fmt: skip
    labels = created.json("get", resource, name, *ns)["metadata"]["labels"]
    assert labels["team"] == "vision"


@needs_kubectl
def test_get_all_namespaces_prints_the_crd_columns(created: Twin) -> None:
    header, *rows = created.run("get", "pytorchjobs", "-A").splitlines()
    assert header.split() == ["NAMESPACE", "NAME", "STATE", "AGE"]
    assert rows[0].split()[:3] == ["default", "resnet50-imagenet", "Suspended"]
    header, *_ = created.run("get", "kwl", "-A").splitlines()
    assert header.split()[:5] == ["NAMESPACE", "NAME", "QUEUE", "RESERVED", "IN"]


@needs_kubectl
def test_kubectl_bellows_status_through_the_plugin_lookup(created: Twin) -> None:
    assert "kubectl-bellows" in created.run("plugin", "list")
    out = created.run("bellows", "status", "-A", plugin=True)
    assert "cluster: 4 GPUs" in out  # node-a's
    assert "default/resnet50-imagenet" in out
    assert "default/resnet50-trainjob" in out
    # (it runs before the watch tests delete them)


class _Lines:
    """A process's standard output, line by line, read on a thread (waits have deadlines)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str] = queue.Queue()
        self._thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, text: str) -> str:
        deadline = datetime.now(UTC) + timedelta(seconds=LIMIT_S)
        while (left := (deadline - datetime.now(UTC)).total_seconds()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {LIMIT_S} s")


@needs_kubectl
@pytest.mark.parametrize(("resource", "name", "manifest"), KINDS, ids=[k[0] for k in KINDS])
def test_watch_then_delete_each_kind(
    created: Twin, resource: str, name: str, manifest: dict[str, Any] | None
) -> None:
    ns = [] if resource == "nodes" else ["-n", "default"]
    args = created.args("get", resource, name, *ns, "--watch", "--output-watch-events",
                        "-o", "custom-columns=EVENT:.type,NAME:.object.metadata.name,"
                        "MARK:.object.metadata.labels.mark")  # fmt: skip
    with subprocess.Popen(args, env=created.env(), stdout=subprocess.PIPE, text=True) as watch:
        try:
            lines = _Lines(watch)
            assert lines.until(name).split()[0] == "ADDED"
            created.run("patch", resource, name, *ns, "--type", "merge",
                        "-p", json.dumps({"metadata": {"labels": {"mark": "m1"}}}))  # fmt: skip
            assert lines.until("m1").split()[:2] == ["MODIFIED", name]
            created.run("delete", resource, name, *ns, "--timeout=20s")
            assert lines.until("DELETED").split()[1] == name
        finally:
            watch.kill()
    assert "NotFound" in created.run("get", resource, name, *ns, ok=False)


def test_printer_column_jsonpaths_as_the_crds_write_them() -> None:
    conditions = [{"type": "Created", "status": "True"}, {"type": "Admitted", "status": "False"}]
    obj = {"status": {"conditions": conditions}}
    assert jsonpath(".status.conditions[-1:].type", obj) == ["Admitted"]
    assert jsonpath(".status.conditions[?(@.type=='Admitted')].status", obj) == ["False"]
    assert jsonpath(".status.conditions[0].type", obj) == ["Created"]
    assert jsonpath(".spec.missing", obj) == []
    assert [human_duration(s) for s in (5, 330, 3 * 3600 + 60, 50 * 3600, 400 * 86400)] == [
        "5s", "5m30s", "3h1m", "2d2h", "400d"]  # fmt: skip


def test_a_table_has_name_then_the_columns_and_the_metadata() -> None:
    [nodes] = [r for r in builtin_resources() if r.plural == "nodes"]
    stamp = "2026-01-01T00:00:00Z"
    node = {"metadata": {"name": "a", "creationTimestamp": stamp},
            "spec": {"unschedulable": True},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}  # fmt: skip
    now = datetime(2026, 1, 1, 0, 2, 5, tzinfo=UTC)
    out = table(nodes, [node], {"resourceVersion": "7"}, now=now)
    assert [c["name"] for c in out["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert out["rows"][0]["cells"] == ["a", "Ready,SchedulingDisabled", "2m5s"]
    assert out["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
