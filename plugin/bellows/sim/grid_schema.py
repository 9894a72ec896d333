"""The JSON Schema of a sweep's GRID (``grid.schema.json``, beside this module), and its
errors in words: the key (``traces[0].generate.minutes``), its value and what would be valid,
the nearest ``description`` of the schema where no plainer words fit."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from bellows.inputs import SpecError

if TYPE_CHECKING:
    import jsonschema  # imported when a GRID is checked: ~0.1 s `bellows simulate` saves

__all__ = ["bounds", "check", "schema"]


@cache
def _validator() -> jsonschema.Draft202012Validator:
    import jsonschema  # noqa: PLC0415 - lazy, see the import above

    text = resources.files(__package__).joinpath("grid.schema.json").read_text("utf-8")
    return jsonschema.Draft202012Validator(json.loads(text))


def schema() -> dict[str, Any]:
    """The published JSON Schema of a GRID (``grid.schema.json``)."""
    loaded: dict[str, Any] = _validator().schema
    return loaded


def bounds(name: str) -> dict[str, float]:
    """``minimum``/``maximum`` (and whether the minimum is open) of a ``$defs`` number."""
    spec = schema()["$defs"][name]
    spec = next((s for s in spec.get("anyOf", ()) if "maximum" in s), spec)
    low = spec.get("minimum", spec.get("exclusiveMinimum", -math.inf))
    return {"minimum": low, "maximum": spec["maximum"], "open": "exclusiveMinimum" in spec}


# ---------------------------------------------------------------- schema errors, in words
_KEYWORD_WORDS: Final[dict[str, Callable[[Any], str]]] = {
    "uniqueItems": lambda _: "a list without repeated values",
    "minItems": lambda n: f"a list of at least {n} item(s)",
    "maxItems": lambda n: f"a list of at most {n} items",
    "minProperties": lambda n: f"an object with at least {n} key(s)",
    "maxProperties": lambda n: f"an object with at most {n} keys",
}


def _where(path: Sequence[object]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<grid>"


def _leaf(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """The error inside ``anyOf``/``oneOf`` branches that says what is wrong: a branch whose
    type the value does not even have is no help, unless no branch took the value at all."""
    while error.context:
        useful = [e for e in error.context if not (e.validator == "type" and not e.relative_path)]
        if not useful:
            break
        error = max(useful, key=lambda e: (e.validator != "type", len(e.relative_path)))
    return error


def _described(error: jsonschema.ValidationError) -> str:
    """The nearest ``description`` on the way from ``error`` up its branches."""
    node: jsonschema.ValidationError | None = error
    while node is not None:
        text = node.schema.get("description") if isinstance(node.schema, dict) else None
        if text:
            return str(text)
        node = node.parent
    return f"{error.validator} {error.validator_value!r}"


def _schema_error(error: jsonschema.ValidationError) -> SpecError:
    from jsonschema.exceptions import best_match  # noqa: PLC0415 - lazy, as above

    leaf = _leaf(best_match([error]) or error)
    path = list(leaf.absolute_path)
    if leaf.validator == "additionalProperties":
        allowed = sorted(leaf.schema.get("properties", {}))
        extra = [k for k in leaf.instance if k not in allowed]
        key = extra[0] if extra else "?"
        where = _where([*path, key])
        return SpecError(where, leaf.instance.get(key), f"one of the keys {', '.join(allowed)}")
    if leaf.validator == "required":
        missing = next((k for k in leaf.validator_value if k not in leaf.instance), "?")
        return SpecError(_where([*path, missing]), None, "a value (the key is required)")
    if leaf.validator == "propertyNames":
        return SpecError(_where(path), leaf.instance, _described(leaf))
    if leaf.validator == "type" and "properties" in leaf.schema:  # an object was expected
        keys = ", ".join(sorted(leaf.schema["properties"]))
        return SpecError(_where(path), leaf.instance, f"an object with the keys {keys}")
    words = _KEYWORD_WORDS.get(str(leaf.validator))
    valid = words(leaf.validator_value) if words else _described(leaf)
    return SpecError(_where(path), leaf.instance, valid)


def check(document: object) -> None:
    """Raise :class:`SpecError` for the most relevant problem of ``document``, if any."""
    if next(iter(_validator().iter_errors(document)), None) is None:
        return
    from jsonschema.exceptions import best_match  # noqa: PLC0415 - lazy, as above

    best = best_match(_validator().iter_errors(document))
    assert best is not None  # there was an error
    raise _schema_error(best)
