"""``bellows events`` and ``bellows config`` as a user runs them (events against a real server)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.bus.codec import event_schema
from bellows.bus.server import running_nats_server
from bellows.cli.main import main
from bellows.service.config import config_json_schema, config_markdown


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    """A nats-server run by its own event loop in a thread (the CLI runs asyncio.run)."""
    ready = threading.Event()
    box: dict[str, object] = {}
    loop = asyncio.new_event_loop()

    async def serve() -> None:
        box["stop"] = asyncio.Event()
        async with running_nats_server(tmp_path / "nats") as server:
            box["url"] = server.url
            ready.set()
            await box["stop"].wait()  # type: ignore[attr-defined]

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),))
    thread.start()
    assert ready.wait(30), "nats-server did not start"
    yield str(box["url"])
    loop.call_soon_threadsafe(box["stop"].set)  # type: ignore[attr-defined]
    thread.join(30)
    loop.close()


def test_a_pipeline_step_publishes_and_a_repeat_is_dropped(server_url, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text('{"bellows.dev/batch-max": "512"}')
    args = [
        "events", "publish", "--type", "job.arrived", "--kind", "PyTorchJob",
        "--namespace", "team-a", "--name", "bert.large", "--uid", "0d5c-11",
        "--time", "2025-05-01T12:00:00+0000", "--spec-file", str(spec),
        "--set", f"nats.servers={server_url}",
    ]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(main, args)
    assert first.exit_code == 0, first.output
    answer = json.loads(first.output.strip().splitlines()[-1])
    assert answer == {
        "subject": "bellows.events.v1.team-a.pytorchjob.bert_large.arrived",
        "msgId": "0d5c-11/job.arrived",
        "sequence": 1,
        "duplicate": False,
    }
    again = runner.invoke(main, args, env={"BELLOWS_NATS_SERVERS": "nats://unused:1"})
    assert again.exit_code == 0, again.output  # --set wins over env
    assert json.loads(again.output.strip().splitlines()[-1])["duplicate"] is True


def test_publish_refuses_a_completion_without_outcome_and_a_bad_name():
    runner = CliRunner()
    base = ["events", "publish", "--kind", "MPIJob", "--namespace", "a", "--uid", "u"]
    done = runner.invoke(main, [*base, "--type", "job.completed", "--name", "x"])
    assert done.exit_code == 2
    assert "--outcome is required" in done.output
    bad = runner.invoke(main, [*base, "--type", "job.arrived", "--name", "Not_Valid"])
    assert bad.exit_code == 2
    assert "job.name" in bad.output


def test_schema_commands_print_the_shipped_schemas():
    runner = CliRunner()
    assert json.loads(runner.invoke(main, ["events", "schema"]).output) == event_schema()
    assert json.loads(runner.invoke(main, ["config", "schema"]).output) == config_json_schema()
    assert runner.invoke(main, ["config", "reference"]).output == config_markdown()


def test_config_check_and_show(tmp_path):
    runner = CliRunner()
    path = tmp_path / "c.yaml"
    path.write_text("controller: {deltaSeconds: 60}\nnats: {user: me}\n")
    env = {"BELLOWS_NATS_PASSWORD": "pw-secret-9"}
    ok = runner.invoke(main, ["config", "check", "--config", str(path)], env=env)
    assert ok.exit_code == 0, ok.output
    shown = runner.invoke(main, ["config", "show", "--config", str(path)], env=env)
    assert "deltaSeconds: 60.0" in shown.output
    assert "pw-secret-9" not in shown.output
    assert "password: '********'" in shown.output
    bad = runner.invoke(main, ["config", "check", "--set", "controller.delta=1"])
    assert bad.exit_code == 2
    assert "controller.delta" in bad.output
    bad_env = runner.invoke(main, ["config", "check"], env={"BELLOWS_NATS_MAX_DELIVER": "many"})
    assert bad_env.exit_code == 2
    assert "nats.maxDeliver='many' (from env BELLOWS_NATS_MAX_DELIVER)" in bad_env.output


def test_the_throughput_benchmark_runs_end_to_end():
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "bus_throughput.py"
    done = subprocess.run(
        [sys.executable, str(script), "--events", "300", "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "consume pump " in done.stdout
    assert "consume pump, acks held " in done.stdout
    assert "target 5,000" in done.stdout
