"""Kueue's pinned CRDs: the workspace's copies are the upstream files, found in the
workspace's layout or downloaded into the cache, never used unverified."""

from __future__ import annotations

import io
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from bellows.emulator.crds import (
    KUEUE_PINNED,
    KUEUE_PINS_VERSION,
    PINNED,
    UPSTREAM,
    CrdError,
    kueue_crd_paths,
    sha256_of,
)
from bellows.emulator.schemas import load_crd

from .test_crds import Upstream, serving


@pytest.fixture
def kueue_upstream(shared_data: Path) -> Iterator[Upstream]:
    """A raw-file server with the upstream layout, serving the workspace's Kueue CRDs."""
    yield from serving(KUEUE_PINNED, shared_data / "crds")


def test_the_kueue_pins_are_the_workspace_copies_of_the_upstream_files(shared_data: Path) -> None:
    plurals = ["resourceflavors", "clusterqueues", "localqueues", "workloads"]
    assert [pin.workspace for pin in KUEUE_PINNED] == [f"kueue-v0.19.2/{p}.yaml" for p in plurals]
    for pin in KUEUE_PINNED:
        assert sha256_of(shared_data / "crds" / pin.workspace) == pin.sha256
    assert [pin.url() for pin in KUEUE_PINNED] == [
        f"{UPSTREAM}/kubernetes-sigs/kueue/v0.19.2/config/components/crd/bases/"
        f"kueue.x-k8s.io_{p}.yaml"
        for p in plurals
    ]
    assert KUEUE_PINS_VERSION == "kueue-v0.19.2"
    assert not set(KUEUE_PINNED) & set(PINNED)  # a cluster without Kueue downloads none
    # the workspace's files, found where the workspace keeps them, with no download
    files = kueue_crd_paths(shared_data / "crds")
    assert files == [shared_data / "crds" / pin.workspace for pin in KUEUE_PINNED]
    kinds = {(crd.kind, crd.version) for path in files for crd in load_crd(path)}
    assert {kind for kind, _ in kinds} == {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Workload",
    }
    assert {version for _, version in kinds} == {"v1beta2"}  # the storage version only


def test_without_a_folder_of_them_they_are_downloaded_once_into_the_cache(
    kueue_upstream: Upstream, tmp_path: Path
) -> None:
    progress = io.StringIO()
    cache = tmp_path / "cache"
    files = kueue_crd_paths(
        tmp_path / "none", cache=cache, base_url=kueue_upstream.base, stream=progress
    )
    assert files == [cache / KUEUE_PINS_VERSION / pin.file for pin in KUEUE_PINNED]
    assert [sha256_of(f) for f in files] == [pin.sha256 for pin in KUEUE_PINNED]
    assert progress.getvalue().count("SHA-256 verified") == len(KUEUE_PINNED)
    assert kueue_crd_paths(None, cache=cache, base_url=kueue_upstream.base) == files
    assert sum(kueue_upstream.hits.values()) == len(KUEUE_PINNED)  # the second time: cached
    # the cache's own (flat) layout is a folder of them too
    assert kueue_crd_paths(cache / KUEUE_PINS_VERSION) == files


def test_a_folder_copy_that_does_not_match_its_pin_is_refused(
    shared_data: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "crds"
    shutil.copytree(shared_data / "crds" / "kueue-v0.19.2", folder / "kueue-v0.19.2")
    assert kueue_crd_paths(folder)[0].parent == folder / "kueue-v0.19.2"
    workloads = folder / KUEUE_PINNED[-1].workspace
    workloads.write_bytes(workloads.read_bytes() + b"# edited\n")
    with pytest.raises(CrdError, match="is not the pinned"):
        kueue_crd_paths(folder)
