"""Fixtures shared by every test: where the real measured data lies."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from bellows.cli.data import given_data_folder

REPO = Path(__file__).resolve().parents[1]

# No per-example deadline: CI may share its two cores with other work, and speed targets live
# in benchmarks, never in timed tests (a deadline once failed a codec test at 261 ms).
settings.register_profile("bellows", deadline=None)
settings.load_profile("bellows")


def load_script(path: Path) -> Any:
    """A script of the repository (a benchmark, a hack or an example: not a package) loaded
    as a module by path, registered in ``sys.modules`` (its dataclasses look themselves up
    there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


def shared_data_dir() -> Path:
    """``$BELLOWS_DATA`` (or its earlier name ``$BELLOWS_SHARED_DATA``), else ``../shared/data``
    beside the checkout."""
    return given_data_folder() or REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.fail(f"real data not found at {path}; set BELLOWS_DATA")
    return path
