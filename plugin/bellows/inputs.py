"""Values that come from outside, parsed with bounds: the one parser for every layer.

Annotations, env values, events, trace fields, CSV cells, config files and flags are written
by people and programs Bellows does not trust. Every number and name they carry goes through
the functions here, which accept only what is documented and raise only
:class:`SpecError`. The error names the field, shows the value (truncated) and says what
would be valid, so that the bad object is reported to its owner and skipped, and the loop
that met it goes on.

The rules:

* integers are ASCII digits only, at most :data:`MAX_INT_DIGITS` of them (``str.isdigit``
  accepts ``"²"``, which ``int()`` then refuses), within the caller's bounds;
* floats are finite decimals in ASCII (no ``nan``, ``inf``, ``1_000`` or other scripts),
  within the caller's bounds;
* names match their whole pattern (``re.fullmatch``: ``$`` would let ``"NAME\\n"`` through);
* JSON documents have a size and a nesting limit, and no ``NaN``, ``Infinity``, non-finite
  floats or integers beyond 64 bits anywhere inside.

The innermost layer: no dependency on any other part of Bellows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Final

__all__ = [
    "DATA_ERRORS",
    "MAX_INT_DIGITS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "SpecError",
    "brief",
    "check_float",
    "check_int",
    "check_name",
    "json_depth",
    "parse_float",
    "parse_int",
    "parse_json",
    "parse_quantity",
    "parse_time",
    "shown",
]

MAX_INT_DIGITS: Final = 19  # as many as an int64 has (Kubernetes, JSON Schema tools)
_INT64: Final = 1 << 63
MAX_JSON_BYTES: Final = 1 << 20  # a default; callers with a smaller natural limit pass it
MAX_JSON_DEPTH: Final = 32
_SHOWN_CHARS: Final = 80

_INT = re.compile(rf"[0-9]{{1,{MAX_INT_DIGITS}}}")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_FLOAT_CHARS: Final = 64


def shown(value: object) -> str:
    """``repr(value)`` cut to a readable length (never raises, whatever the value)."""
    if isinstance(value, int) and value.bit_length() > 64:
        # repr() of an int past 4300 digits raises; a long one is unreadable anyway
        return f"<an integer of about {value.bit_length() * 0.30103:.0f} digits>"
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        return f"{text[: _SHOWN_CHARS - 15]}… ({len(text)} chars)"
    return text


class SpecError(ValueError):
    """A value from outside, or in a job, profile or allocation, is outside its valid range.

    ``field`` is the dotted name of the offending field, ``value`` the value given and
    ``valid`` a short description of what would have been accepted. The message shows the
    value truncated, so a hostile value cannot flood a log line or an Event.
    """

    def __init__(self, field: str, value: object, valid: str) -> None:
        self.field = field
        self.value = value
        self.valid = valid
        super().__init__(f"{field}={shown(value)} is invalid: expected {valid}")

    def __reduce__(self) -> tuple[Any, tuple[type[SpecError], str, dict[str, Any]]]:
        """Rebuilt with its message and fields, whatever its class's constructor takes (a
        worker process's error reaches its parent whole, not as a broken pool)."""
        return _rebuilt_spec_error, (type(self), str(self), dict(self.__dict__))

    def within(self, prefix: str) -> SpecError:
        """The same error with ``prefix.`` in front of the field (for nested specs)."""
        return SpecError(f"{prefix}.{self.field}", self.value, self.valid)


def _rebuilt_spec_error(cls: type[SpecError], message: str, fields: dict[str, Any]) -> SpecError:
    """A :class:`SpecError` (or subclass) unpickled: its message and fields as they were."""
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    err.__dict__.update(fields)
    return err


def _range(kind: str, minimum: float, maximum: float, *, open_min: bool = False) -> str:
    low = f"> {minimum:g}" if open_min else f">= {minimum:g}"
    if maximum == math.inf:
        return kind if minimum == -math.inf else f"{kind} {low}"
    if minimum == -math.inf:
        return f"{kind} <= {maximum:g}"
    if open_min:
        return f"{kind} {low} and <= {maximum:g}"
    return f"{kind} in [{minimum:g}, {maximum:g}]"


def _int_valid(minimum: int, maximum: int | None) -> str:
    if maximum is None:
        return f"an integer >= {minimum} (ASCII digits)"
    return f"an integer in [{minimum}, {maximum}] (ASCII digits)"


