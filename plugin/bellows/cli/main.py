"""Entry point of the ``bellows`` command: the top-level group and its sub-commands."""

from __future__ import annotations

from typing import Any

import click

from bellows import __version__
from bellows.cli.config import config
from bellows.cli.demo import demo
from bellows.cli.events import events
from bellows.cli.jsa import jsa
from bellows.cli.live import bridge, controller
from bellows.cli.profiling import calibrate, profile
from bellows.cli.reproduce import reproduce
from bellows.cli.simulate import simulate
from bellows.cli.workload import workload
from bellows.inputs import SpecError


class _Bellows(click.Group):
    """The top-level group: a :class:`SpecError` that a command did not turn into its own
    message still ends as one clean ``Error:`` line (exit 1), never a traceback: it is
    always about a value from outside, and says which and what would be valid."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SpecError as error:
            raise click.ClickException(str(error)) from None


@click.group(cls=_Bellows, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bellows")
def main() -> None:
    """Bellows: give each training job GPUs and a batch size, inside what its owner allows."""


# Sub-commands register below, one line each, so that adding one never touches another.
main.add_command(jsa)
main.add_command(workload)
main.add_command(simulate)
main.add_command(reproduce)
main.add_command(profile)
main.add_command(calibrate)
main.add_command(config)
main.add_command(events)
main.add_command(demo)
main.add_command(controller)
main.add_command(bridge)


if __name__ == "__main__":  # python -m bellows.cli.main
    main()
