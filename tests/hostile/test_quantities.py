"""Kubernetes quantities (``bellows.inputs.parse_quantity``): exact values, and no error but
:class:`SpecError`, whatever the text; the emulator's canonical form reads back the same."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.emulator.nodes import canonical_quantity
from bellows.inputs import SpecError, parse_quantity
from tests.hostile.test_parsers import attempt, hostile_text


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("8", 8),
        ("0", 0),
        ("+3", 3),
        ("1k", 1000),
        ("1500", 1500),
        ("500m", Fraction(1, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("2.", 2),
        ("4Gi", 4 * 2**30),
        ("1Ki", 1024),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2e-3", Fraction(2, 1000)),
        ("1E", 10**18),
        ("3n", Fraction(3, 10**9)),
    ],
)
def test_quantities_read_exactly(text: str, value: Fraction | int) -> None:
    assert parse_quantity("q", text) == value


@pytest.mark.parametrize(
    "text",
    ["", ".", "-1", "1K", "1e", "1 ", " 1", "8\n", "1.2.3", "1ki", "1e1000", "²", "NaN", "inf"],
)
def test_what_is_no_quantity_is_refused_by_name(text: str) -> None:
    with pytest.raises(SpecError, match=r"q=.*Kubernetes quantity"):
        parse_quantity("q", text)


def test_bounds_and_types() -> None:
    assert parse_quantity("q", "65536", maximum=65536) == 65536
    with pytest.raises(SpecError, match=r"in \[0, 65536\]"):
        parse_quantity("q", "65537", maximum=65536)
    with pytest.raises(SpecError):
        parse_quantity("q", 8)  # a number is not the text of one
    with pytest.raises(SpecError):
        parse_quantity("q", "9" * 65)  # longer than any real quantity


@given(hostile_text)
def test_any_text_is_a_bounded_quantity_or_a_spec_error(text: str) -> None:
    value, error = attempt(parse_quantity, "q", text, maximum=10**6)
    assert error is not None or 0 <= value <= 10**6


@pytest.mark.parametrize(
    ("given_", "canonical"),
    [
        ("8", "8"),
        (4, "4"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("10", "10"),
        ("0.5", "500m"),
        (0.5, "500m"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("512Ki", "512Ki"),
        ("1000Ki", "1000Ki"),
        ("1e3", "1e3"),
        ("12e2", "1200"),
        ("0", "0"),
        ("-1", None),
        ("x", None),
        (True, None),
    ],
)
def test_the_emulator_writes_quantities_as_the_api_server_does(given_, canonical) -> None:
    assert canonical_quantity(given_) == canonical


QUANTITIES = st.builds(
    lambda number, suffix: f"{number}{suffix}",
    st.integers(min_value=0, max_value=10**12),
    st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-3", "E"]),
)


@given(QUANTITIES)
def test_a_canonical_quantity_reads_back_the_same_value(text: str) -> None:
    canonical = canonical_quantity(text)
    assert canonical is not None
    assert parse_quantity("q", canonical) == parse_quantity("q", text)
    assert canonical_quantity(canonical) == canonical  # canonical is a fixed point
