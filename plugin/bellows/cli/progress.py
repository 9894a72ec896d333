"""What a long command is doing, shown while it runs: a spinner, the step, the time spent.

A command that may take more than a couple of seconds (``bellows simulate`` of a large trace
takes from 3 s to a minute) says which step it is in and how far it got, on standard error,
redrawn in place and cleared when done. Only on a terminal: piped or captured output (CI,
scripts, tests) gets no progress, only the command's own lines. ``rich`` is imported when a
terminal asks for it.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from typing import TextIO

__all__ = ["Show", "steps"]

Show = Callable[[str], None]
"""Set the text of the step shown now."""


@contextlib.contextmanager
def steps(first: str, *, stream: TextIO | None = None) -> Iterator[Show]:
    """Show ``first`` while the block runs; the block calls the function it gets to show the
    next step or how far this one got. Nothing is drawn unless ``stream`` (default: standard
    error) is a terminal."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        yield _ignore
        return
    from rich.console import Console  # only a terminal pays for it

    started = time.monotonic()
    console = Console(file=stream)
    with console.status(_text(first, 0.0)) as status:

        def show(text: str) -> None:
            status.update(_text(text, time.monotonic() - started))

        yield show


def _text(step: str, elapsed: float) -> str:
    return f"{step} [dim]({elapsed:.0f} s)[/dim]"


def _ignore(_: str) -> None:
    pass
