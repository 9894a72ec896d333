"""The lazy command table: it names exactly the commands that exist, each loads and shows
its help through it, and ``bellows --help`` imports none of them."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import textwrap

import click
import pytest
from click.testing import CliRunner

import bellows.cli
from bellows.cli.main import COMMANDS, load_command, main


def _defined_commands() -> set[click.Command]:
    """Every top-level command defined in a module of ``bellows.cli``: a command object
    that is no sub-command of another group."""
    found: set[click.Command] = set()
    for info in pkgutil.iter_modules(bellows.cli.__path__):
        module = importlib.import_module(f"bellows.cli.{info.name}")
        found.update(v for v in vars(module).values() if isinstance(v, click.Command))
    nested = {c for g in found if isinstance(g, click.Group) for c in g.commands.values()}
    return found - nested - {main}


def test_the_table_names_exactly_the_commands_that_exist() -> None:
    loaded = {name: load_command(name) for name in COMMANDS}
    assert len(set(map(id, loaded.values()))) == len(loaded), "two names, one command"
    assert set(loaded.values()) == _defined_commands()
    for name, command in loaded.items():
        assert command.name == name, (name, command.name)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_says_what_the_command_says(name: str) -> None:
    assert COMMANDS[name].short_help == load_command(name).get_short_help_str(limit=10_000)


def _paths(command: click.Command, words: tuple[str, ...]) -> list[tuple[str, ...]]:
    if not isinstance(command, click.Group):
        return [words]
    nested = [_paths(c, (*words, n)) for n, c in sorted(command.commands.items())]
    return [words, *(p for group in nested for p in group)]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_help_shows_through_the_lazy_group(name: str) -> None:
    for words in _paths(load_command(name), (name,)):
        result = CliRunner().invoke(
            main, [*words, "--help"], prog_name="bellows", catch_exceptions=False
        )
        assert result.exit_code == 0, (words, result.output)
        assert result.output.startswith(f"Usage: bellows {' '.join(words)} "), result.output


def test_an_unknown_command_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["simulat"])
    assert result.exit_code == 2
    assert "No such command 'simulat'" in result.output


PROBE = textwrap.dedent(
    """
    import sys
    from bellows.cli.main import COMMANDS, main
    try:
        main(["--help"])
    except SystemExit as done:
        assert done.code == 0, done.code
    for name in sys.argv[1:]:
        __import__(COMMANDS[name].target.partition(":")[0])
    heavy = ("numpy", "jax", "matplotlib", "nats", "kubernetes", "rich", "yaml", "torch")
    print(sorted(m for m in sys.modules if m.split(".")[0] in heavy))
    print(sorted(m for m in sys.modules if m.startswith("bellows.cli.")))
    """
)


def _probe(*names: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    heavy, cli = done.stdout.strip().splitlines()[-2:]
    return heavy, cli


def test_the_top_level_help_imports_no_command() -> None:
    heavy, cli = _probe()
    assert heavy == "[]", heavy
    assert cli == "['bellows.cli.main']", cli


def test_command_modules_import_no_engine_until_they_run() -> None:
    # every command: its `--help` must not cost seconds (benchmarks/cli_startup.py)
    heavy, _ = _probe(*sorted(COMMANDS))
    assert heavy == "[]", heavy
