"""Click parameter types for every command's flags and files, built on :mod:`bellows.inputs`.

A flag is outside input like any other: ``--horizon-min nan`` or ``--weights 1e300`` must
be refused at the command line with what would be valid, not fail deep inside a run. So
every number goes through ``parse_float``/``parse_int`` with a documented range (click's
own ``float()``/``int()`` take ``nan``, ``inf``, ``1_000`` and digits of other scripts),
every output is checked to be writable before any work starts, and every JSON file is read
with the size and nesting limits of ``parse_json``. A bad value is a click usage error
(exit 2) naming the flag, the value (truncated) and the valid range; the ranges show in
``--help``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Generic, NoReturn, TypeVar

import click

from bellows.inputs import (
    SpecError,
    check_float,
    check_int,
    check_name,
    parse_float,
    parse_int,
    parse_json,
    shown,
)

if TYPE_CHECKING:  # imported when a file is read: `--help` must not pay for NumPy
    from bellows.scaling import ClusterProfile, JobProfile

__all__ = [
    "MAX_DELTA_MIN",
    "MAX_HORIZON_MIN",
    "MAX_HYSTERESIS",
    "MAX_ITERATIONS",
    "MAX_JSON_FILE_BYTES",
    "MAX_JSON_TEXT_BYTES",
    "MAX_SEED",
    "BoundedInt",
    "ClusterFile",
    "Document",
    "FiniteFloat",
    "IntList",
    "JobProfileFile",
    "JsonFile",
    "JsonText",
    "Name",
    "OutputDir",
    "OutputFile",
    "check_output_dir",
    "check_output_file",
    "kube_options",
    "output_errors",
]

# Documented ranges of flags that more than one command takes (docs/simulator.md).
MAX_SEED: Final = (1 << 63) - 1  # numpy seeds are any integer >= 0; 19 digits is plenty
MAX_DELTA_MIN: Final = 10_080.0  # a week between rounds
MAX_HORIZON_MIN: Final = 1e7  # about 19 years of cluster time
MAX_HYSTERESIS: Final = 1_000.0  # a gain this many times the restart cost
MAX_ITERATIONS: Final = 100_000  # timed or warm-up iterations of one measurement
MAX_JSON_FILE_BYTES: Final = 1 << 20  # a JSON file given by a flag (profiles are ~15 KiB)
MAX_JSON_TEXT_BYTES: Final = 64 * 1024  # a JSON value written on the command line


def _fail(
    kind: click.ParamType[Any], value: object, err: SpecError, param: Any, ctx: Any
) -> NoReturn:
    kind.fail(f"{shown(value)} is invalid: expected {err.valid}", param, ctx)


class FiniteFloat(click.FloatRange):
    """A finite decimal in ASCII within ``[minimum, maximum]`` (``> minimum`` if ``open_min``)."""

    name = "float"

    def __init__(self, minimum: float, maximum: float, *, open_min: bool = False) -> None:
        if not (math.isfinite(minimum) and math.isfinite(maximum)):
            raise ValueError("a flag's range is finite and documented")
        super().__init__(min=minimum, max=maximum, min_open=open_min)
        self.open_min = open_min

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        low, high = float(self.min or 0.0), float(self.max or 0.0)
        try:
            if isinstance(value, str):
                return parse_float(
                    "value", value, minimum=low, maximum=high, open_min=self.open_min
                )
            return check_float("value", value, minimum=low, maximum=high, open_min=self.open_min)
        except SpecError:
            # one message for a bad spelling and a bad size: both say the range
            bound = f"> {low:g} and <= {high:g}" if self.open_min else f"in [{low:g}, {high:g}]"
            self.fail(
                f"{shown(value)} is invalid: expected a finite decimal number {bound}", param, ctx
            )

    def _describe_range(self) -> str:
        low = "<" if self.open_min else "<="
        return f"{float(self.min or 0.0):g}{low}x<={float(self.max or 0.0):g}"


class BoundedInt(click.IntRange):
    """An integer in ASCII digits within ``[minimum, maximum]`` (both >= 0)."""

    name = "integer"

    def __init__(self, minimum: int, maximum: int) -> None:
        if minimum < 0 or maximum < minimum:
            raise ValueError("a flag's range is [minimum >= 0, maximum]")
        super().__init__(min=minimum, max=maximum)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        low, high = int(self.min or 0), int(self.max or 0)
        try:
            if isinstance(value, str):
                return parse_int("value", value, minimum=low, maximum=high)
            return check_int("value", value, minimum=low, maximum=high)
        except SpecError as err:
            _fail(self, value, err, param, ctx)


class IntList(click.ParamType[list[int]]):
    """Integers separated by commas (``8,16,32``), each within ``[minimum, maximum]``.

    ``exponent`` also takes whole numbers written as decimals (``1e5,1e6``): buffer sizes
    and the like read better so.
    """

    name = "integers"

    def __init__(
        self, minimum: int, maximum: int, *, max_items: int = 64, exponent: bool = False
    ) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.max_items, self.exponent = max_items, exponent

    def _one(self, index: int, text: str) -> int:
        field = f"item {index + 1}"
        if not self.exponent:
            return parse_int(field, text, minimum=self.minimum, maximum=self.maximum)
        number = parse_float(field, text, minimum=self.minimum, maximum=self.maximum)
        if number != int(number):
            raise SpecError(field, text, "a whole number")
        return int(number)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list | tuple):
            return list(value)
        valid = (
            f"at most {self.max_items} whole numbers in [{self.minimum}, {self.maximum}] "
            "separated by commas"
        )
        if not isinstance(value, str):
            self.fail(f"{shown(value)} is invalid: expected {valid}", param, ctx)
        parts = [part.strip() for part in value.split(",", self.max_items) if part.strip()]
        if not parts or len(parts) > self.max_items:
            self.fail(f"{shown(value)} is invalid: expected {valid}", param, ctx)
        try:
            return [self._one(i, part) for i, part in enumerate(parts)]
        except SpecError as err:
            reason = f"{err.field} is {shown(err.value)}, expected {err.valid}"
            self.fail(f"{shown(value)} is invalid: {reason}", param, ctx)


class Name(click.ParamType[str]):
    """A name that matches the whole of ``pattern`` (never a prefix, never up to a newline)."""

    name = "name"

    def __init__(self, pattern: str, valid: str) -> None:
        self.pattern, self.valid = re.compile(pattern), valid

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return check_name("value", value, self.pattern, self.valid)
        except SpecError as err:
            _fail(self, value, err, param, ctx)


def _created_probe(directory: Path) -> None:
    """Write and remove one file in ``directory`` (as root, ``os.access`` says yes to all)."""
    handle, name = tempfile.mkstemp(prefix=".bellows-probe-", dir=directory)
    os.close(handle)
    os.unlink(name)


def check_output_dir(path: Path, *, field: str = "output directory") -> Path:
    """``path`` if it is, or can be made, a directory this process can write files in.

    Missing folders are created for the check and removed again, so a command refused later
    leaves nothing behind. :class:`SpecError` says why not (a file in the way, no permission,
    a read-only file system).
    """
    made: list[Path] = []
    try:
        folder = path
        while not folder.exists() and folder != folder.parent:
            made.append(folder)
            folder = folder.parent
        for step in reversed(made):
            step.mkdir()
        _created_probe(path)
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise SpecError(
            field, str(path), f"a directory that can be created and written ({reason})"
        ) from None
    finally:
        for step in made:
            with contextlib.suppress(OSError):
                step.rmdir()
    return path


def check_output_file(path: Path, *, field: str = "output file") -> Path:
    """``path`` if a file can be written there (its folder is created when written)."""
    if path.is_dir():
        raise SpecError(field, str(path), "a file path (it is a directory)")
    check_output_dir(path.parent, field=field)
    if path.exists():
        try:
            with path.open("ab"):  # opens for writing without changing a byte
                pass
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise SpecError(field, str(path), f"a file that can be written ({reason})") from None
    return path


class OutputDir(click.ParamType[Path]):
    """A directory that can be created and written, checked before any work starts."""

    name = "directory"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return check_output_dir(Path(value))
        except SpecError as err:
            _fail(self, value, err, param, ctx)


class OutputFile(click.ParamType[Path | str]):
    """A file that can be written (``-``, standard output, when ``dash``), checked up front.

    The value is a :class:`~pathlib.Path`, or the string ``"-"``.
    """

    name = "file"

    def __init__(self, *, dash: bool = False) -> None:
        self.dash = dash

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if self.dash and value == "-":
            return "-"
        try:
            return check_output_file(Path(value))
        except SpecError as err:
            _fail(self, value, err, param, ctx)


@contextlib.contextmanager
def output_errors(path: Path | str) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``path`` (disk full, a folder removed) into a clean
    one-line error (exit 1); parent folders are created first."""
    try:
        if str(path) != "-":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        yield
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise click.ClickException(f"{path}: cannot be written ({reason})") from None


