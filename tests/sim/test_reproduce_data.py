"""``bellows reproduce`` where the real traces are not: the paper's part runs anyway and the
report says what to set for *Beyond the paper*; asked for explicitly, it stops first. A
benchmark that needs them stops with the same advice."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import bellows.cli.data
import bellows.sim.reproduce
from bellows.cli.main import main
from bellows.sim.reproduce import EXPERIMENTS
from tests.conftest import REPO, load_script

NO_DATA_ENV = {"BELLOWS_DATA": None, "BELLOWS_SHARED_DATA": None}
BENCHMARK = REPO / "benchmarks" / "policies.py"


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed package used far from any workspace: no ``shared/data`` to be found."""
    monkeypatch.setattr(bellows.cli.data, "workspace_data", lambda: None)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_without_the_traces_the_paper_part_runs_and_the_report_says_what_to_set(
    outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one experiment stands for the paper's grid: the whole one adds ~25 s and nothing that
    # the data folder decides (tests/sim/test_cli.py runs two of them with the traces)
    fig5a = [e for e in EXPERIMENTS if e.key == "fig5a"]
    monkeypatch.setattr(bellows.sim.reproduce, "EXPERIMENTS", fig5a)
    result = CliRunner().invoke(
        main, ["reproduce", "--quick", "--out", "r.md", "--figures", "f"], env=NO_DATA_ENV
    )
    assert result.exit_code == 0, result.output
    assert "skipping 'beyond'" in result.output
    assert "r.md: 1 experiments" in result.output
    text = (outside / "r.md").read_text()
    assert "Fig. 5(a)" in text
    note = text.split("## Beyond the paper", 1)[1]
    assert "Not run:" in note
    assert "--data or $BELLOWS_DATA" in note
    assert not list((outside / "f").glob("beyond-*"))


def test_asked_for_without_the_traces_it_stops_before_any_run(outside: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["reproduce", "--quick", "--only", "beyond", "--out", "r.md", "--figures", "f"],
        env=NO_DATA_ENV,
    )
    assert result.exit_code == 1
    assert "shared/data: not found" in result.output
    assert "$BELLOWS_DATA" in result.output
    assert not (outside / "r.md").exists()


@pytest.mark.parametrize("name", ["BELLOWS_DATA", "BELLOWS_SHARED_DATA"])
def test_a_data_folder_given_by_the_environment_must_hold_the_traces(
    name: str, outside: Path
) -> None:
    env = {**NO_DATA_ENV, name: str(outside / "elsewhere")}
    result = CliRunner().invoke(
        main, ["reproduce", "--quick", "--out", "r.md", "--figures", "f"], env=env
    )
    assert result.exit_code == 1
    assert f"{outside / 'elsewhere' / 'itp' / '195job.csv'}: not found" in result.output
    assert not (outside / "r.md").exists()


def test_a_benchmark_without_the_traces_stops_with_what_to_set(
    outside: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in NO_DATA_ENV:
        monkeypatch.delenv(name, raising=False)
    benchmark = load_script(BENCHMARK)
    with pytest.raises(SystemExit) as stopped:
        benchmark.main(["--seeds", "1"])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "give it with --data or $BELLOWS_DATA" in error
    assert "microsoft/elasticflow-traces" in error
    assert error.rstrip().endswith("or --skip-real")
