"""What ``bellows demo`` prints is for a person (issue 38, item 5): ``--no-live`` logs are the
stack's own lines (the emulated API server's access lines only at debug, JAX's TPU line
silenced), the final table fits 80 columns with every name whole, and the live view counts
the trace's jobs from its first frame."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from rich.console import Console

from bellows.cli import demo as demo_cli
from bellows.cli.main import main
from bellows.emulator import EmulatedCluster
from bellows.emulator.server import ACCESS_LOGGER
from bellows.twin.demo import Bound, DemoResult
from tests.conftest import shared_data_dir

BIN = Path(sys.executable).parent
# a console log line: time, [level], event, [logger], fields
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\S+ \[(\w+)\s*\] (\S+)\s+\[([\w.]+)\]")


@pytest.mark.slow
def test_no_live_logs_are_the_stacks_own_lines(shared_data: Path, tmp_path: Path) -> None:
    # 10 jobs on 8 GPUs, 30 cluster minutes at 180x: about 25 s (over 20 minutes only two
    # jobs complete in the window, and one marginal move apart, the early round's at a
    # completion, takes the SJS efficiency of two jobs 5 % apart)
    args = [str(BIN / "bellows"), "demo", "--no-live", "--gpus", "8", "--minutes", "30",
            "--speedup", "180", "--seed", "3", "--crds", str(shared_data / "crds"),
            "--kubeconfig", str(tmp_path / "kubeconfig")]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    logs = [m for m in map(_LOG_LINE.match, lines) if m is not None]
    others = [line for line in lines if not _LOG_LINE.match(line)]
    assert all(line.startswith("warning: ") for line in others), others  # fit_note's
    loggers = {m.group(3) for m in logs}
    assert all(name.startswith("bellows.") for name in loggers), loggers  # no aiohttp, no jax
    assert "Unable to initialize backend" not in done.stderr
    assert "HTTP/1.1" not in done.stderr
    events = [m.group(2) for m in logs]
    jobs = events.count("job.arrived")
    assert jobs == 10, events
    # per job its arrival, its decisions, what the controller learned of it from its reports
    # (a few revisions each) and its end, and a dozen lines of start and stop (the old logs:
    # 163 lines for these 7 jobs at 60x, 129 of them access lines)
    revised = events.count("job.revised")
    assert revised <= 3 * jobs, events
    assert len(lines) <= 12 + jobs * 2 + events.count("decision.applied") + revised, lines
    table = done.stdout.splitlines()
    assert table[0].startswith("export KUBECONFIG=")
    assert max(len(line) for line in table[1:]) <= 80
    assert "jobs_in_a_different_final_state" in done.stdout


async def test_access_lines_are_debug_lines(caplog: pytest.LogCaptureFixture) -> None:
    crds = sorted((shared_data_dir() / "crds").glob("*.yaml"))
    for level, seen in ((logging.INFO, 0), (logging.DEBUG, 1)):
        caplog.clear()
        with caplog.at_level(level, logger=ACCESS_LOGGER):
            async with (
                EmulatedCluster(crds=crds, operator=False) as kube,
                aiohttp.ClientSession() as session,
                session.get(f"{kube.url}/api/v1/namespaces/default/configmaps?limit=5") as got,
            ):
                assert got.status == 200
        access = [r for r in caplog.records if r.name == ACCESS_LOGGER]
        assert len(access) == seen, level
        assert all(r.levelno == logging.DEBUG for r in access)
        if seen:
            assert re.fullmatch(
                r"GET /api/v1/namespaces/default/configmaps\?limit=5 200 \d+ B [\d.]+ ms",
                access[0].getMessage(),
            ), access[0].getMessage()
    assert not [r for r in caplog.records if r.name == "aiohttp.access"]


def _result(tolerance: str) -> DemoResult:
    summary: dict[str, Any] = {
        "mode": "bellows", "jobs_total": 1234, "avg_jct_min": 13.537123456,
        "rescales": 4321, "offered_load": 1.40625,
    }  # fmt: skip
    bounds = (
        Bound("jobs_completed", 1234.0, 1230.0, "within 5%", True),
        Bound("sjs_efficiency", 0.9322222, 0.93411, tolerance, True),
        Bound("avg_jct_min", 13.537123456, 13.2, "within 10%", True),
        Bound("drop_ratio", 0.0, 0.0, "within 4 points", True),
        Bound("jobs_in_a_different_final_state", 0.0, 0.0, "none", True),
    )
    return DemoResult(summary, summary, bounds, jobs=1234, wall_s=48.0)


@pytest.mark.parametrize("tolerance", ["within 5%", "within 10% (1234 admitted by Kueue first)"])
def test_the_final_table_fits_80_columns_with_every_name_whole(tolerance: str) -> None:
    console = Console(width=80, record=True)
    console.print(demo_cli._result_table(_result(tolerance)))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for name in ("jobs_completed", "sjs_efficiency", "jobs_in_a_different_final_state",
                 "offered_load", "avg_jct_min", "simulator"):  # fmt: skip
        assert name in text, name
    assert "13.54" in text
    assert "1.406" in text
    if "Kueue" in tolerance:  # folded onto more lines, not cut
        assert "admitted" in text
        assert "first)" in text


def test_the_live_view_counts_the_trace_from_its_first_frame(
    monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    frames: list[str] = []

    class Live:
        def __init__(self, view: Any, **_: Any) -> None:
            console = Console(width=100, height=40, record=True)
            console.print(view)
            frames.append(console.export_text())

        def __enter__(self) -> Live:
            raise SystemExit(0)  # the first frame is all this test reads

        def __exit__(self, *_: object) -> None:
            pass

    monkeypatch.setattr("rich.live.Live", Live)
    shown = CliRunner().invoke(
        main, ["demo", "--crds", str(shared_data / "crds"), "--gpus", "8", "--minutes", "20",
               "--seed", "3"],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    [first] = frames
    assert "0/7" in first, first
    assert "0/0" not in first


def test_verbose_needs_no_live() -> None:
    shown = CliRunner().invoke(main, ["demo", "--verbose"])
    assert shown.exit_code == 2
    assert "--verbose needs --no-live" in shown.output
