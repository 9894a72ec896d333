"""``bellows config``: the configuration schema, its reference, and checking a file.

Also the ``--config``/``--set`` options and loader that every long-running command
(``controller``, ``bridge``) and ``events publish`` share. :mod:`bellows.service.config`
(which pulls in the NATS and Kubernetes settings) is imported when a command runs, not at
``--help``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from bellows.service.config import BellowsConfig

__all__ = ["config", "config_options", "load_from_cli"]

F = TypeVar("F", bound=Callable[..., Any])


def config_options(func: F) -> F:
    """Add ``--config FILE`` and repeatable ``--set KEY=VALUE`` to a command."""
    func = click.option(
        "--set",
        "overrides",
        multiple=True,
        metavar="KEY=VALUE",
        help="Override one key (e.g. controller.deltaSeconds=60); wins over file and env.",
    )(func)
    return click.option(
        "--config",
        "config_file",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="YAML configuration file (default: $BELLOWS_CONFIG).",
    )(func)


def load_from_cli(config_file: Path | None, overrides: tuple[str, ...]) -> BellowsConfig:
    """The configuration, or a usage error (exit 2) whose message names the bad key."""
    from bellows.service.config import ConfigError, load_config

    try:
        return load_config(config_file, env=os.environ, overrides=overrides)
    except ConfigError as exc:
        raise click.UsageError(f"configuration: {exc}") from None


@click.group("config")
def config() -> None:
    """Inspect and check Bellows' configuration."""


@config.command("schema")
def schema() -> None:
    """Print the JSON Schema of the configuration file."""
    from bellows.service.config import config_json_schema

    click.echo(json.dumps(config_json_schema(), indent=2))


@config.command("reference")
def reference() -> None:
    """Print the Markdown table of every key (as in docs/configuration.md)."""
    from bellows.service.config import config_markdown

    click.echo(config_markdown(), nl=False)


@config.command("show")
@config_options
def show(*, config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Print the effective configuration (secrets masked) as YAML."""
    import yaml

    from bellows.service.config import redacted

    loaded = load_from_cli(config_file, overrides)
    click.echo(yaml.safe_dump(redacted(loaded), sort_keys=False), nl=False)


@config.command("check")
@config_options
def check(*, config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Exit 0 if the configuration loads; else print what is wrong and exit 2."""
    load_from_cli(config_file, overrides)
    click.echo("configuration ok")
