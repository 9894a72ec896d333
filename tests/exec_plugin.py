"""A kubeconfig user whose credentials come from an ``exec`` plugin (client.authentication
.k8s.io/v1, as ``aws eks get-token``, ``gke-gcloud-auth-plugin`` or ``kubelogin`` are run):
a small Python program that prints an ``ExecCredential`` with ``token`` and appends a line
to ``runs`` each time the client runs it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def exec_user(folder: Path, token: str) -> tuple[dict[str, Any], Path]:
    """The ``user`` entry of a kubeconfig, and the file that counts the plugin's runs."""
    runs = folder / "plugin-runs"
    plugin = folder / "credential.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(
        "import pathlib\n"
        f"with pathlib.Path({str(runs)!r}).open('a') as runs:\n"
        "    runs.write('ran\\n')\n"
        f"print({json.dumps(credential)!r})\n"
    )
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": [str(plugin)],
            "interactiveMode": "Never",
        }
    }
    return user, runs
