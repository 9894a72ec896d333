"""The pinned upstream CRDs of the Kubeflow kinds and of Kueue: release URLs, SHA-256
digests, and a verified download cache in the user's cache folder.

The emulated cluster (``bellows demo``, the tests) serves the real CustomResourceDefinitions.
In the project's workspace they lie in ``../shared/data/crds``; anywhere else
:func:`cached_crds` downloads them once from their upstream release tags into
``$XDG_CACHE_HOME/bellows/crds/<version>/`` (``~/.cache`` when unset) and returns them from
there afterwards. Kueue's CRDs (:data:`KUEUE_PINNED`, served when the cluster emulates Kueue)
are a table of their own, found by :func:`kueue_crd_paths`: in a folder of CRDs, either in the
workspace's layout (``kueue-v0.19.2/<plural>.yaml``) or in the cache's (flat), else from the
cache, downloaded once like the others. Nothing unverified is ever returned: a download is
written under a temporary name and renamed into place only once its SHA-256 matches the pin,
and a cached file whose digest no longer matches is refused and downloaded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Final, TextIO

from bellows.inputs import shown

__all__ = [
    "CRDS_ENV",
    "KUEUE_PINNED",
    "KUEUE_PINS_VERSION",
    "MIRROR_ENV",
    "PINNED",
    "PINS_VERSION",
    "TRAINER_PINNED",
    "TRAINER_PINS_VERSION",
    "UPSTREAM",
    "CrdError",
    "PinnedCrd",
    "cache_root",
    "cached_crds",
    "find_pinned",
    "kueue_crd_paths",
    "pins_version",
    "sha256_of",
    "trainer_crd_paths",
]

CRDS_ENV: Final = "BELLOWS_CRDS"  # a folder of CRD files to use instead of the cache
MIRROR_ENV: Final = "BELLOWS_CRD_MIRROR"  # a server with the same paths as UPSTREAM
UPSTREAM: Final = "https://raw.githubusercontent.com"
MAX_CRD_BYTES: Final = 16 << 20  # the pinned files are ~0.65 MB; a server sending more is wrong
_CHUNK: Final = 64 << 10


@dataclass(frozen=True)
class PinnedCrd:
    """One upstream CRD file: the release it belongs to, where it lies at that tag, and the
    SHA-256 of its bytes there."""

    release: str  # names the cached file: "<release>_<file name upstream>"
    repo: str  # owner/name of the upstream repository
    tag: str
    path: str  # inside the repository at ``tag``
    sha256: str
    local: str = ""  # where the workspace's ``shared/data/crds`` keeps it, when not ``file``

    @property
    def file(self) -> str:
        """The file's name in the cache (and, unless :attr:`local` says otherwise, in the
        workspace's ``shared/data/crds``)."""
        return f"{self.release}_{PurePosixPath(self.path).name}"

    @property
    def workspace(self) -> str:
        """Its path inside the workspace's ``shared/data/crds``."""
        return self.local or self.file

    def url(self, base: str = UPSTREAM) -> str:
        """Where to download it: ``base`` serves raw files as ``<owner/name>/<tag>/<path>``."""
        return f"{base.rstrip('/')}/{self.repo}/{self.tag}/{self.path}"


PINNED: Final = (
    PinnedCrd(
        "training-operator-v1.9.4",
        "kubeflow/trainer",  # the training-operator's repository, renamed
        "v1.9.4",
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed",
    ),
    PinnedCrd(
        "mpi-operator-v0.8.2",
        "kubeflow/mpi-operator",
        "v0.8.2",
        "manifests/base/kubeflow.org_mpijobs.yaml",
        "78b0131f931fcc8d99f6ce0407281f41b62527e443ec691d26d9634b390ad3bb",
    ),
)
"""The CRDs the emulated cluster always needs, by upstream release."""


def _kueue(plural: str, sha256: str) -> PinnedCrd:
    return PinnedCrd(
        "kueue-v0.19.2",
        "kubernetes-sigs/kueue",
        "v0.19.2",
        f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml",
        sha256,
        local=f"kueue-v0.19.2/{plural}.yaml",
    )