def parse_int(field: str, text: object, *, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer written in ASCII digits (surrounding spaces allowed), within bounds."""
    valid = _int_valid(minimum, maximum)
    if not isinstance(text, str):
        raise SpecError(field, text, valid)
    digits = text.strip(" \t")
    if not _INT.fullmatch(digits):
        raise SpecError(field, text, valid)
    value = int(digits)
    if value < minimum or (maximum is not None and value > maximum):
        raise SpecError(field, text, valid)
    return value


def check_int(field: str, value: object, *, minimum: int = 0, maximum: int | None = None) -> int:
    """An integer already parsed (JSON, YAML), within bounds; ``bool`` is not one."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, value, _int_valid(minimum, maximum).removesuffix(" (ASCII digits)"))
    if value < minimum or (maximum is not None and value > maximum):
        raise SpecError(field, value, _int_valid(minimum, maximum).removesuffix(" (ASCII digits)"))
    return value


def _check_bounds(
    field: str,
    shown_value: object,
    number: float,
    minimum: float,
    maximum: float,
    *,
    open_min: bool,
) -> float:
    low_ok = number > minimum if open_min else number >= minimum
    if not (math.isfinite(number) and low_ok and number <= maximum):
        raise SpecError(
            field, shown_value, _range("a finite number", minimum, maximum, open_min=open_min)
        )
    return number


def parse_float(
    field: str,
    text: object,
    *,
    minimum: float = -math.inf,
    maximum: float = math.inf,
    open_min: bool = False,
) -> float:
    """A finite decimal number in ASCII (``12``, ``-0.5``, ``3e9``), within bounds.

    ``open_min`` excludes ``minimum`` itself (``> 0`` rather than ``>= 0``).
    """
    if not isinstance(text, str):
        raise SpecError(field, text, "a finite number written in ASCII decimal")
    body = text.strip(" \t")
    if len(body) > _FLOAT_CHARS or not _FLOAT.fullmatch(body):
        raise SpecError(field, text, "a finite number written in ASCII decimal")
    return _check_bounds(field, text, float(body), minimum, maximum, open_min=open_min)


def check_float(
    field: str,
    value: object,
    *,
    minimum: float = -math.inf,
    maximum: float = math.inf,
    open_min: bool = False,
) -> float:
    """A number already parsed (JSON, YAML, a flag), finite and within bounds."""
    too_long = isinstance(value, int) and abs(value) >= _INT64
    if isinstance(value, bool) or not isinstance(value, int | float) or too_long:
        raise SpecError(
            field, value, _range("a finite number", minimum, maximum, open_min=open_min)
        )
    return _check_bounds(field, value, float(value), minimum, maximum, open_min=open_min)


def check_name(field: str, text: object, pattern: re.Pattern[str], valid: str) -> str:
    """``text`` if the whole of it matches ``pattern`` (never a prefix, never up to a newline)."""
    if not isinstance(text, str) or not pattern.fullmatch(text):
        raise SpecError(field, text, valid)
    return text


DATA_ERRORS: Final = (
    ValueError,
    TypeError,
    LookupError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)
"""What code that reads outside data may raise on a value no check foresaw.

Loops catch these around one object (a job, a message, a trace line) and report that object;
I/O errors (``OSError``, API errors) are not among them: those are retried.
"""


def brief(err: BaseException) -> str:
    """``Type: first line`` of an error, cut short (an ApiException goes on with headers)."""
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0][: _SHOWN_CHARS * 2] if lines else ''}"


