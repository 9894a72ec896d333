"""Jobs that carry one profile text share one parsed profile (what a controller holding
10 000 jobs keeps per job: docs/live.md)."""

from __future__ import annotations

import copy
import json

import pytest

from bellows.jobs import SpecError
from bellows.kube import JobReader, MPIJobKind, keys


def _notes(examples):
    return copy.deepcopy(examples["MPIJob"]["metadata"]["annotations"])


def test_one_profile_text_gives_one_profile_object(examples):
    first = keys.parse_settings(_notes(examples)).profile
    again = keys.parse_settings(_notes(examples)).profile
    assert again is first
    # the text, not the object: a re-serialized profile of the same values is equal
    document = json.loads(_notes(examples)[keys.PROFILE])
    notes = _notes(examples)
    notes[keys.PROFILE] = json.dumps(document, indent=1)
    other = keys.parse_settings(notes).profile
    assert other == first


def test_a_long_profile_text_is_parsed_each_time(examples):
    document = json.loads(_notes(examples)[keys.PROFILE])
    document["source"] = "x" * keys.SHARED_PROFILE_BYTES
    text = json.dumps(document)
    first = keys.parse_profile_text(keys.PROFILE, text)
    again = keys.parse_profile_text(keys.PROFILE, text)
    assert again == first
    assert again is not first


def test_a_bad_profile_text_is_refused_every_time(examples):
    notes = _notes(examples)
    notes[keys.PROFILE] = '{"weights": "many"}'
    for _ in range(2):
        with pytest.raises(SpecError) as caught:
            keys.parse_settings(notes)
        assert caught.value.field.startswith(keys.PROFILE)


async def test_specs_read_from_jobs_share_their_profile(examples):
    reader = JobReader(api=None)  # inline profiles: no API call
    specs = []
    for name in ("one", "two"):
        obj = copy.deepcopy(examples["MPIJob"])
        obj["metadata"].update(name=name, namespace="default", uid=name, resourceVersion="1")
        seen = await reader.examine(MPIJobKind(), obj)
        specs.append(seen.spec)
    assert [s.name for s in specs] == ["mpijob/default/one", "mpijob/default/two"]
    assert specs[1].profile is specs[0].profile
