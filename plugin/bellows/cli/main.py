"""Entry point of the ``bellows`` command: the top-level group and its sub-commands.

Sub-commands load lazily: ``COMMANDS`` maps each name to ``"module:attribute"`` and the
one-line help shown by ``bellows --help``, and a module is imported only when its command
runs (or shows its own ``--help``). Importing every command's dependencies (service, demo,
matplotlib, JAX) up front made ``bellows --help`` take seconds; see
``benchmarks/cli_startup.py``. Every command runs with JAX's persistent compilation cache
on (:mod:`bellows.service.compile_cache`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import click

from bellows import __version__
from bellows.inputs import SpecError

__all__ = ["COMMANDS", "LazyCommand", "main"]


@dataclass(frozen=True)
class LazyCommand:
    """Where a sub-command lives (``"module:attribute"``) and its line in the listing."""

    target: str
    short_help: str


# Sub-commands, one line each, so that adding one never touches another.
# The short help is the command's first sentence (click truncates it to fit the listing);
# tests/cli/test_main.py checks each entry loads and says the same as its command.
COMMANDS: dict[str, LazyCommand] = {
    "jsa": LazyCommand(
        "bellows.cli.jsa:jsa",
        "Job Scalability Analyzer: fit job profiles, predict iteration times.",
    ),
    "workload": LazyCommand(
        "bellows.cli.workload:workload",
        "Job arrival traces (JSON Lines): generate, import, validate.",
    ),
    "simulate": LazyCommand(
        "bellows.cli.simulate:simulate",
        "Simulate TRACE; write summary.json, jobs.csv and plots into OUT.",
    ),
    "reproduce": LazyCommand(
        "bellows.cli.reproduce:reproduce",
        "Run elastic vs baseline on every experiment of the paper, then paper mode, the event-"
        "driven baseline and Bellows mode side by side on generated and real traces; write OUT "
        "with figures.",
    ),
    "sweep": LazyCommand(
        "bellows.cli.sweep:sweep_cmd",
        "Run every cell of GRID (YAML: traces x sizes x seeds x policies x settings; see "
        "docs/simulator.md, Sweeps) and write OUT/sweep.csv with a folder per cell.",
    ),
    "profile": LazyCommand(
        "bellows.cli.profiling:profile",
        "Time one training iteration of a model at several per-GPU batch sizes.",
    ),
    "calibrate": LazyCommand(
        "bellows.cli.profiling:calibrate",
        "Time Allreduce for several buffer sizes and process counts on this node.",
    ),
    "config": LazyCommand(
        "bellows.cli.config:config",
        "Inspect and check Bellows' configuration.",
    ),
    "events": LazyCommand(
        "bellows.cli.events:events",
        "Job arrival and completion events on NATS JetStream.",
    ),
    "demo": LazyCommand(
        "bellows.cli.demo:demo",
        "Run nats-server, an emulated Kubeflow cluster, the bridge and the controller on a "
        "bursty workload, then the simulator on the same trace; exit 1 if they disagree beyond "
        "the paper's bounds (jobs completed 5 %, SJS efficiency 5 %, drop ratio 4 points).",
    ),
    "status": LazyCommand(
        "bellows.cli.status:status",
        "Show what Bellows decided for each opted-in job, and why.",
    ),
    "controller": LazyCommand(
        "bellows.cli.live:controller",
        "Consume job events from NATS, decide GPUs and batch sizes, and apply them to the jobs.",
    ),
    "bridge": LazyCommand(
        "bellows.cli.live:bridge",
        "Watch opted-in PyTorchJobs, MPIJobs and TrainJobs and publish their arrivals and "
        "completions.",
    ),
}


def load_command(name: str) -> click.Command:
    """The command object ``COMMANDS[name]`` names, importing its module now."""
    module, _, attribute = COMMANDS[name].target.partition(":")
    command = getattr(importlib.import_module(module), attribute)
    if not isinstance(command, click.Command):
        raise TypeError(f"{COMMANDS[name].target} is {type(command).__name__}, not a command")
    return command


def _shortened(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters as click cuts a command's short help."""
    return click.Command(None, short_help=None, help=text).get_short_help_str(limit)


class _Bellows(click.Group):
    """The top-level group: lazy sub-commands from ``COMMANDS``; and a :class:`SpecError`
    that a command did not turn into its own message still ends as one clean ``Error:``
    line (exit 1), never a traceback: it is always about a value from outside, and says
    which and what would be valid."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # The listing reads the table, so `bellows --help` imports no sub-command.
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)  # as click's own
        rows = [(name, _shortened(COMMANDS[name].short_help, limit)) for name in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SpecError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Bellows, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bellows")
def main() -> None:
    """Bellows: give each training job GPUs and a batch size, inside what its owner allows."""
    # Before any command can import JAX: compiled kernels persist between runs.
    from bellows.service.compile_cache import enable_compile_cache

    enable_compile_cache()


if __name__ == "__main__":  # python -m bellows.cli.main
    main()
