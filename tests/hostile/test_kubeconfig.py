"""Issue 25, item 6: ``bellows controller``, ``bellows bridge`` and ``bellows jsa current``
with a kubeconfig that is missing, empty, not UTF-8 or no kubeconfig print one ``Error:``
line naming the file and what is wrong, exit 1, and never a traceback (whole processes:
the commands configure logging for the process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = {
    "missing": (None, "does not exist"),
    "empty": (b"", "is empty"),
    "blank": (b"  \n\n", "is empty"),
    "binary": (b"\xff\xfe\x00\x01apiVersion: v1\n", "is not UTF-8"),
    "list": (b"- a\n- b\n", "not a kubeconfig mapping"),
    "no-context": (b"apiVersion: v1\nkind: Config\n", "context"),
}
COMMANDS = {
    "controller": ["controller", "--set", "kubernetes.kubeconfig={path}"],
    "bridge": ["bridge", "--set", "kubernetes.kubeconfig={path}"],
    "jsa-current": ["jsa", "current", "team-a/job", "--kubeconfig", "{path}"],
    "jsa-current-env": ["jsa", "current", "team-a/job"],  # $KUBECONFIG names the file
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_kubeconfig_is_one_error_line_naming_the_file(tmp_path: Path, command, case):
    content, says = CASES[case]
    if command == "jsa-current" and content is None:
        pytest.skip("click's own check names the missing --kubeconfig (exit 2)")
    path = tmp_path / f"{case}.kubeconfig"
    if content is not None:
        path.write_bytes(content)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST",)}
    env["KUBECONFIG"] = str(path)
    env["HOME"] = str(tmp_path)  # no ~/.kube/config of the machine's
    args = [a.format(path=path) for a in COMMANDS[command]]
    done = subprocess.run(
        [sys.executable, "-m", "bellows.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1, text
    assert str(path) in errors[0], text
    assert says in errors[0], text
