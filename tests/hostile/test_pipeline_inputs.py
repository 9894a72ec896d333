"""The Pipelines component's ``annotations`` input (issue 35 item 8): a ``bellows.io/`` key that
is not an owner setting is refused before anything is submitted, naming the key and what is
allowed. Before, Bellows' own journal keys (``bellows.io/phase``, ``target``,
``allocation``…) passed through into the submitted job, which then claimed decisions nobody
made."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bellows.inputs import SpecError
from bellows.kube import keys
from bellows.kube.pipeline_job import job_manifest

FORGED = {
    keys.PHASE: "done",
    keys.TARGET: "k=8,b=512",
    keys.ALLOCATION: "k=8,b=512",
    keys.REQUESTED: "k=8,b=512",
    keys.RECREATED_FROM: "0b1c6f3e-uid-of-another-job",
    keys.RECREATION: "token",
    keys.RESTARTS: "0",
    keys.STARTED_AT: "2025-05-01T12:00:00Z",
    keys.SUSPENDED_AT: "2025-05-01T12:00:00Z",
    keys.STATUS: "granted by admin",
    keys.REASON: "granted by admin",
    keys.FIT: "{}",
    keys.PROGRESS: "samples=0,at=2025-05-01T12:00:00Z",
}


def _manifest(kind: str = "PyTorchJob", **annotations: str) -> dict[str, Any]:
    return job_manifest(
        kind=kind,
        name="resnet50-pipeline",
        namespace="default",
        image="ghcr.io/example/resnet50-train:1.0",
        command=["torchrun", "/workspace/train.py"],
        gpus=1,
        batch=64,
        min_batch=64,
        max_batch=512,
        max_gpus=2,
        max_batch_per_gpu=128,
        work=6000,
        annotations=annotations,
    )


def test_every_key_bellows_writes_is_a_journal_key() -> None:
    """keys.JOURNAL_KEYS is every ``bellows.io/`` key of :mod:`bellows.kube.keys` that is not an
    owner setting: a key added there without a place in one of the two fails here."""
    written = {
        value
        for name, value in vars(keys).items()
        if name.isupper()
        and isinstance(value, str)
        and value.startswith(keys.PREFIX)
        and value != keys.PREFIX
    }
    assert written - set(keys.OWNER_KEYS) == keys.JOURNAL_KEYS
    assert not keys.JOURNAL_KEYS & set(keys.OWNER_KEYS)
    assert set(FORGED) <= keys.JOURNAL_KEYS


@pytest.mark.parametrize("kind", ["PyTorchJob", "TrainJob"])
@pytest.mark.parametrize("key", sorted(FORGED))
def test_a_journal_key_in_the_annotations_input_is_refused_naming_it(kind: str, key: str) -> None:
    with pytest.raises(SpecError) as caught:
        _manifest(kind, **{key: FORGED[key]})
    message = str(caught.value)
    assert f"annotations[{key}]" in message
    assert "Bellows' own journal, written by the controller" in message
    for allowed in keys.OWNER_KEYS:
        assert allowed in message  # what is allowed instead


def test_an_unknown_bellows_key_is_refused_and_other_annotations_pass() -> None:
    with pytest.raises(SpecError, match=r"annotations\[bellows.io/granted\].*not a Bellows"):
        _manifest(**{"bellows.io/granted": "by admin"})
    made = _manifest(**{"team.example/owner": "ml", keys.MIN_RUNTIME_SECONDS: "600"})
    notes = made["metadata"]["annotations"]
    assert notes["team.example/owner"] == "ml"
    assert notes[keys.MIN_RUNTIME_SECONDS] == "600"
    assert not set(notes) & keys.JOURNAL_KEYS


@given(
    key=st.sampled_from(sorted(keys.JOURNAL_KEYS)),
    value=st.text(max_size=40),
    others=st.dictionaries(st.from_regex(r"team\.example/[a-z]{1,8}", fullmatch=True), st.text()),
)
def test_no_input_gets_a_journal_key_into_the_job(
    key: str, value: str, others: dict[str, str]
) -> None:
    """Whatever its value and the annotations beside it, a journal key is refused by name."""
    with pytest.raises(SpecError, match=f"annotations\\[{key}\\]"):
        _manifest(**{**others, key: value})
