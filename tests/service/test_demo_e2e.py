"""End to end: the live stack (nats-server, emulated Kubeflow, bridge, controller) against the
simulator on the same bursty trace, through the ``bellows demo`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bellows", "paper", "kueue"])
def test_live_stack_agrees_with_the_simulator(mode: str, shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(
        main,
        [
            "demo", "--gpus", "8", "--minutes", "20", "--speedup", "60", "--seed", "3",
            "--crds", str(shared_data / "crds"), "--json-out", str(out),
            *(["--paper"] if mode == "paper" else []),
            *(["--kueue"] if mode == "kueue" else []),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["ok"] is True
    live, simulated = report["live"], report["simulated"]
    # --kueue: Bellows mode, every job admitted by the emulated Kueue within its quota
    assert live["mode"] == simulated["mode"] == ("bellows" if mode == "kueue" else mode)
    assert live["jobs_total"] == simulated["jobs_total"] > 3
    # the comparison is not vacuous: jobs ran, and the elastic policy rescaled some of them
    assert live["jobs_completed_total"] == simulated["jobs_completed_total"] == live["jobs_total"]
    assert live["rescales"] > 0
    assert {b["metric"] for b in report["bounds"]} == {
        "jobs_completed", "sjs_efficiency", "drop_ratio", "jobs_in_a_different_final_state",
    }  # fmt: skip


def test_demo_refuses_a_folder_without_crds(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--crds", str(tmp_path)])
    assert result.exit_code == 2
    assert "no CRD files" in result.output
