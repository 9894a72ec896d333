"""Fixtures shared by every test: where the real measured data lies; helpers many use."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
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


async def delete_as_owner(
    api: Any, kind: Any, namespace: str, name: str, *, uid: str, timeout_s: float = 20.0
) -> None:
    """Delete job ``uid`` as its owner would: at the resourceVersion just read, read again
    and retried when something wrote the job between the read and the delete (an operator's
    status: a 409 on the precondition), until the server takes it (gone, or terminating)."""
    deadline = time.monotonic() + timeout_s
    while True:
        obj = await api.get_job(kind, namespace, name)
        assert obj is not None, f"{namespace}/{name} is gone before its owner deleted it"
        meta = obj["metadata"]
        assert meta["uid"] == uid, f"{namespace}/{name} is another job now ({meta['uid']})"
        deleted = await api.delete_job(
            kind, namespace, name, uid=uid, resource_version=meta["resourceVersion"]
        )
        if deleted:
            return
        assert time.monotonic() < deadline, f"{namespace}/{name} was never deleted"
        await asyncio.sleep(0.02)
