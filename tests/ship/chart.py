"""Render the Helm chart with Helm's own engine (helm-python-sdk: the Helm Go SDK via ctypes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

from tests.conftest import REPO

CHART = REPO / "charts" / "bellows"
RELEASE = "bellows"
NAMESPACE = "bellows-system"


def render_files(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Rendered text per template file name (``deployment.yaml``), as ``helm template``."""
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return {Path(path).name: text for path, text in rendered.items()}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every Kubernetes object the chart renders with ``values``."""
    return [
        doc
        for name, text in sorted(render_files(values).items())
        if name.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def by_kind(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for obj in objs:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"no {kind}/{name} among {[_key(o) for o in objs]}")


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"
