"""Fixtures shared by every test: where the real measured data lies."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """``../shared/data`` beside the checkout, or ``$BELLOWS_SHARED_DATA``."""
    override = os.environ.get("BELLOWS_SHARED_DATA")
    return Path(override) if override else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.fail(f"real data not found at {path}; set BELLOWS_SHARED_DATA")
    return path
