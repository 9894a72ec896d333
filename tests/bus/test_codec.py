"""The event codec and subject layout: pure functions, checked against the JSON Schema."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.bus import (
    EventError,
    JobArrived,
    JobCompleted,
    JobKind,
    JobRef,
    Outcome,
    decode,
    encode,
    message_id,
)
from bellows.bus.codec import event_schema
from bellows.bus.subjects import event_subject, name_from_token, name_token
from bellows.jobs import SpecError

from .conftest import T0, arrived, completed

label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
subdomain = st.lists(label, min_size=1, max_size=3).map(".".join)
refs = st.builds(
    JobRef,
    kind=st.sampled_from(JobKind),
    namespace=label,
    name=subdomain,
    uid=st.uuids().map(str),
)
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
versions = st.none() | st.integers(1, 10**12).map(str)
# JSON numbers in events are 64-bit (decode refuses larger ones, see test_int64_bound)
INT64 = st.integers(-(2**63), 2**63 - 1)
specs = st.none() | st.dictionaries(st.text(max_size=5), INT64 | st.text(max_size=5))
events = st.builds(JobArrived, refs, times, versions, st.just("bridge"), specs) | st.builds(
    JobCompleted, refs, times, st.sampled_from(Outcome), versions, st.just("pipeline/run-1")
)


@given(events)
def test_encode_then_decode_is_identity_and_matches_the_schema(event):
    data = encode(event)
    assert decode(data) == event
    jsonschema.validate(json.loads(data), event_schema())


def test_times_in_other_zones_are_stored_in_utc():
    cest = timezone(timedelta(hours=2))
    event = JobArrived(arrived().job, datetime(2025, 5, 1, 14, 0, tzinfo=cest))
    raw = json.loads(encode(event))
    assert raw["time"] == "2025-05-01T12:00:00Z"
    assert decode(encode(event)).time == T0


def test_the_same_fact_from_two_producers_has_one_message_id():
    from_bridge = arrived(resource_version="17")
    from_pipeline = arrived(source="pipeline/run-9")
    assert message_id(from_bridge) == message_id(from_pipeline) == "uid-resnet/job.arrived"
    assert message_id(completed()) == "uid-resnet/job.completed"


@pytest.mark.parametrize(
    ("data", "code", "fragment"),
    [
        (b"{not json", "malformed_json", "not UTF-8 JSON"),
        (b"\xff\xfe", "malformed_json", "not UTF-8 JSON"),
        (b"[1, 2]", "invalid_event", "expected a JSON object"),
        (b'{"version": 2, "type": "job.arrived"}', "unknown_version", "version=2"),
        (b'{"type": "job.arrived"}', "unknown_version", "version=None"),
        (b'{"version": true, "type": "job.arrived"}', "unknown_version", "version=True"),
        (b'{"version": 1, "type": "job.paused"}', "unknown_type", "type='job.paused'"),
    ],
)
def test_undecodable_messages_name_their_reason(data, code, fragment):
    with pytest.raises(EventError) as info:
        decode(data)
    assert info.value.code == code
    assert fragment in info.value.reason


def _raw(**changes):
    raw = json.loads(encode(completed()))
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    return json.dumps(raw).encode()


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_raw(extra=1), "unknown field 'extra'"),
        (_raw(spec={}), "unknown field 'spec'"),
        (_raw(outcome=None), "outcome=None"),
        (_raw(outcome="Paused"), "outcome='Paused'"),
        (_raw(time="yesterday"), "time='yesterday'"),
        (_raw(time="2025-05-01T12:00:00"), "with a zone"),
        (_raw(job={"kind": "TFJob", "namespace": "a", "name": "b", "uid": "c"}), "job.kind"),
        (_raw(job={"kind": "MPIJob", "namespace": "A", "name": "b", "uid": "c"}), "DNS-1123"),
        (_raw(job={"kind": "MPIJob", "namespace": "a", "name": "b", "uid": ""}), "job.uid"),
        (
            _raw(job={"kind": "MPIJob", "namespace": "a", "name": "b", "uid": "c", "x": 1}),
            "unknown field 'job.x'",
        ),
    ],
)
def test_invalid_events_name_the_field(data, fragment):
    with pytest.raises(EventError) as info:
        decode(data)
    assert info.value.code == "invalid_event"
    assert fragment in info.value.reason


def test_the_schema_refuses_what_the_codec_refuses():
    schema = event_schema()
    for data in (_raw(extra=1), _raw(spec={}), _raw(outcome=None)):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(data), schema)


def test_events_validate_their_fields_on_construction():
    with pytest.raises(SpecError, match="time"):
        JobArrived(arrived().job, datetime(2025, 1, 1))  # naive time
    with pytest.raises(SpecError, match=r"job\.name"):
        JobRef(JobKind.MPIJOB, "team-a", "Bad_Name", "u")


def test_subjects_carry_namespace_kind_name_and_event():
    event = JobCompleted(JobRef(JobKind.MPIJOB, "team-b", "bert.large", "u1"), T0, Outcome.FAILED)
    assert event_subject("bellows", event) == "bellows.events.v1.team-b.mpijob.bert_large.completed"
    assert event_subject("acme.ml", arrived()).startswith("acme.ml.events.v1.team-a.pytorchjob.")


@given(subdomain)
def test_name_tokens_are_reversible_and_hold_no_dots(name):
    token = name_token(name)
    assert "." not in token
    assert name_from_token(token) == name


def test_int64_bound() -> None:
    event = arrived(spec={"big": 2**63})
    with pytest.raises(EventError) as info:
        decode(encode(event))
    assert info.value.code == "malformed_json"
    assert "64-bit" in info.value.reason
    assert decode(encode(arrived(spec={"big": 2**63 - 1}))).spec == {"big": 2**63 - 1}
