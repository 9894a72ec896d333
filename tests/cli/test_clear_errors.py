"""Clear errors (issue 38 item 4): one ``Error:`` line in the same words whichever way the
command was asked, and options refused where they would change nothing documented."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main


@pytest.mark.parametrize("scope", [["-A"], ["-n", "team-a"], []])
def test_status_words_a_missing_kubeconfig_the_same_with_or_without_a_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scope: list[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent.yaml"))
    result = CliRunner().invoke(main, ["status", *scope])
    assert result.exit_code == 1, result.output
    # the controller's words for the same trouble (tests/hostile/test_kubeconfig.py)
    expected = f"Error: cannot read the jobs: kubeconfig {tmp_path}/absent.yaml"
    assert result.output.strip() == expected + " (from $KUBECONFIG) does not exist"
    assert "ConfigError" not in result.output
    # of several files, kubectl skips those missing: none existing is the error
    listed = f"{tmp_path}/a.yaml:{tmp_path}/b.yaml"
    monkeypatch.setenv("KUBECONFIG", listed)
    result = CliRunner().invoke(main, ["status", *scope])
    assert result.exit_code == 1, result.output
    said = f"Error: cannot read the jobs: no kubeconfig: none of $KUBECONFIG={listed} exists"
    assert result.output.strip() == said


def _trace(tmp_path: Path) -> Path:
    trace = tmp_path / "t.jsonl"
    args = ["workload", "generate", "--pattern", "bursty", "--minutes", "30", "--seed", "1"]
    args += ["--gpus", "8"]
    result = CliRunner().invoke(main, [*args, "--out", str(trace)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return trace


@pytest.mark.parametrize("objective", ["slack", "fair", "remaining"])
def test_simulate_refuses_an_objective_paper_mode_does_not_take(
    tmp_path: Path, objective: str
) -> None:
    args = ["simulate", str(_trace(tmp_path)), "--gpus", "8", "--paper"]
    result = CliRunner().invoke(main, [*args, "--objective", objective, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert f"--objective {objective} is for Bellows mode" in result.output
    assert "--paper always maximises the sum of speedups" in result.output
    assert not (tmp_path / "summary.json").exists()


def test_simulate_takes_paper_modes_own_objective(tmp_path: Path) -> None:
    args = ["simulate", str(_trace(tmp_path)), "--gpus", "8", "--paper", "--no-plots"]
    result = CliRunner().invoke(main, [*args, "--objective", "speedup", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "summary.json").exists()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_controller_with_nats_unreachable_prints_one_error_line_naming_the_url(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    url = f"nats://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    command = [sys.executable, "-m", "bellows.cli.main", "controller", "--set"]
    done = subprocess.run(
        [*command, f"nats.servers={url}"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith(f"Error: could not connect to NATS at {url} ("), errors


def test_the_lists_of_kinds_name_trainjob() -> None:
    listing = CliRunner().invoke(main, ["--help"], terminal_width=200)
    bridge = next(line for line in listing.output.splitlines() if line.strip().startswith("bridge"))
    assert "TrainJobs" in bridge, bridge
    assert "TrainJobs" in CliRunner().invoke(main, ["bridge", "--help"]).output
    root = Path(__file__).resolve().parents[2]
    diagram = (root / "README.md").read_text().split("```\n", 2)[1]
    assert "PyTorchJob / MPIJob / TrainJob ──watch──▶ bridge" in diagram
    opening = (root / "docs/events.md").read_text().split("\n\n")[1]
    assert "TrainJobs" in opening, opening
