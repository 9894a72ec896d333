"""The one parser for outside values: bounds, and no error but the project's own, ever.

Each parser is fuzzed with Hypothesis: whatever the input, the result is a value within the
documented bounds or :class:`SpecError` (:class:`EventError` for events) naming the field.
"""

from __future__ import annotations

import json
import math
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bellows.bus.codec import EventError, decode
from bellows.inputs import (
    SpecError,
    check_float,
    check_int,
    check_name,
    json_depth,
    parse_float,
    parse_int,
    parse_json,
    parse_time,
    shown,
)
from bellows.jobs import MAX_BATCH, MAX_GPUS
from bellows.kube import keys

# Text that reaches the parsers: anything, but with the probes' favourite characters often.
HOSTILE_CHARS = st.sampled_from(list('0123456789²³¹٣۴߂₀①-+.eE_ \t\n,=kbxNaIinf{}[]"\\:'))
hostile_text = st.one_of(
    st.text(max_size=40),
    st.text(HOSTILE_CHARS, max_size=40),
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
)
INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def json_of(numbers):
    return st.recursive(
        st.none() | st.booleans() | numbers | st.floats() | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
        max_leaves=20,
    )


json_values = json_of(st.integers())


def attempt(parse, *args, **kwargs):
    """``(value, None)`` or ``(None, SpecError)``: any other exception fails the test."""
    try:
        return parse(*args, **kwargs), None
    except SpecError as err:
        return None, err


@given(hostile_text, st.integers(-5, 5), st.integers(0, 10**6))
def test_parse_int_accepts_ascii_digits_in_bounds_and_nothing_else(text, low, span):
    value, err = attempt(parse_int, "f", text, minimum=low, maximum=low + span)
    if err is not None:
        assert err.field == "f"
        assert len(str(err)) < 300  # a 6000-digit value is shown truncated
        return
    assert re.fullmatch(r"[ \t]*[0-9]+[ \t]*", text)
    assert low <= value <= low + span


@pytest.mark.parametrize("text", ["²", "1²", "٣", "①", "1_000", "0x10", "-1", "+3", "", "1 2"])
def test_parse_int_refuses_what_isdigit_or_int_would_take(text):
    with pytest.raises(SpecError, match="ASCII digits"):
        parse_int("bellows.io/max-gpus", text, minimum=1, maximum=MAX_GPUS)


@given(hostile_text | st.sampled_from(["nan", "inf", "-Infinity", "1e400", "1e-400", "٣.5"]))
def test_parse_float_gives_finite_numbers_in_bounds(text):
    value, err = attempt(parse_float, "f", text, minimum=0.0, maximum=1e15, open_min=True)
    if err is not None:
        assert err.field == "f"
        return
    assert math.isfinite(value)
    assert 0 < value <= 1e15


@given(json_values | st.integers(min_value=10**18, max_value=10**5000))
def test_check_numbers_refuse_bools_non_finite_and_huge(value):
    number, err = attempt(check_float, "f", value, minimum=-1e9, maximum=1e9)
    if err is None:
        assert not isinstance(value, bool)
        assert math.isfinite(number)
    integer, err = attempt(check_int, "f", value, minimum=0, maximum=MAX_BATCH)
    if err is None:
        assert type(integer) is int
        assert 0 <= integer <= MAX_BATCH


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_parse_json_raises_only_spec_error(data):
    value, err = attempt(parse_json, "doc", data, max_bytes=150, max_depth=3)
    if err is not None:
        assert err.field == "doc"
        return
    assert json_depth(value) <= 3


@given(json_of(INT64))
def test_parse_json_round_trips_what_json_writes_when_finite(value):
    text = json.dumps(value)
    parsed, err = attempt(parse_json, "doc", text)
    if err is not None:
        assert "NaN" in text or "Infinity" in text or json_depth(value) > 32
        return
    assert parsed == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested"),
        ('{"weights": 1e400}', "beyond a finite float"),
        ("1" * 5000, "beyond a 64-bit integer"),
        ("9223372036854775808", "beyond a 64-bit integer"),
        ('{"a": NaN}', "not JSON"),
        ('{"a": -Infinity}', "not JSON"),
        (b"\xff\xfe{}", "UTF-8"),
        ("x" * 2000, "at most 1000 bytes"),
        ("{", "valid JSON"),
    ],
)
def test_parse_json_names_what_is_wrong(text, reason):
    with pytest.raises(SpecError) as err:
        parse_json(
            "doc", text, max_bytes=1000 if reason.startswith("at most") else 300_000, max_depth=8
        )
    assert reason in str(err.value)


def test_json_depth_counts_without_recursion():
    deep: object = 1
    for _ in range(50_000):
        deep = [deep]
    assert json_depth(deep) == 50_000
    assert json_depth({"a": [1, {"b": 2}]}) == 3


@given(hostile_text | st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]))
def test_parse_time_gives_aware_utc_or_spec_error(text):
    moment, err = attempt(parse_time, "time", text)
    if err is None:
        assert moment.utcoffset() is not None
        assert moment.utcoffset().total_seconds() == 0


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+14:00", "2025-05-01T12:00:00", "tomorrow", "9" * 100]
)
def test_parse_time_refuses_naive_overflowing_and_garbage(text):
    with pytest.raises(SpecError, match="RFC 3339"):
        parse_time("time", text)


def test_check_name_needs_the_whole_text_to_match():
    pattern = re.compile(r"[A-Z_]+")
    assert check_name("env", "BATCH", pattern, "upper case") == "BATCH"
    for bad in ["BATCH\n", "BATCH x", "\nBATCH", ""]:
        with pytest.raises(SpecError):
            check_name("env", bad, pattern, "upper case")


def test_shown_never_raises_and_stays_short():
    assert shown(10**5000).startswith("<an integer of about 5000 digits")
    assert len(shown("x" * 10_000)) < 100
    assert shown("ok") == "'ok'"


annotation_keys = st.sampled_from([*keys.OWNER_KEYS, keys.REQUESTED, "other"])


@settings(max_examples=300)
@given(st.dictionaries(annotation_keys, hostile_text | st.text(string.printable, max_size=60)))
def test_owner_settings_raise_only_spec_error(annotations):
    parsed, err = attempt(keys.parse_settings, annotations)
    if err is not None:
        assert err.field.startswith(keys.PREFIX)
        return
    assert 1 <= parsed.k_max <= MAX_GPUS
    assert 1 <= parsed.b_min <= parsed.b_max <= MAX_BATCH


@given(hostile_text | st.from_regex(r"k=[0-9]{1,12},b=[0-9]{1,14}", fullmatch=True))
def test_journal_pairs_raise_only_spec_error(text):
    pair, err = attempt(keys.parse_pair, keys.REQUESTED, text)
    if err is None:
        assert pair is not None
        assert 1 <= pair[0] <= MAX_GPUS
        assert 1 <= pair[1] <= MAX_BATCH


@given(st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()))
def test_decode_raises_only_event_error(data):
    with pytest.raises(EventError):
        decode(data)