KUEUE_PINNED: Final = (
    _kueue("resourceflavors", "19e339c47e9ca3fa2c9eeddd27715a512f765c4794ed859733408a9715720173"),
    _kueue("clusterqueues", "e0a5fc9b370c70f3d993d4f599865817338ecf94187b30b15b12ff33c579bd55"),
    _kueue("localqueues", "dd10ef8d3578e7212fa52763549e7b6be0949793a5b924495fcd293330109fed"),
    _kueue("workloads", "1970ff6fcc5dc1a29e3f290ed736032c5d4509c94efe2c642d64a244ad1b8aa5"),
)
"""Kueue's CRDs that the emulated cluster serves when it emulates Kueue (kept apart from
:data:`PINNED`: a cluster without Kueue needs none of them)."""


_TRAINER_SHA256: Final = {
    "trainjobs": "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416",
    "clustertrainingruntimes": "ec84dc3388fcdbe8c61d3c247a773d14458dd9438e995bea8e50d2a18080eef9",
    "trainingruntimes": "69b8dbdf60a18e28cddcc2b8dfc4ce72a943e14b531b9389d593118faee4919f",
}
TRAINER_PINNED: Final = tuple(
    PinnedCrd(
        "trainer-v2.3.0",
        "kubeflow/trainer",
        "v2.3.0",
        f"manifests/base/crds/trainer.kubeflow.org_{plural}.yaml",
        sha256,
        local=f"trainer-v2.3.0/trainer.kubeflow.org_{plural}.yaml",
    )
    for plural, sha256 in _TRAINER_SHA256.items()
)
"""Kubeflow Trainer v2's CRDs, served when the cluster emulates the Trainer (TrainJob)."""


def pins_version(pins: Sequence[PinnedCrd]) -> str:
    """The cache folder of a table of pins: its releases joined (a changed pin downloads
    into a new folder)."""
    return "_".join(dict.fromkeys(pin.release for pin in pins))


PINS_VERSION: Final = pins_version(PINNED)
"""The cache folder of :data:`PINNED`."""

KUEUE_PINS_VERSION: Final = pins_version(KUEUE_PINNED)
"""The cache folder of :data:`KUEUE_PINNED`."""

TRAINER_PINS_VERSION: Final = pins_version(TRAINER_PINNED)
"""The cache folder of :data:`TRAINER_PINNED`."""


