"""The demo's live view: today's counts and the busiest jobs, fitted to the terminal."""

from __future__ import annotations

from click.testing import CliRunner
from rich.console import Console

from bellows.cli.demo import JOB_ROWS_MARGIN, _view, busiest
from bellows.cli.main import main
from bellows.kube.statuses import JobStatus, State
from bellows.twin.demo import Progress


def _job(name, state, gpus, waited=0.0):
    return JobStatus(
        kind="PyTorchJob", namespace="demo", name=name, state=state, gpus=gpus, target=gpus,
        batch=64 if gpus else None, predicted=None, learned=None, restarts=0, waited_s=waited,
        reason=f"why {name}",
    )  # fmt: skip


def test_busiest_jobs_first_and_only_as_many_as_fit():
    jobs = [
        _job("done", State.FINISHED, 0),
        _job("small", State.RUNNING, 2),
        _job("long-wait", State.WAITING, 0, waited=600.0),
        _job("big", State.RUNNING, 8),
        _job("short-wait", State.WAITING, 0, waited=5.0),
    ]
    assert [j.name for j in busiest(jobs, 10)] == [
        "big",
        "small",
        "long-wait",
        "short-wait",
        "done",
    ]
    assert [j.name for j in busiest(jobs, 2)] == ["big", "small"]
    assert busiest(jobs, -3) == []


def test_the_view_fits_the_terminal_and_shows_the_reasons():
    progress = Progress(
        total=40, running=30, jobs=[_job(f"j{i}", State.RUNNING, i % 5) for i in range(40)]
    )
    console = Console(width=140, height=30, record=True)
    console.print(_view(progress, 30))
    text = console.export_text()
    assert f"the {30 - JOB_ROWS_MARGIN} busiest of 40" in text
    assert len(text.splitlines()) <= 30
    assert "why j4" in text  # a job on 4 GPUs, among the busiest


def test_demo_has_a_plain_log_mode():
    shown = CliRunner().invoke(main, ["demo", "--help"])
    assert "--no-live" in shown.output
