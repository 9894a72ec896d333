"""The plain-kustomize install: generated from the chart, built by kustomize, all valid."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.ship import kube_schemas
from tests.ship.chart import NAMESPACE, render

MANIFESTS = REPO / "manifests"
KUBECTL = shutil.which("kubectl")
needs_kustomize = pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with built-in kustomize) is not installed"
)


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize folder``: the real kustomize engine built into kubectl."""
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(folder)], capture_output=True, text=True, check=False
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


@needs_kustomize
def test_quickstart_adds_nats_and_drops_what_a_laptop_cannot_honour() -> None:
    quick = kustomize(MANIFESTS / "overlays" / "quickstart")
    keys = _keys(quick)
    assert ("Deployment", "bellows-nats") in keys
    assert ("Service", "bellows-nats") in keys
    assert not any(kind == "PodDisruptionBudget" for kind, _ in keys)
    for obj in quick:
        if obj["kind"] == "Deployment":
            assert obj["spec"]["replicas"] == 1
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"].startswith("bellows-config"):
            config = yaml.safe_load(obj["data"]["config.yaml"])
            assert config["nats"]["servers"] == [f"nats://bellows-nats.{NAMESPACE}.svc:4222"]
            assert config["controller"]["deltaSeconds"] == 60


def test_namespace_enforces_the_restricted_pod_security_standard() -> None:
    (namespace,) = kube_schemas.load_files([MANIFESTS / "base" / "namespace.yaml"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
