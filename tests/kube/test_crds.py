"""The pinned CRDs: download, cache and checksum, against a local server that this test starts
and that serves the workspace's copies of the upstream files at their upstream paths."""

from __future__ import annotations

import hashlib
import io
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.data import crd_files, data_folder, workspace_data
from bellows.cli.main import main
from bellows.emulator.crds import (
    MAX_CRD_BYTES,
    MIRROR_ENV,
    PINNED,
    PINS_VERSION,
    UPSTREAM,
    CrdError,
    PinnedCrd,
    cache_root,
    cached_crds,
    sha256_of,
)
from bellows.emulator.schemas import load_crd


@dataclass
class Upstream:
    """A raw-file server with the upstream layout (``<owner/name>/<tag>/<path>``)."""

    files: dict[str, bytes]
    base: str = ""
    hits: Counter[str] = field(default_factory=Counter)
    status: int = 200
    announce: int | None = None  # a Content-Length to send instead of the true one
    endless: bool = False  # no Content-Length, and more bytes than any CRD
    cut: bool = False  # the true Content-Length, then half the body and the connection closed

    def path_of(self, file: str) -> str:
        pin = next(p for p in PINNED if p.file == file)
        return pin.url(self.base)[len(self.base) :]


def _handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            upstream.hits[self.path] += 1
            body = upstream.files.get(self.path)
            if body is None or upstream.status != 200:
                self.send_error(404 if body is None else upstream.status)
                return
            self.send_response(200)
            if upstream.endless:
                self.end_headers()
                chunk = b"#" * (1 << 20)
                for _ in range(MAX_CRD_BYTES // len(chunk) + 2):
                    self.wfile.write(chunk)
                return
            self.send_header("Content-Length", str(upstream.announce or len(body)))
            self.end_headers()
            if upstream.announce is None:
                self.wfile.write(body[: len(body) // 2] if upstream.cut else body)

        def log_message(self, *_: object) -> None:  # keep the test output clean
            pass

    return Handler


@pytest.fixture
def upstream(shared_data: Path) -> Iterator[Upstream]:
    yield from serving(PINNED, shared_data / "crds")


def serving(pins: Sequence[PinnedCrd], crds: Path) -> Iterator[Upstream]:
    """A raw-file server with the upstream layout, serving the workspace's copies of
    ``pins`` (found in ``crds`` as the workspace keeps them), until the generator closes."""
    served = Upstream(files={})
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.base = f"http://127.0.0.1:{server.server_address[1]}"
    for pin in pins:
        path = pin.url(served.base)[len(served.base) :]
        served.files[path] = (crds / pin.workspace).read_bytes()
    # a short poll: shutdown() waits for it, once per test
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_the_pins_are_the_workspace_copies_of_the_upstream_files(shared_data: Path) -> None:
    # the table pins exactly the CRDs the emulated cluster loads (crds/*.yaml), byte for byte
    loaded = sorted(p.name for p in (shared_data / "crds").glob("*.yaml"))
    assert sorted(pin.file for pin in PINNED) == loaded
    for pin in PINNED:
        assert sha256_of(shared_data / "crds" / pin.file) == pin.sha256
    # the release files, at their tags (the training-operator's repository is now
    # kubeflow/trainer; its v1 tags keep the CRDs under manifests/base/crds)
    assert [pin.url() for pin in PINNED] == [
        f"{UPSTREAM}/kubeflow/trainer/v1.9.4/manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        f"{UPSTREAM}/kubeflow/mpi-operator/v0.8.2/manifests/base/kubeflow.org_mpijobs.yaml",
    ]
    assert PINS_VERSION == "training-operator-v1.9.4_mpi-operator-v0.8.2"


def test_downloads_once_verifies_and_serves_from_the_cache(
    upstream: Upstream, tmp_path: Path, shared_data: Path
) -> None:
    progress = io.StringIO()
    files = cached_crds(cache=tmp_path, base_url=upstream.base, stream=progress)
    assert [f.parent for f in files] == [tmp_path / PINS_VERSION] * len(PINNED)
    for pin, path in zip(PINNED, files, strict=True):
        assert path.name == pin.file
        assert path.read_bytes() == (shared_data / "crds" / pin.file).read_bytes()
        assert upstream.hits[upstream.path_of(pin.file)] == 1
    text = progress.getvalue()
    assert text.count("bellows: downloading") == len(PINNED)
    assert text.count("SHA-256 verified") == len(PINNED)
    assert _leftovers(tmp_path / PINS_VERSION) == []
    kinds = {crd.kind for path in files for crd in load_crd(path)}
    assert kinds == {"PyTorchJob", "MPIJob"}

    again = io.StringIO()
    assert cached_crds(cache=tmp_path, base_url=upstream.base, stream=again) == files
    assert again.getvalue() == ""
    assert sum(upstream.hits.values()) == len(PINNED)  # nothing downloaded the second time


def test_a_cached_file_that_no_longer_matches_is_refused_and_downloaded_again(
    upstream: Upstream, tmp_path: Path
) -> None:
    first = cached_crds(cache=tmp_path, base_url=upstream.base, stream=None)
    tampered = first[0]
    tampered.write_bytes(tampered.read_bytes().replace(b"PyTorchJob", b"PyTorchJab", 1))
    progress = io.StringIO()
    again = cached_crds(cache=tmp_path, base_url=upstream.base, stream=progress)
    assert again == first
    assert sha256_of(tampered) == PINNED[0].sha256
    assert "does not match the pinned" in progress.getvalue()
    assert upstream.hits[upstream.path_of(PINNED[0].file)] == 2
    assert upstream.hits[upstream.path_of(PINNED[1].file)] == 1


def test_a_download_that_does_not_match_its_pin_is_never_kept(
    upstream: Upstream, tmp_path: Path
) -> None:
    path = upstream.path_of(PINNED[1].file)
    upstream.files[path] = upstream.files[path] + b"# one more line\n"
    wrong = hashlib.sha256(upstream.files[path]).hexdigest()
    with pytest.raises(CrdError) as caught:
        cached_crds(cache=tmp_path, base_url=upstream.base, stream=None)
    message = str(caught.value)
    assert PINNED[1].file in message
    assert wrong in message  # both hashes, named
    assert PINNED[1].sha256 in message
    folder = tmp_path / PINS_VERSION
    assert sorted(p.name for p in folder.iterdir()) == [PINNED[0].file]  # no part, no bad file


def test_a_tampered_cache_with_a_tampered_server_keeps_nothing(
    upstream: Upstream, tmp_path: Path
) -> None:
    cached = cached_crds(cache=tmp_path, base_url=upstream.base, stream=None)[0]
    cached.write_bytes(b"kind: Something\n")
    upstream.files[upstream.path_of(PINNED[0].file)] = b"kind: SomethingElse\n"
    with pytest.raises(CrdError, match="nothing was kept"):
        cached_crds(cache=tmp_path, base_url=upstream.base, stream=None)
    # the refused file may stay on disk but is checked again, and refused again, next time
    with pytest.raises(CrdError, match="nothing was kept"):
        cached_crds(cache=tmp_path, base_url=upstream.base, stream=None)
    assert _leftovers(tmp_path / PINS_VERSION) == []


@pytest.mark.parametrize("case", ["no server", "404", "503", "cut"])
def test_no_network_says_what_to_set_and_where_to_get_the_files(
    case: str, upstream: Upstream, tmp_path: Path
) -> None:
    base = upstream.base
    if case == "no server":  # a port nobody listens on: what a machine without network sees
        free = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        base = f"http://127.0.0.1:{free.server_address[1]}"
        free.server_close()
    elif case == "404":
        upstream.files.clear()
    elif case == "503":
        upstream.status = 503
    else:  # the connection drops halfway through the body
        upstream.cut = True
    size = len(upstream.files[upstream.path_of(PINNED[0].file)]) if upstream.files else 0
    progress = io.StringIO()
    with pytest.raises(CrdError) as caught:
        cached_crds(cache=tmp_path, base_url=base, stream=progress, timeout_s=10)
    message = str(caught.value)
    assert f"from {PINNED[0].url(base)} into" in message  # the URL that was tried
    assert "set BELLOWS_CRDS to it" in message
    for pin in PINNED:  # and where to get the files by hand: their release URLs
        assert f"\n  {pin.url(UPSTREAM)}" in message
    if case in ("404", "503"):
        assert f"HTTP {case}" in message
    if case == "cut":
        assert f"the connection closed after {size // 2} of {size} bytes" in message
    assert "failed" in progress.getvalue()
    assert _leftovers(tmp_path / PINS_VERSION) == []


@pytest.mark.parametrize("mode", ["announced", "streamed"])
def test_a_server_that_sends_more_than_a_crd_is_cut_off(
    mode: str, upstream: Upstream, tmp_path: Path
) -> None:
    if mode == "announced":
        upstream.announce = MAX_CRD_BYTES + 1
    else:
        upstream.endless = True
    with pytest.raises(CrdError, match=f"more than .*{MIRROR_ENV}"):
        cached_crds(cache=tmp_path, base_url=upstream.base, stream=None, timeout_s=30)
    assert list((tmp_path / PINS_VERSION).iterdir()) == []


@pytest.mark.parametrize("base", ["file:///etc", "ftp://mirror", "mirror.example", ""])
def test_a_mirror_must_be_an_http_url(
    base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MIRROR_ENV, base or "http://")
    with pytest.raises(CrdError, match=MIRROR_ENV):
        cached_crds(cache=tmp_path, stream=None)
    assert not (tmp_path / PINS_VERSION).exists()


def test_a_progress_line_updates_in_place_on_a_terminal(upstream: Upstream, tmp_path: Path) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    progress = Terminal()
    cached_crds(cache=tmp_path, base_url=upstream.base, stream=progress)
    lines = progress.getvalue().split("\n")
    assert len(lines) == len(PINNED) + 1  # one line per file, rewritten as bytes come
    assert lines[-1] == ""
    size = len(upstream.files[upstream.path_of(PINNED[0].file)]) / 1e3
    assert lines[0].startswith(f"bellows: downloading {PINNED[0].file} from {upstream.base}")
    assert lines[0].count("\r") > 2
    assert f"of {size:.0f} kB" in lines[0]
    assert lines[0].endswith("SHA-256 verified")


def test_the_cache_is_the_users(tmp_path: Path) -> None:
    home = Path.home()
    assert cache_root({}) == home / ".cache" / "bellows" / "crds"
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "bellows" / "crds"
    # the XDG spec: a relative path is invalid and ignored
    assert cache_root({"XDG_CACHE_HOME": "rel/cache"}) == home / ".cache" / "bellows" / "crds"


def test_the_demo_finds_its_crds_given_then_beside_then_downloaded(
    upstream: Upstream, tmp_path: Path, shared_data: Path
) -> None:
    given = sorted((shared_data / "crds").glob("*.yaml"))
    assert crd_files(shared_data / "crds", env={}) == given
    assert crd_files(None, env={"BELLOWS_CRDS": str(shared_data / "crds")}) == given
    assert crd_files(None, env={"BELLOWS_DATA": str(shared_data)}) == given
    assert crd_files(None, env={"BELLOWS_SHARED_DATA": str(shared_data)}) == given
    # a data folder without crds/ (an installed package with only the traces): download
    env = {
        "BELLOWS_DATA": str(tmp_path / "traces-only"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        MIRROR_ENV: upstream.base,
    }
    files = crd_files(None, env=env)
    assert [f.parent for f in files] == [tmp_path / "cache" / "bellows" / "crds" / PINS_VERSION] * 2
    assert [sha256_of(f) for f in files] == [pin.sha256 for pin in PINNED]


def test_the_demo_without_crds_or_network_stops_with_what_to_set(tmp_path: Path) -> None:
    free = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    base = f"http://127.0.0.1:{free.server_address[1]}"
    free.server_close()
    env = {
        "BELLOWS_CRDS": None,
        "BELLOWS_DATA": str(tmp_path / "none"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        MIRROR_ENV: base,
    }
    result = CliRunner().invoke(main, ["demo", "--gpus", "8", "--minutes", "30"], env=env)
    assert result.exit_code == 1, result.output
    assert "Error: could not download" in result.output
    assert "set BELLOWS_CRDS" in result.output
    assert "Traceback" not in result.output


def test_an_empty_crds_folder_is_refused_by_the_name_it_came_by(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo"], env={"BELLOWS_CRDS": str(tmp_path)})
    assert result.exit_code == 2
    assert f"$BELLOWS_CRDS {tmp_path}: no CRD files" in result.output


def test_the_data_folder_comes_from_the_environment_or_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert data_folder({"BELLOWS_DATA": "/a", "BELLOWS_SHARED_DATA": "/b"}) == Path("/a")
    assert data_folder({"BELLOWS_SHARED_DATA": "/b"}) == Path("/b")  # the earlier name
    workspace = tmp_path / "ws"
    (workspace / "shared" / "data").mkdir(parents=True)
    (workspace / "repo" / "docs").mkdir(parents=True)
    monkeypatch.chdir(workspace / "repo" / "docs")
    # a shared/data with none of the real data's folders is someone else's: passed over
    assert workspace_data() != workspace / "shared" / "data"
    (workspace / "shared" / "data" / "itp").mkdir()
    assert workspace_data() == workspace / "shared" / "data"
    assert data_folder({}) == workspace / "shared" / "data"
