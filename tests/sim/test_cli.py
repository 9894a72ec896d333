"""The documented commands: workload generate/import/validate/schema, simulate, reproduce."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main

CONTRACT = {
    "jobs_total",
    "jobs_completed",
    "jobs_dropped",
    "drop_ratio",
    "sjs_efficiency",
    "avg_jct_min",
    "completed_over_time",
    "rescales",
}


def _ok(args: list[str]) -> str:
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_generate_then_simulate_writes_summary_csv_and_plots(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    out = _ok(
        [
            "workload",
            "generate",
            "--pattern",
            "bursty",
            "--minutes",
            "60",
            "--categories",
            "1,2,3,4",
            "--gpus",
            "16",
            "--seed",
            "1",
            "--baseline-batch",
            "max",
            "--period-min",
            "30",
            "--out",
            str(trace),
        ]
    )
    assert "offered load" in out
    _ok(["workload", "validate", str(trace)])
    for policy in ("elastic", "baseline"):
        run_dir = tmp_path / policy
        out = _ok(
            [
                "simulate",
                str(trace),
                "--gpus",
                "16",
                "--policy",
                policy,
                "--queue",
                "--delta-min",
                "5",
                "--horizon-min",
                "60",
                "--out",
                str(run_dir),
            ]
        )
        assert "offered load" in out
        assert "events/s" in out
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary.keys() >= CONTRACT
        assert summary["jobs_dropped"] == 0  # queue mode
        assert (run_dir / "jobs.csv").read_text().count("\n") == summary["jobs_total"] + 1
        for name in ("completed.png", "gpus.png", "batches.png"):
            assert (run_dir / name).stat().st_size > 1000


def test_validate_reports_the_bad_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    _ok(
        [
            "workload",
            "generate",
            "--pattern",
            "high",
            "--minutes",
            "20",
            "--categories",
            "1",
            "--gpus",
            "8",
            "--seed",
            "2",
            "--out",
            str(trace),
        ]
    )
    lines = trace.read_text().splitlines()
    lines[1] = lines[1].replace('"k_max":8', '"k_max":0')
    trace.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, ["workload", "validate", str(trace)])
    assert result.exit_code != 0
    assert "line 2: k_max=0" in result.output


def test_import_itp_and_schema(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "itp.jsonl"
    text = _ok(
        ["workload", "import", "itp", str(shared_data / "itp/195job.csv"), "--out", str(out)]
    )
    assert "195 jobs" in text
    _ok(["workload", "validate", str(out)])
    assert json.loads(_ok(["workload", "schema"]))["type"] == "object"


def test_reproduce_quick_writes_the_report(tmp_path: Path, shared_data: Path) -> None:
    report = tmp_path / "reproduction.md"
    figures = tmp_path / "figures"
    out = _ok(
        [
            "reproduce",
            "--quick",
            "--only",
            "fig5a",
            "--only",
            "fig7b",
            "--only",
            "beyond",
            "--data",
            str(shared_data),
            "--out",
            str(report),
            "--figures",
            str(figures),
        ]
    )
    assert "beyond the paper" in out
    text = report.read_text()
    assert "`bellows reproduce --quick --only fig5a --only fig7b --only beyond`" in text
    assert "Fig. 5(a)" in text
    assert "Fig. 7(b)" in text
    assert "+82% jobs" in text
    assert (figures / "fig5a-completed.png").exists()
    assert (figures / "fig7b-gpus.png").exists()
    beyond = text.split("## Beyond the paper", 1)[1]
    for title in ("### 40 GPUs, 120 min bursty", "### ITP 195job", "### Pollux workload-1"):
        assert title in beyond
    rows = [line for line in beyond.splitlines() if line.startswith("| ")]
    for label in ("paper mode", "event-driven baseline", "Bellows mode"):
        assert sum(row.startswith(f"| {label} |") for row in rows) == 3
    assert "idle beside waiting" in beyond
    assert beyond.count("Bellows mode's avg JCT is") == 3
    for key in ("bursty-40-s1", "itp-195job", "pollux-workload-1-40"):
        for kind in ("jct", "usage"):
            figure = figures / f"beyond-{key}-{kind}.png"
            assert figure.stat().st_size > 1000
            assert f"(figures/{figure.name})" in beyond


def test_reproduce_only_beyond_skips_the_paper_and_needs_the_traces(tmp_path: Path) -> None:
    report = tmp_path / "r.md"
    result = CliRunner().invoke(
        main,
        ["reproduce", "--quick", "--only", "beyond", "--data", str(tmp_path / "none"),
         "--out", str(report), "--figures", str(tmp_path / "f")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert "195job.csv: not found" in result.output
    assert "--data" in result.output
    assert not report.exists()


@pytest.mark.parametrize("figure", ["gpus.png", "batches.png"])
def test_simulate_fails_cleanly_when_the_plotting_process_fails(
    tmp_path: Path, figure: str
) -> None:
    # the plots are drawn by a child process (bellows.sim.plotting), gpus.png by the child
    # itself and batches.png by its forked copy: a failure in either is the command's, with
    # its last words, and summary.json and jobs.csv are still written
    trace = tmp_path / "t.jsonl"
    _ok(["workload", "generate", "--pattern", "high", "--minutes", "10", "--categories", "1",
         "--gpus", "8", "--seed", "3", "--out", str(trace)])  # fmt: skip
    out = tmp_path / "run"
    (out / figure).mkdir(parents=True)  # a folder where a figure must go
    result = CliRunner().invoke(main, ["simulate", str(trace), "--gpus", "8", "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "drawing the plots failed" in result.output
    assert figure in result.output
    others = {"gpus.png", "batches.png", "completed.png"} - {figure}
    assert all((out / other).is_file() for other in others)  # the other drawings went on
    assert (out / "summary.json").is_file()
    assert (out / "jobs.csv").is_file()
