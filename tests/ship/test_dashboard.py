"""The Grafana dashboard the chart ships: every metric it queries is one the controller or the
bridge exports (read from the real metrics registry), and the chart delivers it to Grafana's
sidecar as a labelled ConfigMap only when ``grafana.dashboards.enabled``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
        # trouble (issue 38 item 6): flagged jobs, failed applies, set-aside re-creations
        "bellows_job_inconsistent", "bellows_job_stalled", "bellows_decisions_failed_total",
        "bellows_apply_failures_total", "bellows_jobs_set_aside_total",
        "bellows_journal_distrusted_total", "bellows_apply_seconds_bucket",
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


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for panel in panels:
        out += [panel, *_panels(panel.get("panels", []))]
    return out


def test_every_panel_queries_an_exported_metric() -> None:
    known = exported()
    for path in DASHBOARDS:
        for panel in _panels(json.loads(path.read_text())["panels"]):
            if panel["type"] == "row":
                continue
            exprs = [t["expr"] for t in panel.get("targets", [])]
            assert exprs, f"{path.name}: panel {panel['title']!r} has no query"
            for expr in exprs:
                named = set(_METRIC.findall(expr))
                assert named, f"{panel['title']!r}: {expr!r} names no bellows metric"
                assert named <= known, f"{panel['title']!r} queries {sorted(named - known)}"


_QUANTILE = re.compile(r"histogram_quantile\(")
_ONE_QUANTILE = re.compile(
    r"^histogram_quantile\(0\.\d+, sum by \(le\) \(rate\(bellows_[a-z_]+_bucket\{[^}]*\}"
    r"\[\d+m\]\)\)\)$"
)


def test_each_latency_quantile_is_one_quantity() -> None:
    """A quantile is read from one histogram's summed buckets; a sum of two medians is no
    median of anything, so no query adds quantiles."""
    for path in DASHBOARDS:
        for expr in _expressions(json.loads(path.read_text())["panels"]):
            if _QUANTILE.search(expr):
                assert len(_QUANTILE.findall(expr)) == 1, expr
                assert _ONE_QUANTILE.match(expr), expr


def test_panels_do_not_overlap() -> None:
    board = json.loads(DASHBOARDS[0].read_text())
    cells: dict[tuple[int, int], str] = {}
    for panel in _panels(board["panels"]):
        g = panel["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} covers {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
        assert g["x"] + g["w"] <= 24, panel["title"]
