"""The README's commands: the two set-up commands are what CI runs; the tour commands run here."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def bash_blocks() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.DOTALL)
    return [[line for line in block.splitlines() if line.strip()] for block in blocks]


def test_the_test_command_is_what_ci_runs() -> None:
    setup, test = bash_blocks()[:2]
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert test[0] in ci
    assert "bellows demo" in setup[0]


def test_tour_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tour = bash_blocks()[2]
    assert len(tour) >= 3
    monkeypatch.chdir(tmp_path)
    for line in tour:
        words = shlex.split(line)
        assert words[0] == ".venv/bin/bellows", line
        result = CliRunner().invoke(main, words[1:], catch_exceptions=False)
        assert result.exit_code == 0, (line, result.output)
    modes = {}
    for mode in ("bellows", "paper"):
        summary = json.loads((tmp_path / "out" / mode / "summary.json").read_text())
        assert summary["jobs_total"] > 100
        assert summary["jobs_completed"] > 0
        modes[mode] = summary
    assert (modes["bellows"]["mode"], modes["paper"]["mode"]) == ("bellows", "paper")
    # the README's claim beside these commands: Bellows mode waits less than the paper's
    assert modes["bellows"]["avg_jct_min"] < modes["paper"]["avg_jct_min"]
    assert (tmp_path / "out" / "quick.md").is_file()
