"""``bellows controller`` and ``bellows bridge``: the two processes of the live plugin.

The service (NATS, Kubernetes clients) is imported when a command runs, not at ``--help``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bellows.cli.config import config_options, load_from_cli

if TYPE_CHECKING:
    from bellows.service.config import BellowsConfig

Runner = Callable[..., Awaitable[None]]


def _serve(runner: Runner, config: BellowsConfig) -> None:
    """Run ``runner`` until SIGTERM or SIGINT."""
    import asyncio  # lazy, see the docstring
    import signal

    async def until_signalled() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await runner(config, stop=stop)

    from bellows.bus.connection import NatsUnreachableError
    from bellows.kube.kubeconfig import KubeconfigError

    try:
        asyncio.run(until_signalled())
    except (KubeconfigError, NatsUnreachableError) as error:  # one Error: line, no traceback
        raise click.ClickException(str(error)) from None


@click.command()
@config_options
def controller(config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Consume job events from NATS, decide GPUs and batch sizes, and apply them to the jobs.

    Runs until SIGTERM; with leader election on, only the replica holding the Lease acts."""
    from bellows.service.runner import run_controller

    _serve(run_controller, load_from_cli(config_file, overrides))


@click.command()
@config_options
def bridge(config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Watch opted-in PyTorchJobs, MPIJobs and TrainJobs and publish their arrivals and
    completions.

    TrainJobs with controller.trainer.enabled (the Trainer v2 CRDs installed). Runs until
    SIGTERM; resumes its watch from the last resourceVersion it handled."""
    from bellows.service.runner import run_bridge

    _serve(run_bridge, load_from_cli(config_file, overrides))
