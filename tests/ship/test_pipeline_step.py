"""The compiled Pipelines step installs nothing and runs from the image as it is (issue 38, item 2).

``examples/pipelines`` compiled by the real KFP SDK has no ``pip install`` anywhere (KFP
adds one for ``kfp`` itself unless ``install_kfp_package=False``). The training step's own
command, as the YAML has it (``sh -ec``, KFP's executor, the component's source), then runs
to the job's outcome with ``PIP_NO_INDEX=1`` against an emulated cluster, the test playing
the controller that starts the job.

The environment: the Dockerfile's image is ``pip install '.[pipelines]'`` into a venv, then
that venv alone. There is no Docker here, and no package index to build a fresh venv from,
so the step runs with this checkout's venv, which holds the same distributions plus the dev
extras, restricted to the image's: a ``sitecustomize`` (:func:`image_only`) makes every
module of a distribution outside the requirement closure of ``bellows[pipelines]`` (what
that ``pip install`` brings) unimportable, as it is in the image. A module the step needs
and the image lacks fails the step here as it would there; optional imports (the
``kubernetes`` client tries ``kubernetes_validate``) take their fallback, as there.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from kfp import compiler
from kubernetes import client as k8s
from packaging.requirements import Requirement

from bellows.autoscaler.decisions import Start
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, KubeApi, PyTorchJobKind
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pipelines" / "elastic_training.py"
STEP = "elastic-training-job"
LIMIT_S = 60.0


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("pipeline") / "pipeline.yaml"
    compiler.Compiler().compile(load_script(EXAMPLE).elastic_training, str(out))
    text = out.read_text()
    return {"text": text, "spec": yaml.safe_load(text)}


def test_the_compiled_pipeline_installs_nothing(compiled: dict[str, Any]) -> None:
    assert "pip install" not in compiled["text"]
    assert "ensurepip" not in compiled["text"]
    executors = compiled["spec"]["deploymentSpec"]["executors"]
    assert set(executors) == {f"exec-{STEP}", "exec-report"}
    for executor in executors.values():
        container = executor["container"]
        assert container["image"] == "bellows:0.1.0"  # the Dockerfile's, which holds kfp
        assert not any("pip" in part for part in container["command"][:2])


def _step_inputs(spec: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """The training step's parameter values as the pipeline passes them: its constants and
    the pipeline's defaults (integers as the backend sends them), then ``overrides``."""
    defaults = {
        name: p["defaultValue"]
        for name, p in spec["root"]["inputDefinitions"]["parameters"].items()
    }
    values: dict[str, Any] = {}
    for name, given in spec["root"]["dag"]["tasks"][STEP]["inputs"]["parameters"].items():
        if "runtimeValue" in given:
            values[name] = given["runtimeValue"]["constant"]
        else:
            values[name] = defaults[given["componentInputParameter"]]
    # the YAML holds every number as a double (256.0); the backend passes them as JSON
    # numbers, which Go's protojson writes whole (256): the executor then reads an int
    types = spec["components"][f"comp-{STEP}"]["inputDefinitions"]["parameters"]
    for name, value in values.items():
        if types[name]["parameterType"] == "NUMBER_INTEGER":
            values[name] = int(value)
    return {**values, **overrides}


