"""The progress a resume journals (``bellows.io/progress``), read back by a restarted controller."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.jobs import MAX_WORK, SpecError
from bellows.kube import keys
from bellows.kube.journal import Journal


def test_progress_round_trips_to_the_millisecond() -> None:
    at = datetime(2026, 11, 30, 6, 0, 1, 234567, tzinfo=UTC)
    text = keys.format_progress(1_234_567.0, at)
    assert text == "samples=1.23457e+06,at=2026-11-30T06:00:01.234Z"
    samples, when = keys.parse_progress(text)
    assert samples == pytest.approx(1_234_570.0)
    assert abs((when - at).total_seconds()) < 1e-3
    assert Journal.read({keys.PROGRESS: text}).progress == (samples, when)


@pytest.mark.parametrize(
    "text",
    ["samples=nan,at=2026-11-30T06:00:01Z", "samples=1e99,at=2026-11-30T06:00:01Z",
     "samples=5,at=0001-01-01T00:00:00+14:00", "samples=5", "samples=5,at=2026-11-30T06:00:01Z\n",
     "samples=²,at=2026-11-30T06:00:01Z"],
)  # fmt: skip
def test_a_malformed_progress_is_refused_and_reads_as_absent(text: str) -> None:
    with pytest.raises(SpecError, match=keys.PROGRESS):
        keys.parse_progress(text)
    assert Journal.read({keys.PROGRESS: text}).progress is None


@given(st.text(max_size=80))
def test_any_progress_text_reads_as_a_bounded_value_or_nothing(text: str) -> None:
    progress = Journal.read({keys.PROGRESS: text}).progress
    if progress is not None:
        assert 0.0 <= progress[0] <= MAX_WORK
        assert progress[1].utcoffset() is not None
