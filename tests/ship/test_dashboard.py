"""The Grafana dashboard the chart ships: every metric it queries is one the controller or the
bridge exports (read from the real metrics registry), and the chart delivers it to Grafana's
sidecar as a labelled ConfigMap only when ``grafana.dashboards.enabled``."""

from __future__ import annotations

import json
import re
from pathlib import Path

from bellows.service.metrics import Metrics
from tests.ship.chart import by_kind, render

DASHBOARDS = sorted((Path(__file__).parents[2] / "charts/bellows/dashboards").glob("*.json"))
_METRIC = re.compile(r"\bbellows_[a-z0-9_]+")
# what each family type exposes (prometheus_client's exposition names)
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}


def exported() -> set[str]:
    """The series names of every metric the controller's and the bridge's registry holds."""
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def _expressions(panels: list[dict]) -> list[str]:
    out = []
    for panel in panels:
        out += [t["expr"] for t in panel.get("targets", [])]
        out += _expressions(panel.get("panels", []))
    return out


def test_every_queried_metric_is_exported() -> None:
    assert DASHBOARDS
    known = exported()
    for path in DASHBOARDS:
        board = json.loads(path.read_text())
        queried = set()
        for expr in _expressions(board["panels"]):
            queried.update(_METRIC.findall(expr))
        variables = json.dumps(board["templating"])
        queried.update(_METRIC.findall(variables))
        assert queried, path
        assert queried <= known, f"{path.name} queries {sorted(queried - known)}"


def test_the_dashboard_has_the_panels_admins_look_for() -> None:
    board = json.loads(DASHBOARDS[0].read_text())
    text = json.dumps(board)
    for metric in (
        "bellows_gpus_allocated", "bellows_gpus_capacity", "bellows_queue_length",
        "bellows_decisions_total", "bellows_rescales_total", "bellows_optimizer_seconds_bucket",
        "bellows_event_lag_seconds_bucket", "bellows_jobs_invalid",
        "bellows_events_dead_lettered_total", "bellows_progress_rejected_total",
    ):  # fmt: skip
        assert metric in text, metric
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    assert board["uid"]


def test_the_chart_ships_the_dashboards_to_grafanas_sidecar_when_asked() -> None:
    assert not [
        c for c in by_kind(render(), "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]
    ]
    objs = render({"grafana": {"dashboards": {"enabled": True}}})
    boards = [
        c for c in by_kind(objs, "ConfigMap") if "grafana_dashboard" in c["metadata"]["labels"]
    ]
    assert len(boards) == len(DASHBOARDS)
    for board, path in zip(
        sorted(boards, key=lambda c: c["metadata"]["name"]), DASHBOARDS, strict=True
    ):
        assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(board["data"][path.name]) == json.loads(path.read_text())
    custom = render(
        {"grafana": {"dashboards": {"enabled": True, "label": "dash", "labelValue": "yes",
                                    "namespace": "monitoring"}}}
    )  # fmt: skip
    (board,) = [c for c in by_kind(custom, "ConfigMap") if "dash" in c["metadata"]["labels"]]
    assert board["metadata"]["labels"]["dash"] == "yes"
    assert board["metadata"]["namespace"] == "monitoring"
