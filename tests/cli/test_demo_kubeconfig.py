"""``bellows demo`` writes a kubeconfig for its emulated cluster, so that kubectl and
``bellows status`` can watch the twin while the demo runs (issue 38, item 1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bellows.cli import demo as demo_cli
from bellows.cli.main import main

BIN = Path(sys.executable).parent
KUBECTL = shutil.which("kubectl")
LIMIT_S = 120.0


def _until(what: str, check: Any, limit_s: float = LIMIT_S) -> Any:
    """``check()``'s first truthy answer, polled within a deadline."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {limit_s} s")


def test_without_the_flag_the_export_line_comes_first_and_the_folder_goes(
    monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    seen: list[Path] = []

    def run(options: Any, console: Any, **_: Any) -> Any:
        seen.append(options.kubeconfig)
        assert options.kubeconfig.parent.is_dir()  # the temporary folder, while it runs
        raise SystemExit(0)  # (the run itself is the test below's)

    monkeypatch.setattr(demo_cli, "_run", run)
    shown = CliRunner().invoke(main, ["demo", "--crds", str(shared_data / "crds")])
    [path] = seen
    assert shown.output.splitlines()[0] == f"export KUBECONFIG={path}"
    assert not path.parent.exists()  # removed when the demo ends


@pytest.mark.slow
@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (on PATH)")
def test_kubectl_and_bellows_status_watch_a_running_demo(shared_data: Path, tmp_path: Path) -> None:
    assert KUBECTL is not None
    config = tmp_path / "kubeconfig"
    env = {**os.environ, "KUBECONFIG": str(config)}
    # the end-to-end test's trace (tests/service/test_demo_e2e.py): a few jobs, ~1 min
    args = [str(BIN / "bellows"), "demo", "--no-live", "--gpus", "8", "--minutes", "20",
            "--speedup", "60", "--seed", "3", "--crds", str(shared_data / "crds"),
            "--kubeconfig", str(config)]  # fmt: skip
    with (
        (tmp_path / "demo.err").open("w") as errors,
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors, text=True) as demo,
    ):
        try:
            assert demo.stdout is not None
            assert demo.stdout.readline().strip() == f"export KUBECONFIG={config}"
            _until("the kubeconfig", config.exists)

            def jobs() -> list[str]:
                done = subprocess.run(
                    [KUBECTL, f"--cache-dir={tmp_path / 'cache'}", "get", "pytorchjobs", "-A"],
                    env=env, capture_output=True, text=True, timeout=30, check=False,
                )  # fmt: skip
                return done.stdout.splitlines()[1:] if done.returncode == 0 else []

            assert _until("a PyTorchJob listed by kubectl", jobs)[0].split()[0] == "default"
            status = subprocess.run(
                [str(BIN / "bellows"), "status", "-A"], env=env, capture_output=True,
                text=True, timeout=60, check=True,
            )  # fmt: skip
            assert "PyTorchJob" in status.stdout
            demo.wait(LIMIT_S * 3)
        finally:
            demo.kill()
    assert demo.returncode == 0, (tmp_path / "demo.err").read_text()[-2000:]
