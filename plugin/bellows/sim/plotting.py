"""A run's plots, drawn by a second process started before the run.

Importing matplotlib and laying out its first figure cost about a second, as long as a
400-GPU simulation itself (issue 11). ``bellows simulate`` therefore starts this module as a
child process (:class:`Plotter`) before it reads the trace: the child imports matplotlib and
warms its text caches on the other core while the run goes on, then reads the result from
its stdin and draws the plots of :func:`bellows.sim.plots.plot_run` while the parent writes
``summary.json`` and ``jobs.csv``, on two cores: it forks, and the copy draws two of the
three figures while it draws the third. The parent waits for it: the command returns only when
the plots are on disk, and a child that fails fails the command.

The payload is a pickle of our own objects, sent by the parent to the child it started over
a pipe no one else holds; nothing from outside is ever unpickled here.
"""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from bellows.sim.engine import SimResult

__all__ = ["SENT_KEYS", "PlotError", "Plotter"]

SENT_KEYS = (
    "completed_over_time", "efficiency_charged_jobs", "spread_job_time_share", "objective",
    "mode",
)  # fmt: skip
"""The summary keys the plots read: the curve, and what the titles say was charged."""


class PlotError(RuntimeError):
    """The plotting process failed; the message carries the end of its stderr."""


class Plotter:
    """The child process that draws one run's plots (see the module docstring)."""

    def __init__(self) -> None:
        # stderr to a file, not a pipe: a chatty child never blocks on a parent still busy
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 - closed in wait() or cancel()
        self._child = subprocess.Popen(  # our own interpreter and module
            [sys.executable, "-m", "bellows.sim.plotting"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._err,
        )

    def send(self, result: SimResult, out: Path, *, label: str, summary: Mapping[str, Any]) -> None:
        """Hand the run to the child, which draws while the caller goes on."""
        sent = {key: summary[key] for key in SENT_KEYS if key in summary}
        payload = pickle.dumps((result, str(out), label, sent), protocol=pickle.HIGHEST_PROTOCOL)
        stdin = self._child.stdin
        if stdin is None:  # pragma: no cover - opened with PIPE above
            raise PlotError("the plotting process has no stdin")
        try:
            stdin.write(payload)
            stdin.close()
        except BrokenPipeError:
            pass  # the child died: wait() reports why

    def wait(self) -> None:
        """Wait for the plots; :class:`PlotError` if the child failed."""
        code = self._child.wait()
        self._err.seek(0)
        err = self._err.read()
        self._err.close()
        if code != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
            raise PlotError("drawing the plots failed: " + " | ".join(tail))

    def cancel(self) -> None:
        """Stop the child (the run failed: there is nothing to draw)."""
        if self._child.poll() is None:
            self._child.kill()
        if self._child.stdin is not None and not self._child.stdin.closed:
            self._child.stdin.close()
        self._child.wait()
        self._err.close()


def _warm_up() -> None:
    """Lay out and render one small figure with the pieces the real ones use (title, labels,
    legend, log axis), into memory: fonts and text metrics are cached before the run ends."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - after plots set the Agg backend

    fig, ax = plt.subplots(figsize=(2.0, 1.5))
    ax.plot([1.0, 2.0], [10.0, 100.0], label="warm")
    ax.set_yscale("log")
    ax.set_title("warm")
    ax.set_xlabel("time (min)")
    ax.legend()
    fig.savefig(io.BytesIO(), format="png", dpi=110)
    plt.close(fig)


def _serve() -> None:
    from bellows.sim.plots import run_drawings  # noqa: PLC0415 - the child's slow part, first

    _warm_up()
    result, out, label, summary = pickle.loads(sys.stdin.buffer.read())  # from our parent
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    completed, usage, batches = run_drawings(result, folder, label=label, summary=summary)
    # the parent only writes two files meanwhile: draw on both cores, in halves of about
    # equal time (usage ~0.23 s; completed and batches ~0.1 s each on the 400-GPU replay)
    _on_two_cores(usage, lambda: [completed(), batches()])


def _on_two_cores(first: Callable[[], object], second: Callable[[], object]) -> None:
    """Run ``second`` in a forked copy of this process while ``first`` runs here; raise if
    either fails (:class:`PlotError` with the copy's error; its traceback goes to the shared
    stderr). Without ``os.fork``, one after the other."""
    if not hasattr(os, "fork"):  # pragma: no cover - Linux and macOS have it
        first()
        second()
        return
    sys.stderr.flush()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the copy: draw, then leave without running the parent's exit handlers
        os.close(read_end)
        code = 0
        try:
            second()
        except BaseException as err:
            traceback.print_exc()
            os.write(write_end, f"{type(err).__name__}: {err}".encode()[:4096])
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    try:
        first()
    finally:
        with os.fdopen(read_end, "rb") as pipe:
            said = pipe.read().decode("utf-8", "replace")
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise PlotError(said or f"the second drawing process ended with status {status}")


def _leave() -> None:
    """End the process without tearing it down: the plots are closed files on disk, and
    unwinding matplotlib's modules and caches would keep the parent waiting ~0.2 s more."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _serve()  # an error raises past this, and the interpreter exits 1 with its traceback
    _leave()