class JsonFile(click.ParamType[Any]):
    """An existing, readable JSON file, parsed with size and nesting limits; the value is
    the parsed document (a JSON object with ``mapping``; a :class:`Document` reads a
    profile)."""

    name = "file"

    def __init__(
        self, *, max_bytes: int = MAX_JSON_FILE_BYTES, max_depth: int = 32, mapping: bool = False
    ) -> None:
        self.max_bytes, self.max_depth, self.mapping = max_bytes, max_depth, mapping

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        path = Path(value)
        try:
            with path.open("rb") as handle:
                data = handle.read(self.max_bytes + 1)
        except OSError as err:
            self.fail(f"{shown(str(path))}: {err.strerror or type(err).__name__}", param, ctx)
        try:
            document = parse_json(
                str(path), data, max_bytes=self.max_bytes, max_depth=self.max_depth
            )
        except SpecError as err:
            self.fail(str(err), param, ctx)
        if self.mapping and not isinstance(document, dict):
            self.fail(
                f"{shown(str(path))} holds {shown(document)}: expected a JSON object", param, ctx
            )
        return document


class JsonText(click.ParamType[Any]):
    """A JSON value given on the command line (``--model-kwargs '{"hidden": 64}'``), parsed
    with size and nesting limits; a JSON object with ``mapping``."""

    name = "json"

    def __init__(self, *, max_bytes: int = MAX_JSON_TEXT_BYTES, mapping: bool = False) -> None:
        self.max_bytes, self.mapping = max_bytes, mapping

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a default given as a value
        try:
            document = parse_json("value", value, max_bytes=self.max_bytes)
        except SpecError as err:
            _fail(self, err.value, err, param, ctx)
        if self.mapping and not isinstance(document, dict):
            self.fail(f"{shown(value)} is invalid: expected a JSON object", param, ctx)
        return document


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class Document(click.ParamType[T], Generic[T]):
    """A file read by ``load`` (one of the ``bellows.scaling.load_*`` helpers, which apply
    the limits of :func:`bellows.inputs.parse_json`); the value is what ``load`` returns.
    A value that is not a path (a default given as the object itself) passes as it is."""

    name = "file"

    def __init__(self, load: Callable[[Path], T]) -> None:
        self.load = load

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if not isinstance(value, str | os.PathLike):
            return value
        try:
            return self.load(Path(value))
        except SpecError as err:
            self.fail(str(err), param, ctx)


def _cluster_profile(path: Path) -> ClusterProfile:
    from bellows.scaling import load_cluster_profile  # lazy, see above

    return load_cluster_profile(path)


def _job_profile(path: Path) -> JobProfile:
    from bellows.scaling import load_job_profile  # lazy, see above

    return load_job_profile(path)


def ClusterFile() -> Document[ClusterProfile]:  # noqa: N802 (used as a type, like click.Path)
    """``--cluster PROFILE.json``: a ClusterProfile, read and checked before any work."""
    return Document(_cluster_profile)


def JobProfileFile() -> Document[JobProfile]:  # noqa: N802
    """A JobProfile JSON file, read and checked before any work."""
    return Document(_job_profile)


def kube_options(command: F) -> F:
    """The ``--kubeconfig`` and ``--context`` options of the commands that read a cluster
    as ``kubectl`` does (``bellows status``, ``bellows jsa current``)."""
    command = click.option(
        "--context", default=None, help="kubeconfig context (default: the current one)."
    )(command)
    return click.option(
        "--kubeconfig",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        default=None,
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config; in a pod: its account).",
    )(command)