# Kubernetes' resource.Quantity: a decimal number, then a binary-SI suffix (Ki … Ei), an
# exponent (e3, E-2) or a decimal-SI suffix (n, u, m, k, M … E, or none)
_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:(?P<binary>[KMGTPE]i)|[eE](?P<exponent>[+-]?[0-9]{1,3})|(?P<decimal>[numkMGTPE]?))"
)
_QUANTITY_CHARS: Final = 64
_DECIMAL_SI: Final = {
    "n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18
}  # fmt: skip
_BINARY_SI: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def parse_quantity(
    field: str, text: object, *, minimum: int = 0, maximum: int | None = None
) -> Fraction:
    """A Kubernetes quantity (``8``, ``1k``, ``500m``, ``4Gi``, ``1e3``), exactly, within bounds.

    The API server writes quantities in a canonical form that is not always plain digits
    (1 000 GPUs read ``"1k"``), so a count must not be read with ``int()``. The value is an
    exact :class:`~fractions.Fraction`: callers that need a whole number check its
    denominator. At most 64 characters and an exponent of three digits keep it cheap.
    """
    bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    valid = f"a Kubernetes quantity (like 8, 1k, 500m or 4Gi) {bounds}"
    if not isinstance(text, str) or len(text) > _QUANTITY_CHARS:
        raise SpecError(field, text, valid)
    match = _QUANTITY.fullmatch(text)
    if match is None or not (match["whole"] or match["frac"]):
        raise SpecError(field, text, valid)
    frac = match["frac"] or ""
    value = Fraction(int(f"{match['whole']}{frac}" or "0"), 10 ** len(frac))
    if match["binary"]:
        value *= 2 ** _BINARY_SI[match["binary"]]
    else:
        exponent = (
            int(match["exponent"])
            if match["exponent"] is not None
            else _DECIMAL_SI[match["decimal"] or ""]
        )
        value *= Fraction(10) ** exponent
    if match["sign"] == "-":
        value = -value
    if value < minimum or (maximum is not None and value > maximum):
        raise SpecError(field, text, valid)
    return value


_TIME_VALID = "an RFC 3339 timestamp with a zone, e.g. 2025-05-01T12:00:00Z"


def parse_time(field: str, text: object) -> datetime:
    """An RFC 3339 timestamp with a zone, as a UTC datetime (a naive one is refused).

    A moment that cannot be expressed in UTC (``0001-01-01T00:00:00+14:00``) is refused
    here rather than overflowing later.
    """
    if not isinstance(text, str) or len(text) > 64:
        raise SpecError(field, text, _TIME_VALID)
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is None:
            raise ValueError("no zone")
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise SpecError(field, text, _TIME_VALID) from None


class _RefusedError(Exception):
    """Raised from inside ``json.loads`` hooks; turned into a SpecError by parse_json."""

    def __init__(self, what: str) -> None:
        self.what = what


def _int_hook(text: str) -> int:
    digits = text.lstrip("-")
    value = int(text) if len(digits) <= MAX_INT_DIGITS else _INT64
    if not -_INT64 <= value < _INT64:
        raise _RefusedError(f"an integer of {len(digits)} digits (beyond a 64-bit integer)")
    return value


def _float_hook(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _RefusedError(f"the number {text[:40]} (beyond a finite float)")
    return number


def _constant_hook(text: str) -> Any:
    raise _RefusedError(f"{text} (not JSON: only finite numbers)")


def json_depth(value: object) -> int:
    """How deeply ``value`` nests lists and objects (a scalar is 0), without recursion."""
    if not isinstance(value, (dict, list)):
        return 0
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]  # containers only: scalars add no depth
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return deepest


def parse_json(
    field: str,
    text: str | bytes,
    *,
    max_bytes: int = MAX_JSON_BYTES,
    max_depth: int = MAX_JSON_DEPTH,
    what: str = "a JSON document",
) -> Any:
    """The JSON value in ``text`` (UTF-8 when bytes), within size and nesting limits.

    Refuses invalid UTF-8, ``NaN``/``Infinity``, numbers beyond a finite float, integers
    beyond 64 bits, more than ``max_bytes`` bytes and more than
    ``max_depth`` levels of nesting; the error says which.
    """
    size = len(text) if isinstance(text, bytes) else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise SpecError(field, f"{size} bytes", f"{what} of at most {max_bytes} bytes")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as err:
            raise SpecError(field, f"byte {err.start}", f"{what} in UTF-8") from None
    loads: Callable[..., Any] = json.loads
    try:
        value = loads(
            text, parse_int=_int_hook, parse_float=_float_hook, parse_constant=_constant_hook
        )
    except _RefusedError as err:
        raise SpecError(field, err.what, what) from None
    except json.JSONDecodeError as err:
        where = f"line {err.lineno} column {err.colno}: {err.msg}"
        raise SpecError(field, where, f"{what} (valid JSON)") from None
    except RecursionError:
        raise SpecError(field, "nesting", f"{what} nested at most {max_depth} deep") from None
    except ValueError as err:  # whatever else the decoder refuses
        raise SpecError(field, str(err)[:80], what) from None
    depth = json_depth(value)
    if depth > max_depth:
        raise SpecError(field, f"nesting {depth} deep", f"{what} nested at most {max_depth} deep")
    return value