class CrdError(Exception):
    """The CRDs could not be had: no network, a bad mirror, or bytes that do not match a pin.
    The message is one paragraph that says what to do instead."""


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_CACHE_HOME/bellows/crds``, or ``~/.cache/bellows/crds``."""
    xdg = env.get("XDG_CACHE_HOME", "")
    # the XDG spec: a relative path there is invalid and is ignored
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "bellows" / "crds"


def sha256_of(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _digest_or_why(path: Path) -> str:
    try:
        return sha256_of(path)
    except OSError as error:  # unreadable, or a folder: not the pinned file either way
        return f"unknown ({_reason(error)})"


def _where_to_get(pins: Sequence[PinnedCrd] = PINNED) -> str:
    """What to do instead of the download; the release URLs, whatever server was tried."""
    urls = "".join(f"\n  {pin.url()}" for pin in pins)
    return (
        f"to run without a download, put these files in a folder and set {CRDS_ENV} to it "
        f"(or pass --crds):{urls}"
    )


def _check_base(base: str) -> str:
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CrdError(
            f"{MIRROR_ENV}={shown(base)} is invalid: expected an http(s) URL that serves the "
            f"files as <owner/name>/<tag>/<path>, like {UPSTREAM}"
        )
    return base


class _Progress:
    """One line on ``stream`` per download: updated in place on a terminal, else written once
    when the download ends (a log keeps one line, not hundreds)."""

    def __init__(self, stream: TextIO | None, pin: PinnedCrd, url: str) -> None:
        self.stream = stream
        self.head = f"bellows: downloading {pin.file} from {url}"
        self.live = stream is not None and stream.isatty()
        self._write(f"{self.head} …", end="" if self.live else "\n")

    def _write(self, text: str, *, end: str = "") -> None:
        if self.stream is not None:
            self.stream.write(text + end)
            self.stream.flush()

    def update(self, done: int, total: int | None) -> None:
        if self.live:
            of = f" of {total / 1e3:.0f}" if total else ""
            self._write(f"\r{self.head} … {done / 1e3:.0f}{of} kB")

    def end(self, text: str) -> None:
        self._write(f"\r{self.head} … {text}" if self.live else f"  {text}", end="\n")


def _fetch(url: str, sink: IO[bytes], progress: _Progress, timeout_s: float) -> str:
    """Stream ``url`` into ``sink``; return the SHA-256 of what came."""
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        if total is not None and total > MAX_CRD_BYTES:
            raise CrdError(f"{url}: {total} bytes announced, more than a CRD file (at most "
                           f"{MAX_CRD_BYTES}); is {MIRROR_ENV} the right server?")  # fmt: skip
        done = 0
        for chunk in iter(lambda: response.read(_CHUNK), b""):
            done += len(chunk)
            if done > MAX_CRD_BYTES:
                raise CrdError(f"{url}: more than {MAX_CRD_BYTES} bytes, more than a CRD "
                               f"file; is {MIRROR_ENV} the right server?")  # fmt: skip
            digest.update(chunk)
            sink.write(chunk)
            progress.update(done, total)
    if total is not None and done < total:  # read(n) returns short, not an error, at EOF
        raise ConnectionError(f"the connection closed after {done} of {total} bytes")
    return digest.hexdigest()


def _reason(error: BaseException) -> str:
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return str(error.reason)
    return str(error) or type(error).__name__


def _download(
    pin: PinnedCrd,
    base: str,
    target: Path,
    *,
    stream: TextIO | None,
    timeout_s: float,
    pins: Sequence[PinnedCrd] = PINNED,
) -> None:
    """Download ``pin`` to ``target`` atomically: a temporary file beside it, checked against
    the pin, then renamed over it. On any failure nothing is left behind."""
    url = pin.url(base)
    progress = _Progress(stream, pin, url)
    part: Path | None = None
    try:
        with tempfile.NamedTemporaryFile(
            dir=target.parent, prefix=f".{pin.file}.", suffix=".part", delete=False
        ) as handle:
            part = Path(handle.name)
            got = _fetch(url, handle, progress, timeout_s)
            if got != pin.sha256:
                raise CrdError(
                    f"{pin.file}: downloaded from {url}, its SHA-256 is {got} but the pinned "
                    f"one is {pin.sha256}; nothing was kept. Something between here and the "
                    f"server changed the file; {_where_to_get(pins)}"
                )
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(part, target)  # atomic: readers see the old file or the verified one
    except CrdError:
        progress.end("refused")
        raise
    except (OSError, ValueError, http.client.HTTPException) as error:
        # URLError, HTTPError, timeouts and a body cut short are OSErrors; a broken status
        # line or header an HTTPException; a malformed URL a ValueError
        progress.end("failed")
        raise CrdError(
            f"could not download {pin.file} from {url} into {target.parent} "
            f"({_reason(error)}); {_where_to_get(pins)}"
        ) from error
    finally:
        if part is not None:
            with contextlib.suppress(FileNotFoundError):
                part.unlink()
    progress.end(f"{target.stat().st_size / 1e3:.0f} kB, SHA-256 verified")


def cached_crds(
    *,
    cache: Path | None = None,
    base_url: str | None = None,
    stream: TextIO | None,
    timeout_s: float = 60.0,
    pins: Sequence[PinnedCrd] = PINNED,
) -> list[Path]:
    """The pinned CRD files (``pins``: :data:`PINNED` unless told), each verified against its
    SHA-256, downloaded first where the cache lacks it or holds a file that no longer matches.

    ``cache`` defaults to :func:`cache_root`; the files go in its :func:`pins_version` folder
    (``PINS_VERSION`` for :data:`PINNED`).
    ``base_url`` (default ``$BELLOWS_CRD_MIRROR``, else :data:`UPSTREAM`) is the server: a
    mirror must serve the same paths; the pins still apply. Progress lines go to ``stream``
    (``None``: quiet). Raises :class:`CrdError` with what to do when a file cannot be had."""
    base = _check_base(base_url or os.environ.get(MIRROR_ENV) or UPSTREAM)
    folder = (cache_root() if cache is None else cache) / pins_version(pins)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CrdError(
            f"{folder}: cannot create the CRD cache ({_reason(error)}); set XDG_CACHE_HOME "
            f"to a writable folder, or {CRDS_ENV} to a folder of the CRDs"
        ) from error
    files = []
    for pin in pins:
        target = folder / pin.file
        if target.exists():
            got = _digest_or_why(target)
            if got == pin.sha256:
                files.append(target)
                continue
            if stream is not None:
                print(f"bellows: {target}: SHA-256 {got} does not match the pinned "
                      f"{pin.sha256}; refused, downloading it again", file=stream)  # fmt: skip
        _download(pin, base, target, stream=stream, timeout_s=timeout_s, pins=pins)
        files.append(target)
    return files


def find_pinned(folder: Path, pins: Sequence[PinnedCrd]) -> list[Path] | None:
    """The files of ``pins`` in ``folder``, each at its workspace path
    (:attr:`PinnedCrd.workspace`) or under its cache name; ``None`` when any is missing.
    A file found there whose SHA-256 is not the pinned one is refused (:class:`CrdError`)."""
    found: list[Path] = []
    for pin in pins:
        path = next((p for p in (folder / pin.workspace, folder / pin.file) if p.is_file()), None)
        if path is None:
            return None
        got = _digest_or_why(path)
        if got != pin.sha256:
            raise CrdError(
                f"{path}: SHA-256 {got} is not the pinned {pin.sha256} of {pin.url()}; "
                f"replace it with that file, or remove it to use the cached download"
            )
        found.append(path)
    return found


def kueue_crd_paths(
    folder: Path | None = None,
    *,
    cache: Path | None = None,
    base_url: str | None = None,
    stream: TextIO | None = None,
    timeout_s: float = 60.0,
) -> list[Path]:
    """Kueue's pinned CRDs (:data:`KUEUE_PINNED`), to pass to ``EmulatedCluster(crds=...)``
    beside the Kubeflow ones: from ``folder`` (a folder of CRDs such as the workspace's
    ``shared/data/crds``, which keeps them in ``kueue-v0.19.2/``) when it holds them all,
    else from the download cache (:func:`cached_crds`), downloaded and verified once."""
    return _pinned_paths(
        KUEUE_PINNED, folder, cache=cache, base_url=base_url, stream=stream, timeout_s=timeout_s
    )


def _pinned_paths(
    pins: Sequence[PinnedCrd],
    folder: Path | None,
    *,
    cache: Path | None,
    base_url: str | None,
    stream: TextIO | None,
    timeout_s: float,
) -> list[Path]:
    """``pins`` from ``folder`` when it holds them all, else from the verified cache."""
    if folder is not None and (found := find_pinned(folder, pins)) is not None:
        return found
    return cached_crds(
        cache=cache, base_url=base_url, stream=stream, timeout_s=timeout_s, pins=pins
    )


def trainer_crd_paths(
    folder: Path | None = None,
    *,
    cache: Path | None = None,
    base_url: str | None = None,
    stream: TextIO | None = None,
    timeout_s: float = 60.0,
) -> list[Path]:
    """Kubeflow Trainer v2.3.0's pinned CRDs (:data:`TRAINER_PINNED`), as
    :func:`kueue_crd_paths` finds Kueue's: from ``folder`` (the workspace keeps them in
    ``trainer-v2.3.0/``) when it holds them all, else from the verified download cache."""
    return _pinned_paths(
        TRAINER_PINNED, folder, cache=cache, base_url=base_url, stream=stream, timeout_s=timeout_s
    )
