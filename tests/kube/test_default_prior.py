"""A job that gives no profile runs on the documented default prior (and is learned online)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from bellows.kube import PyTorchJobKind, keys
from bellows.kube.specs import build_spec
from bellows.scaling import parse_job_profile
from bellows.scaling.profiles import DEFAULT_PRIOR

DOCS = Path(__file__).resolve().parents[2] / "docs" / "user-guide-annotations.md"


def test_a_job_without_profile_annotations_gets_the_default_prior(
    examples: dict[str, Any],
) -> None:
    obj = copy.deepcopy(examples["PyTorchJob"])
    obj["metadata"].update(uid="u-1", resourceVersion="1")
    notes = obj["metadata"]["annotations"]
    notes.pop(keys.PROFILE_CONFIGMAP, None)
    notes.pop(keys.PROFILE, None)
    settings = keys.parse_settings(notes)
    assert settings.profile is DEFAULT_PRIOR
    view = PyTorchJobKind().view(obj, settings.env_names)
    spec = build_spec(view, settings, DEFAULT_PRIOR)
    assert (spec.weights, spec.profile) == (DEFAULT_PRIOR.weights, DEFAULT_PRIOR.step)


def test_the_default_prior_is_the_one_the_user_guide_documents() -> None:
    text = DOCS.read_text()
    match = re.search(r"\*\*default prior\*\*.*?```json\n(.*?)```", text, re.S)
    assert match is not None, "the user guide shows the default prior's JSON"
    documented = parse_job_profile(json.loads(match.group(1)))
    assert (documented.weights, documented.step) == (DEFAULT_PRIOR.weights, DEFAULT_PRIOR.step)
