"""``bellows status`` (and ``kubectl bellows status``) print what tenants wrote as data
(issue 35 item 6).

Before: a job's ``bellows.io/reason`` and the Events in its namespace were printed raw, so a
tenant's ESC/BEL sequences moved the cursor and recoloured the admin's terminal, a newline
started a row of the tenant's making ("granted by admin"), and any Event whose
``source.component`` said ``bellows`` was shown as Bellows' own.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from kubernetes import client as k8s

from bellows.cli.main import main
from bellows.cli.status import CELL_LIMIT, printable, table
from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi, keys
from bellows.kube.recording import Recorder
from bellows.kube.statuses import JobStatus, State, bellows_event, latest_events
from tests.service.livecluster import NS
from tests.service.test_pools import torch

# ESC [1A ESC [2K: up one line and erase it; ESC ]0;…BEL: the terminal's title; BEL: a bell
ESCAPES = "\x1b[1A\x1b[2K\x1b]0;owned\x07\x1b[32mgranted\x1b[0m\x07"
FORGED_ROW = "queued\nPyTorchJob   default/victim   running   8   8   4096   granted by admin"


def _row(reason: str, **changes: Any) -> JobStatus:
    fields: dict[str, Any] = {
        "kind": "PyTorchJob", "namespace": NS, "name": "evil", "state": State.WAITING,
        "gpus": 0, "target": None, "batch": None, "predicted": None, "learned": None,
        "restarts": 0, "waited_s": 1.0, "reason": reason,
    }  # fmt: skip
    fields.update(changes)
    return JobStatus(**fields)


def _safe(text: str) -> bool:
    """No character a terminal would act on, in any line."""
    return all(line.isprintable() for line in text.split("\n"))


def test_escape_sequences_and_bells_are_shown_not_sent() -> None:
    lines = table([_row(ESCAPES, queue="q\x1b[2J", event="Kept: \x9b31m")], wide=True)
    assert len(lines) == 2
    assert _safe("\n".join(lines))
    assert lines[1].endswith("\\x1b[1A\\x1b[2K\\x1b]0;owned\\x07\\x1b[32mgranted\\x1b[0m\\x07")
    assert "q\\x1b[2J" in lines[1]
    assert "Kept: \\x9b31m" in lines[1]  # C1's CSI too


def test_a_newline_does_not_forge_a_row() -> None:
    rows = [_row(FORGED_ROW), _row("queued", name="honest")]
    lines = table(rows)
    assert len(lines) == 3  # the header and one line per job, whatever the reasons hold
    assert "queued\\nPyTorchJob   default/victim" in lines[1]
    assert not any(line.startswith("PyTorchJob   default/victim") for line in lines)
    for forged in ("\r", "\u2028", "\u2029", "\x85", "\x0b", "\x0c"):
        assert len(table([_row(f"queued{forged}granted by admin")])) == 2
        assert _safe("\n".join(table([_row(f"queued{forged}granted by admin")])))


def test_bidi_overrides_and_isolates_are_escaped() -> None:
    for mark in ("\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2069"):
        shown = printable(f"ok{mark}nimda yb detnarg")
        assert mark not in shown
        assert f"\\u{ord(mark):04x}" in shown


def test_long_strings_are_cut_with_an_ellipsis() -> None:
    (_, line) = table([_row("x" * 256 * 1024)])
    assert line.endswith("x" * (CELL_LIMIT - 1) + "\u2026")
    assert printable("y" * CELL_LIMIT) == "y" * CELL_LIMIT  # at the bound: whole
    assert len(printable("\x1b" * 1000)) == CELL_LIMIT


@given(st.text())
def test_every_cell_is_printable_and_bounded(text: str) -> None:
    shown = printable(text)
    assert shown.isprintable()
    assert len(shown) <= CELL_LIMIT
    if text.isprintable() and "\\" not in text and len(text) <= CELL_LIMIT:
        assert shown == text  # an honest text is shown as it is


# ----------------------------------------------------------------------------- whose Events


def _event(reason: str, message: str, *, uid: str = "uid-1", **fields: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NS, "name": f"evil.{reason.lower()}"},
        "involvedObject": {"kind": "PyTorchJob", "namespace": NS, "name": "evil", "uid": uid},
        "reason": reason,
        "message": message,
        "lastTimestamp": "2025-05-01T12:00:00Z",
        **fields,
    }


def test_only_events_of_bellows_recorder_count_as_bellows() -> None:
    ours = _event("Queued", "queued", source={"component": "bellows"}, reportingComponent="bellows")
    forged = [
        _event("Started", "granted by admin"),  # no source at all
        _event("Started", "granted by admin", source={"component": "bellows"}),
        _event("Started", "granted by admin", reportingComponent="bellows"),
        _event(
            "Started",
            "granted by admin",
            source={"component": "bellows"},
            reportingComponent="kubelet",
        ),
        {  # in another namespace than the job it names
            **_event(
                "Started",
                "granted by admin",
                source={"component": "bellows"},
                reportingComponent="bellows",
            ),
            "metadata": {"namespace": "team-b", "name": "x"},
        },
    ]
    assert bellows_event(ours)
    assert not any(map(bellows_event, forged))
    later = [{**e, "lastTimestamp": "2025-05-01T13:00:00Z"} for e in forged]
    assert latest_events([ours, *later]) == {"uid-1": "Queued: queued"}


# ----------------------------------------------------------------------------- on a cluster


@pytest.fixture(scope="module")
def crds(shared_data: Path) -> list[Path]:
    return sorted((shared_data / "crds").glob("*.yaml"))


def _status(cluster: EmulatedCluster, tmp_path: Path, *args: str) -> str:
    config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", NS))
    shown = CliRunner().invoke(main, ["status", "--kubeconfig", config, *args])
    assert shown.exit_code == 0, shown.output
    return shown.output


def test_a_tenants_annotations_and_events_print_as_data(crds: list[Path], tmp_path: Path) -> None:
    """On the emulated cluster: the tenant's job ``evil`` carries ESC/BEL sequences and a
    newline in its journal's reason, its neighbour ``quiet`` has only a tenant's Event
    ("Started: granted by admin", ``source.component: bellows``), and ``honest`` one that
    Bellows' recorder wrote. One line per job, nothing a terminal acts on, and the tenant's
    Event is not shown as Bellows'."""

    async def main_() -> tuple[str, str, str]:
        async with EmulatedCluster(crds=crds, namespaces=(NS,)) as cluster:
            api = KubeApi(cluster.api_client())
            custom = k8s.CustomObjectsApi(api.api_client)
            core = k8s.CoreV1Api(api.api_client)
            try:
                made = {}
                for name in ("evil", "quiet", "honest"):
                    job = torch(name, 1)
                    if name == "evil":
                        notes = job["metadata"]["annotations"]
                        notes[keys.PHASE] = "queued"
                        notes[keys.REASON] = ESCAPES + FORGED_ROW
                    made[name] = await asyncio.to_thread(
                        custom.create_namespaced_custom_object,
                        "kubeflow.org", "v1", NS, "pytorchjobs", job,
                    )  # fmt: skip
                quiet = made["quiet"]["metadata"]
                forged = _event("Started", "granted by admin", uid=quiet["uid"])
                forged["metadata"] = {"namespace": NS, "generateName": "quiet."}
                forged["involvedObject"].update(name="quiet", apiVersion="kubeflow.org/v1")
                forged["source"] = {"component": "bellows"}
                forged["type"] = "Normal"
                await asyncio.to_thread(core.create_namespaced_event, NS, forged)
                honest = made["honest"]
                await Recorder(api, now=lambda: datetime.now(UTC)).record(
                    honest, "Queued", "queued by Bellows until it is started"
                )
                text = await asyncio.to_thread(_status, cluster, tmp_path, "-o", "wide")
                plain = await asyncio.to_thread(_status, cluster, tmp_path)
                as_json = await asyncio.to_thread(_status, cluster, tmp_path, "-o", "json")
                return text, plain, as_json
            finally:
                await asyncio.to_thread(api.api_client.close)

    wide, plain, as_json = asyncio.run(asyncio.wait_for(main_(), 60))
    for text in (wide, plain):
        assert _safe(text), text
        lines = text.splitlines()
        assert len(lines) == 5, text  # the cluster line, the header, three jobs
        body = {line.split()[1]: line for line in lines[2:]}
        assert set(body) == {"evil", "quiet", "honest"}
        assert "\\x1b[1A\\x1b[2K" in body["evil"]
        assert "\\nPyTorchJob   default/victim" in body["evil"]
        assert "granted by admin" not in body["quiet"]
        assert body["quiet"].endswith("arrived; not seen by the controller yet")
        assert "granted by admin" not in body["honest"]
    assert "Queued: queued by Bellows until it is started" in wide
    items = {item["name"]: item for item in json.loads(as_json)["items"]}
    assert items["quiet"]["event"] is None
    assert items["honest"]["event"] == "Queued: queued by Bellows until it is started"
    assert items["evil"]["reason"] == ESCAPES + FORGED_ROW  # JSON carries it whole, escaped
    assert "\x1b" not in as_json
