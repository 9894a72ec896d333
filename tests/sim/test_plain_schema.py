"""The plain-schema check says "valid" only where jsonschema agrees, and it does say so
for the trace lines Bellows writes (else the fast path would never be taken)."""

from __future__ import annotations

from typing import Any

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.sim.workloads.plain_schema import compile_check
from bellows.sim.workloads.traces import TraceJob, schema, to_record
from tests.strategies import job_specs, make_job

CHECK = compile_check(schema())
VALIDATOR = jsonschema.Draft202012Validator(schema())
BASE = to_record(TraceJob(12.5, make_job("j0"), "resnet"))

# Values near every bound of the schema, of every JSON type.
SCALARS = st.one_of(
    st.none(), st.booleans(), st.text(max_size=3),
    st.sampled_from([0, 1, -1, 65536, 65537, 1048576, 1048577, 1073741825, 10**13, 10**13 + 1]),
    st.sampled_from([0.0, -0.0, 1.0, 0.5, 1e5, 1e5 + 1, 1e8, 1e8 + 16, 1e15, 2e15, 86400.5]),
    st.integers(), st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    record: dict[str, Any] = {**BASE, "profile": dict(BASE["profile"])}
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from([*BASE, "profile.local_batches", "profile.seconds",
                                      "extra", "drop"]))  # fmt: skip
        if where == "drop":
            record.pop(draw(st.sampled_from(sorted(record))), None)
        elif where.startswith("profile."):
            if not isinstance(record.get("profile"), dict):  # replaced or dropped before
                record["profile"] = dict(BASE["profile"])
            record["profile"][where.split(".")[1]] = draw(st.lists(SCALARS, max_size=4))
        else:
            record[where] = draw(VALUES)
    return record


@settings(max_examples=400, deadline=None)
@given(mutated())
def test_the_check_never_accepts_what_jsonschema_refuses(record: dict[str, Any]) -> None:
    if CHECK(record):
        assert VALIDATOR.is_valid(record), record


@settings(max_examples=100, deadline=None)
@given(job_specs("j"), st.floats(0, 1e8))
def test_every_line_bellows_writes_takes_the_fast_path(spec: Any, arrival: float) -> None:
    record = to_record(TraceJob(arrival, spec))
    assert VALIDATOR.is_valid(record)
    assert CHECK(record), record


def test_an_unknown_keyword_makes_the_check_say_no() -> None:
    check = compile_check({"type": "object", "patternProperties": {}})
    assert not check({})
    assert compile_check({"type": "object"})({})


def test_what_the_check_does_not_understand_makes_it_say_no() -> None:
    for odd in (
        {"type": ["integer", "null"]},  # a list of types
        {"type": "integer", "minimum": "1"},  # a bound that is not a number
        {"type": "object", "required": "ab"},  # required as a string
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {}},
        {"type": "array", "items": {"type": "tuple"}},  # an unknown type, nested
    ):
        assert not compile_check(odd)(1), odd
        assert not compile_check(odd)({}), odd
        assert not compile_check(odd)([]), odd


def test_nested_checks_and_bounds() -> None:
    check = compile_check({
        "type": "object", "required": ["a"], "additionalProperties": False,
        "properties": {
            "a": {"type": "array", "minItems": 1, "maxItems": 2,
                  "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 10}},
            "b": {"type": "string", "minLength": 2},
        },
    })  # fmt: skip
    assert check({"a": [1, 2.5]})
    assert check({"a": [10], "b": "xy"})
    for bad in (
        {}, {"a": []}, {"a": [1, 2, 3]}, {"a": [0]}, {"a": [10.5]}, {"a": [True]},
        {"a": [1], "b": "x"}, {"a": [1], "c": 1}, {"a": [float("nan")]}, {"a": "1"},
    ):  # fmt: skip
        assert not check(bad), bad
