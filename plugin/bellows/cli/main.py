"""Entry point of the ``bellows`` command: the top-level group and its sub-commands."""

from __future__ import annotations

import click

from bellows import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bellows")
def main() -> None:
    """Bellows: give each training job GPUs and a batch size, inside what its owner allows."""


# Sub-commands register below, one line each, so that adding one never touches another.
