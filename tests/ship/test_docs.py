"""Every command in a ``bash`` block of the docs this part owns runs, as written, and works.

``sh`` blocks hold commands that need a cluster or Docker; they are not run here (the docs
say so). The commands run in a scratch folder that links the repository's folders, with the
Python environment's ``bin`` first on ``PATH`` (for ``bellows`` and ``python``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

DOCS = ("admin-guide.md", "training-contract.md", "profiling.md")
LINKED = ("charts", "examples", "hack", "manifests")


def bash_commands(doc: str) -> list[str]:
    text = (REPO / "docs" / doc).read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_docs_have_commands_and_no_unmarked_blocks() -> None:
    for doc in DOCS:
        text = (REPO / "docs" / doc).read_text()
        assert bash_commands(doc), doc
        # Every fenced block says whether it runs here (bash) or needs a cluster (sh).
        fences = re.findall(r"^```(\w*)$", text, flags=re.MULTILINE)
        openings = fences[::2]
        assert set(openings) <= {"bash", "sh", ""}, (doc, openings)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.slow
@pytest.mark.parametrize("doc", DOCS)
def test_documented_commands_run(doc: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    commands = bash_commands(doc)
    if any(c.startswith("kubectl") for c in commands) and shutil.which("kubectl") is None:
        pytest.skip("kubectl (with built-in kustomize) is not installed")
    for name in LINKED:
        (tmp_path / name).symlink_to(REPO / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MASTER_PORT": str(_free_port()),
        "OMP_NUM_THREADS": "1",
    }
    for command in commands:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    CHECKS[doc](tmp_path)


def _admin(folder: Path) -> None:
    kinds = {d["kind"] for d in yaml.safe_load_all((folder / "bellows.yaml").read_text()) if d}
    assert {"Deployment", "ServiceMonitor", "Role"} <= kinds
    quick = [d for d in yaml.safe_load_all((folder / "quickstart.yaml").read_text()) if d]
    assert any(d["metadata"]["name"] == "bellows-nats" for d in quick)


def _contract(folder: Path) -> None:
    import torch  # noqa: PLC0415

    state = torch.load(folder / "ckpt" / "checkpoint.pt", weights_only=False)
    assert (state["step"], state["samples_seen"], state["global_batch"]) == (20, 512, 32)


def _profiling(folder: Path) -> None:
    profile = json.loads((folder / "profile.json").read_text())
    assert [p["localBatch"] for p in profile["step"]] == [16, 64, 256, 1024]
    config_map = yaml.safe_load((folder / "mlp-profile.yaml").read_text())
    assert config_map["kind"] == "ConfigMap"
    assert (folder / "allreduce.csv").read_text().startswith("processes,weights,seconds")


CHECKS = {"admin-guide.md": _admin, "training-contract.md": _contract, "profiling.md": _profiling}