class _Cluster:
    """The emulated cluster on a loop of its own, in a thread (the step runs as a process)."""

    def __init__(self, crds: list[Path], kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig
        self.loop: asyncio.AbstractEventLoop | None = None
        self.api: KubeApi | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(crds),), daemon=True)

    async def _main(self, crds: list[Path]) -> None:
        async with EmulatedCluster(crds=crds, compression=4.0, restart_s=1.0) as cluster:
            cluster.write_kubeconfig(self.kubeconfig)
            self.loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self.api = KubeApi(cluster.api_client())
            self._ready.set()
            await self._stop.wait()

    def __enter__(self) -> _Cluster:
        self._thread.start()
        assert self._ready.wait(LIMIT_S), "the emulated cluster did not start"
        return self

    def __exit__(self, *_: object) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(LIMIT_S)

    def call(self, coro: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(LIMIT_S)


@pytest.fixture
def cluster(shared_data: Path, tmp_path: Path) -> Iterator[_Cluster]:
    with _Cluster(sorted((shared_data / "crds").glob("*.yaml")), tmp_path / "kubeconfig") as c:
        yield c


def _start_when_suspended(cluster: _Cluster, name: str) -> None:
    """What the controller does once it sizes the job: 4 GPUs, global batch 256."""

    async def start() -> None:
        api, kind = cluster.api, PyTorchJobKind()
        assert api is not None
        async with asyncio.timeout(LIMIT_S):
            while True:  # until the step has submitted it and the operator suspended it
                job = await api.get_job(kind, "default", name)
                if job is not None and any(
                    c["type"] == "Suspended" and c["status"] == "True"
                    for c in (job.get("status") or {}).get("conditions", [])
                ):
                    break
                await asyncio.sleep(0.05)
            await Actuator(api).apply(Start(f"pytorchjob/default/{name}", 4, 256))

    cluster.call(start())


def test_the_step_runs_from_its_command_without_a_package_index(
    compiled: dict[str, Any], cluster: _Cluster, tmp_path: Path, image_only: dict[str, str]
) -> None:
    spec = compiled["spec"]
    container = spec["deploymentSpec"]["executors"][f"exec-{STEP}"]["container"]
    inputs = _step_inputs(
        spec, namespace="default", work=6000, timeout_seconds=LIMIT_S, poll_seconds=0.1
    )
    outputs = tmp_path / "outputs"
    executor_input = {
        "inputs": {"parameterValues": inputs},
        "outputs": {
            "parameters": {
                name: {"outputFile": str(outputs / name)}
                for name in ("gpus", "batch", "jct_seconds", "phase")
            },
            "outputFile": str(outputs / "executor_output.json"),
        },
    }
    args = [a.replace("{{$}}", json.dumps(executor_input)) for a in container["args"]]
    configmap = next(  # the profile the example names: the manifests' ConfigMap
        doc
        for doc in yaml.safe_load_all((REPO / "manifests/examples/pytorchjob-resnet50.yaml").open())
        if doc["kind"] == "ConfigMap"
    )
    assert cluster.api is not None
    core = k8s.CoreV1Api(cluster.api.api_client)
    cluster.call(asyncio.to_thread(core.create_namespaced_config_map, "default", configmap))
    env = {
        **os.environ,
        **image_only,  # the image's distributions only
        "PIP_NO_INDEX": "1",  # a pip install would fail: there is no index
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    step = subprocess.Popen(
        [*container["command"], *args], env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        _start_when_suspended(cluster, inputs["name"])
        shown, _ = step.communicate(timeout=LIMIT_S * 2)
    except TimeoutError:
        step.kill()
        raise AssertionError(
            f"the job was never suspended: {step.communicate()[0][-3000:]}"
        ) from None
    finally:
        step.kill()
    assert step.returncode == 0, shown[-3000:]
    result = json.loads((outputs / "executor_output.json").read_text())["parameterValues"]
    assert (result["gpus"], result["batch"], result["phase"]) == (4, 256, "Succeeded")
    assert result["jct_seconds"] >= 1


def _closure(root: str, extras: set[str]) -> set[str]:
    """``root`` and the distributions ``pip install 'root[extras]'`` brings (normalized)."""
    seen: set[str] = set()
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        key = _key(name)
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python: not installed here
        for line in requires:
            req = Requirement(line)
            environments = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in environments):
                todo.append((req.name, set(req.extras)))
    return seen


_BLOCKER = """
import importlib.abc, json, os, sys

_OUTSIDE = frozenset(json.loads(os.environ["BELLOWS_OUTSIDE_IMAGE"]))


class _NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _OUTSIDE:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the image)", name=name)
        return None


sys.meta_path.insert(0, _NotInTheImage())
"""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def image_only(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment variables under which only the image's distributions import."""
    image = _closure("bellows", {"pipelines"})
    outside = sorted(
        module
        for module, owners in metadata.packages_distributions().items()
        if module != "bellows" and not any(_key(d) in image for d in owners)
    )
    folder = tmp_path_factory.mktemp("image-only")
    (folder / "sitecustomize.py").write_text(_BLOCKER)
    path = os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, "BELLOWS_OUTSIDE_IMAGE": json.dumps(outside)}


def test_the_image_only_environment_hides_the_rest(image_only: dict[str, str]) -> None:
    program = (
        "import importlib.util\n"
        "for name in ('pytest', 'torch', 'kubernetes_validate'):\n"  # dev, train extras
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} imported')\n"
        "import kfp.dsl.executor_main, kubernetes.config, bellows.kube.pipeline_job\n"
    )
    subprocess.run(
        [sys.executable, "-c", program], env={**os.environ, **image_only}, check=True, timeout=60
    )
