"""The plain-kustomize install: generated from the chart, built by kustomize, all valid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, load_script
from tests.ship import kube_schemas
from tests.ship.chart import NAMESPACE, render

MANIFESTS = REPO / "manifests"
CREDENTIALS = "nats-auth.env"
CREDENTIALS_SCRIPT = REPO / "hack" / "quickstart-credentials.sh"
GENERATOR = REPO / "hack" / "generate_manifests.py"
KUBECTL = shutil.which("kubectl")
needs_kustomize = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with built-in kustomize) is not installed"
)


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``: the real kustomize engine built into kubectl.

    The manifests are built from a copy with throw-away NATS passwords, made by the script
    the admin guide tells users to run (the overlay's secretGenerator reads them).
    """
    assert KUBECTL is not None
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "manifests"
        shutil.copytree(MANIFESTS, copy, ignore=shutil.ignore_patterns(CREDENTIALS))
        made = subprocess.run(
            [str(CREDENTIALS_SCRIPT), str(copy / "overlays" / "quickstart" / CREDENTIALS)],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHON": sys.executable},
        )
        assert made.returncode == 0, made.stderr
        done = subprocess.run(
            [KUBECTL, "kustomize", str(copy / folder.relative_to(MANIFESTS))],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return kube_schemas.load_all([done.stdout])


def test_manifests_match_the_chart() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "hack" / "generate_manifests.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_generator_notices_a_hand_edit(tmp_path: Path) -> None:
    shutil.copytree(MANIFESTS / "base", tmp_path / "base")
    shutil.copytree(MANIFESTS / "overlays", tmp_path / "overlays")
    edited = tmp_path / "base" / "controller-deployment.yaml"
    edited.write_text(edited.read_text().replace("replicas: 2", "replicas: 5"))
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "hack" / "generate_manifests.py"),
            "--check",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    assert "replicas: 5" in done.stderr


@needs_kustomize
@pytest.mark.parametrize("folder", ["base", "overlays/quickstart"])
def test_kustomize_builds_valid_objects(folder: str) -> None:
    objs = kustomize(MANIFESTS / folder)
    assert len(objs) > 10
    for obj in objs:
        kube_schemas.validate(obj)
        if obj["kind"] not in {"Namespace", "ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]


def _keys(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


@needs_kustomize
def test_base_is_the_charts_default_install() -> None:
    base = kustomize(MANIFESTS / "base")
    chart = render()
    config_maps = [o for o in base if o["kind"] == "ConfigMap"]
    (config_map,) = config_maps
    # kustomize appends a content hash, which rolls the pods when the config changes.
    assert config_map["metadata"]["name"].startswith("bellows-config-")
    unhashed = {
        (kind, "bellows-config" if kind == "ConfigMap" else name) for kind, name in _keys(base)
    }
    assert unhashed == _keys(chart) | {("Namespace", NAMESPACE)}
    assert ("NetworkPolicy", "bellows-controller") in unhashed
    chart_config = next(o for o in chart if o["kind"] == "ConfigMap")
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == yaml.safe_load(
        chart_config["data"]["config.yaml"]
    )
    for obj in base:
        assert "helm.sh/chart" not in obj["metadata"].get("labels", {})
        if obj["kind"] == "Deployment":
            volumes = obj["spec"]["template"]["spec"]["volumes"]
            config = next(v for v in volumes if v["name"] == "config")
            assert config["configMap"]["name"] == config_map["metadata"]["name"]


def _generator() -> Any:
    """hack/generate_manifests.py as a module (its quickstart values and plain rendering)."""
    return load_script(GENERATOR)


def _unhashed(name: str) -> str:
    return name.rsplit("-", 1)[0]


@needs_kustomize
def test_quickstart_adds_nats_and_drops_what_a_laptop_cannot_honour() -> None:
    quick = kustomize(MANIFESTS / "overlays" / "quickstart")
    keys = _keys(quick)
    assert ("Deployment", "bellows-nats") in keys
    assert ("Service", "bellows-nats") in keys
    assert ("NetworkPolicy", "bellows-nats") in keys
    assert not any(kind == "PodDisruptionBudget" for kind, _ in keys)
    for obj in quick:
        if obj["kind"] == "Deployment":
            assert obj["spec"]["replicas"] == 1
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("bellows-config"):
            config = yaml.safe_load(obj["data"]["config.yaml"])
            assert config["nats"]["servers"] == [f"nats://bellows-nats.{NAMESPACE}.svc:4222"]
            assert config["controller"]["deltaSeconds"] == 60


@needs_kustomize
def test_quickstart_objects_are_the_charts_quickstart_and_refer_to_the_generated_names() -> None:
    quick = {
        (o["kind"], o["metadata"]["name"]): o
        for o in kustomize(MANIFESTS / "overlays" / "quickstart")
    }
    (secret_name,) = [name for kind, name in quick if kind == "Secret"]
    (config_name,) = [name for kind, name in quick if name.startswith("bellows-config")]
    assert _unhashed(secret_name) == "bellows-nats-auth"
    secret = quick[("Secret", secret_name)]
    assert set(secret["data"]) == {"controller-password", "bridge-password"}
    generator = _generator()
    chart = [o for objs in generator.render(generator.QUICKSTART_VALUES).values() for o in objs]
    for obj in chart:
        if obj["kind"] in {"Deployment", "NetworkPolicy"}:
            built = quick[(obj["kind"], obj["metadata"]["name"])]
            text = json.dumps(built["spec"])
            # the names kustomize made (hash suffixes) wherever the chart names them
            text = text.replace(secret_name, "bellows-nats-auth").replace(
                config_name, "bellows-config"
            )
            assert json.loads(text) == obj["spec"], obj["metadata"]["name"]


def test_namespace_enforces_the_restricted_pod_security_standard() -> None:
    (namespace,) = kube_schemas.load_files([MANIFESTS / "base" / "namespace.yaml"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
