"""``bellows controller`` and ``bellows bridge``: the two processes of the live plugin."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import click

from bellows.cli.config import config_options, load_from_cli
from bellows.service.config import BellowsConfig
from bellows.service.runner import run_bridge, run_controller

Runner = Callable[..., Awaitable[None]]


async def _until_signalled(runner: Runner, config: BellowsConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runner(config, stop=stop)


@click.command()
@config_options
def controller(config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Consume job events from NATS, decide GPUs and batch sizes, and apply them to the jobs.

    Runs until SIGTERM; with leader election on, only the replica holding the Lease acts."""
    asyncio.run(_until_signalled(run_controller, load_from_cli(config_file, overrides)))


@click.command()
@config_options
def bridge(config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Watch opted-in PyTorchJobs and MPIJobs and publish their arrivals and completions.

    Runs until SIGTERM; resumes its watch from the last resourceVersion it handled."""
    asyncio.run(_until_signalled(run_bridge, load_from_cli(config_file, overrides)))
