"""The ``--workers`` and ``--ray`` flags that ``bellows sweep`` and ``bellows reproduce`` share:
where independent simulations run (:mod:`bellows.sim.running`, imported when a runner is
made, so that ``--help`` imports no simulator)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import click

from bellows.cli.params import BoundedInt, Name

if TYPE_CHECKING:
    from bellows.sim.running import Runner

__all__ = ["MAX_WORKERS", "RAY_ADDRESS", "make_runner_or_fail", "runner_options"]

MAX_WORKERS: Final = 256
RAY_ADDRESS: Final = (
    r"auto|local|(ray://)?[A-Za-z0-9][A-Za-z0-9.-]{0,252}:[0-9]{1,5}"
    r"|(ray://)?\[[0-9A-Fa-f:.]{2,45}\]:[0-9]{1,5}"
)
_RAY_VALID: Final = "auto, local, HOST:PORT or ray://HOST:PORT"

F = TypeVar("F", bound=Callable[..., Any])


def runner_options(*, workers_help: str) -> Callable[[F], F]:
    """Add ``--workers`` (no default: :func:`make_runner_or_fail` applies the command's) and
    ``--ray`` to a command."""

    def decorate(command: F) -> F:
        command = click.option(
            "--ray", "ray_address", type=Name(RAY_ADDRESS, _RAY_VALID), default=None,
            metavar="ADDRESS",
            help="Run on Ray instead: an existing cluster (auto, HOST:PORT, ray://HOST:PORT) "
            "or a Ray instance started for this run (local). Needs: pip install "
            "'bellows[ray]'.",
        )(command)  # fmt: skip
        return click.option(
            "--workers", type=BoundedInt(1, MAX_WORKERS), default=None, help=workers_help,
        )(command)  # fmt: skip

    return decorate


def make_runner_or_fail(
    workers: int | None, ray_address: str | None, *, default: int | None
) -> Runner:
    """The runner for the flags; a clean error (exit 1) when ``--ray`` lacks Ray.

    Without ``--workers``: ``default`` local processes (``None``: the cores this process may
    use), or, with ``--ray local``, a Ray instance on every CPU of the machine.
    """
    from bellows.sim.running import RayMissingError, default_workers, make_runner

    if workers is None and not ray_address:
        workers = default or default_workers()
    try:
        return make_runner(workers, ray_address)
    except RayMissingError as err:
        raise click.ClickException(str(err)) from None
