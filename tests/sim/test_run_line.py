"""The line ``bellows simulate`` prints after a run, and the help that explains it (issue 38,
item 5): minutes carry their unit, the node-spread share is printed when jobs are placed on
nodes, and ``--help`` says in words what the shares mean."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main


def _ok(args: list[str]) -> str:
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.jsonl"
    _ok(["workload", "generate", "--pattern", "bursty", "--minutes", "60", "--categories",
         "1,2,3,4", "--gpus", "16", "--seed", "1", "--period-min", "30",
         "--out", str(path)])  # fmt: skip
    return path


@pytest.mark.parametrize("placement", ["nodes", "fewest"])
def test_the_run_line_gives_units_and_the_spread_on_nodes(
    trace: Path, tmp_path: Path, placement: str
) -> None:
    out = tmp_path / "run"
    line = _ok(["simulate", str(trace), "--gpus", "16", "--placement", placement,
                "--out", str(out), "--no-plots"])  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    avg, p99 = summary["avg_jct_min"], summary["p99_jct_min"]
    assert f"avg JCT {avg:.1f} min (p99 {p99:.1f} min)" in line
    assert re.search(r"SJS efficiency \d\.\d{3}\b", line), line
    if placement == "nodes":
        share = summary["spread_job_time_share"]
        assert f"job-time on more nodes {share:.1%}" in line
    else:
        assert "spread_job_time_share" not in summary
        assert "more nodes" not in line


def test_help_says_what_the_shares_mean() -> None:
    shown = " ".join(_ok(["simulate", "--help"]).split())  # the words, not the wrapping
    assert "idle beside waiting GPU-time left idle while some job waited for GPUs" in shown
    assert "optimizer/core share the share of the run's wall time spent inside" in shown
    early = shown[shown.index("--early-share FLOAT") :]
    assert early.split("--")[1].startswith("early-share FLOAT The paper's hybrid trigger")


def test_reproduces_run_lines_give_units(tmp_path: Path) -> None:
    out = _ok(["reproduce", "--quick", "--only", "beyond", "--out", str(tmp_path / "r.md"),
               "--figures", str(tmp_path / "f")])  # fmt: skip
    words = " ".join(out.split())  # the console wraps its lines
    runs = re.findall(r"beyond \S+ \w+: avg JCT (\S+ \S+), p99 (\S+ \S+),", words)
    assert len(runs) >= 3, words
    for avg, p99 in runs:
        assert re.fullmatch(r"\d+\.\d min", avg), avg
        assert re.fullmatch(r"\d+\.\d min", p99), p99
