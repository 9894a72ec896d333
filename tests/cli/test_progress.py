"""A long command's progress: drawn on a terminal, never into piped output; the run it
watches unchanged."""

from __future__ import annotations

import io

import numpy as np

from bellows.autoscaler import AutoscalerConfig
from bellows.cli.progress import steps
from bellows.scaling import default_cluster
from bellows.sim import run
from bellows.sim.engine import PROGRESS_EVERY
from bellows.sim.workloads.generating import WorkloadSpec, generate


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_piped_output_gets_no_progress() -> None:
    stream = io.StringIO()
    with steps("reading", stream=stream) as show:
        show("simulating")
    assert stream.getvalue() == ""


def test_a_terminal_sees_each_step() -> None:
    stream = _Terminal()
    with steps("reading trace.jsonl", stream=stream) as show:
        show("simulating 12 jobs")
    drawn = stream.getvalue()
    assert "simulating 12 jobs" in drawn
    assert drawn.endswith("\x1b[2K")  # redrawn in place, and cleared when done


def test_the_run_reports_how_far_it_got_and_decides_the_same() -> None:
    cluster = default_cluster()
    spec = WorkloadSpec(pattern="high", minutes=480, categories=(1, 2, 3, 4), gpus=64)
    trace = generate(spec, np.random.default_rng(5), cluster=cluster)
    seen: list[tuple[float, int]] = []
    config = AutoscalerConfig()
    watched = run(
        trace, gpus=64, config=config, cluster=cluster, progress=lambda *a: seen.append(a)
    )
    plain = run(trace, gpus=64, config=config, cluster=cluster)
    assert watched.jobs == plain.jobs
    steps_run = watched.stats.events + watched.stats.rounds
    assert len(seen) >= steps_run // PROGRESS_EVERY - 1 > 0  # stale completions are steps too
    times = [at for at, _ in seen]
    events = [n for _, n in seen]
    assert times == sorted(times)
    assert events == sorted(events)
    assert events[-1] <= watched.stats.events
