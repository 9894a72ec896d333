"""Where the commands find the real data they may read: ``$BELLOWS_DATA``, else the
workspace's ``shared/data`` beside the checkout; and the CRDs the demo's cluster serves.

The simulator needs none of it (its model profiles and cluster fit are embedded, see
``bellows.sim.workloads.models`` and ``bellows.scaling.reference``). The real traces are read
only by ``bellows reproduce``'s *Beyond the paper* (and the benchmarks), and the CRDs by
``bellows demo``, which downloads the pinned upstream files once when no folder of them is
found (``bellows.emulator.crds``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

if TYPE_CHECKING:
    from bellows.emulator.crds import PinnedCrd

__all__ = [
    "DATA_ENV",
    "DATA_ENV_ALIAS",
    "crd_files",
    "data_folder",
    "given_data_folder",
    "no_data_folder",
    "workspace_data",
]

DATA_ENV: Final = "BELLOWS_DATA"
DATA_ENV_ALIAS: Final = "BELLOWS_SHARED_DATA"  # its earlier name, still honoured
_WORKSPACE: Final = ("shared", "data")  # the project's workspace keeps the data beside the repo
_KNOWN: Final = ("crds", "itp", "pollux")  # a shared/data holds at least one of these


def given_data_folder(env: Mapping[str, str] = os.environ) -> Path | None:
    """``$BELLOWS_DATA`` (or its alias ``$BELLOWS_SHARED_DATA``), if set."""
    for name in (DATA_ENV, DATA_ENV_ALIAS):
        if env.get(name):
            return Path(env[name])
    return None


def workspace_data() -> Path | None:
    """``shared/data`` beside an ancestor of the working folder or of this source file: the
    workspace's layout. ``None`` for an installed package used elsewhere."""
    for base in (Path.cwd(), Path(__file__).resolve()):
        for parent in (base, *base.parents):
            candidate = parent.parent.joinpath(*_WORKSPACE)
            # an unrelated shared/data (one without any of the real data's folders) is not it
            if any((candidate / name).is_dir() for name in _KNOWN):
                return candidate
    return None


def data_folder(env: Mapping[str, str] = os.environ) -> Path | None:
    """The real data's folder: the one given by the environment, else the workspace's; ``None``
    when neither is there."""
    return given_data_folder(env) or workspace_data()


def no_data_folder(option: str = "--data") -> str:
    """What to say when no data folder is found: the option and the variable that give one."""
    return (
        f"no folder of the real data (the one holding itp/ and pollux/) was found: give it "
        f"with {option} or ${DATA_ENV} (the traces are not part of the package: itp/ is "
        "microsoft/elasticflow-traces, pollux/ the Pollux artifact, petuum/adaptdl "
        "osdi21-artifact)"
    )


def _yaml_in(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.yaml")) if folder.is_dir() else []


def crd_files(given: Path | None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """The CRD files for the emulated cluster: the folder ``given`` (``--crds``) or
    ``$BELLOWS_CRDS``, which must hold them; else ``crds/`` of the data folder; else the
    pinned upstream CRDs from the user's cache, downloaded and verified on first use."""
    # Imported here, not above: the kube package loads the Kubernetes client (~2 s), which
    # the commands that only read the data folder (reproduce) do not need.
    from bellows.emulator.crds import (
        CRDS_ENV,
        MIRROR_ENV,
        CrdError,
        cache_root,
        cached_crds,
    )

    folder, source = (given, "--crds") if given else (env.get(CRDS_ENV), f"${CRDS_ENV}")
    if folder:
        files = _yaml_in(Path(folder))
        if not files:
            raise click.UsageError(
                f"{source} {folder}: no CRD files (*.yaml) there; give a folder with the "
                "PyTorchJob and MPIJob CRDs, or neither --crds nor "
                f"{CRDS_ENV} to use the pinned upstream ones (downloaded once)"
            )
        return files
    data = data_folder(env)
    files = _yaml_in(data / "crds") if data is not None else []
    if files:
        return files
    try:
        return cached_crds(cache=cache_root(env), base_url=env.get(MIRROR_ENV), stream=sys.stderr)
    except CrdError as error:
        raise click.ClickException(str(error)) from None


def trainer_crd_files(kubeflow: Sequence[Path], env: Mapping[str, str] = os.environ) -> list[Path]:
    """Kubeflow Trainer v2.3.0's pinned CRDs for ``demo --kinds trainjob``, found as
    :func:`kueue_crd_files` finds Kueue's (``trainer-v2.3.0/`` beside the Kubeflow CRDs)."""
    from bellows.emulator.crds import TRAINER_PINNED

    return _pinned_files(TRAINER_PINNED, kubeflow, env)


def kueue_crd_files(kubeflow: Sequence[Path], env: Mapping[str, str] = os.environ) -> list[Path]:
    """Kueue's pinned CRDs for ``demo --kueue``: beside the Kubeflow CRDs in use (a folder in
    the workspace's layout, ``kueue-v0.19.2/<plural>.yaml``, or the download cache's), else
    from the user's cache, downloaded and verified on first use."""
    from bellows.emulator.crds import KUEUE_PINNED

    return _pinned_files(KUEUE_PINNED, kubeflow, env)


def _pinned_files(
    pins: Sequence[PinnedCrd], kubeflow: Sequence[Path], env: Mapping[str, str]
) -> list[Path]:
    """``pins`` beside the Kubeflow CRDs in use, else from the user's verified cache."""
    from bellows.emulator.crds import MIRROR_ENV, CrdError, cache_root, cached_crds, find_pinned

    folder = kubeflow[0].parent if kubeflow else None
    try:
        if folder is not None and (found := find_pinned(folder, pins)) is not None:
            return found
        return cached_crds(
            cache=cache_root(env), base_url=env.get(MIRROR_ENV), stream=sys.stderr, pins=pins
        )
    except CrdError as error:
        raise click.ClickException(str(error)) from None
