"""The controller's compiles in a child process (``bellows.service.kernel_child``): the child
fills the persistent cache, the controller loads the kernel from it without compiling and
decides as the NumPy engine does; a restarted controller starts no child; a child that
fails leaves the kernel to NumPy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from bellows.optimizer.solving import RentRule, padded_shape, solve_rows
from bellows.service.compile_cache import CACHE_ENV
from bellows.service.kernel_child import MARKERS, ChildCompileError, ChildCompiler, _kernel

# A controller's rent rule in a fresh interpreter (this one's JAX may be set up otherwise),
# its rehearsal's way (compiles in the caller, inside ``compiling()``), on the band path;
# it prints what it decided, the children it started and what it found in the cache.
PROGRAM = textwrap.dedent(
    """
    import json
    import jax
    import numpy as np
    from bellows.optimizer import solving
    from bellows.optimizer.solving import RentRule, padded_shape, solve_rows
    from bellows.service.compile_cache import enable_compile_cache
    from bellows.service.kernel_child import ChildCompiler

    enable_compile_cache()
    events = []  # the persistent cache's hits and misses (a miss: XLA compiles here)
    jax.monitoring.register_event_listener(lambda event, **_: events.append(event))
    solving.BAND_FROM = 0  # the band path at a size that compiles fast
    rows = np.sort(np.random.default_rng(5).random((23, 9)), axis=1)
    rows[:, 0] = -np.inf
    compiler = ChildCompiler.for_this_process()
    rule = RentRule(compile_s=0.0, compiler=compiler, delegate=True)
    with rule.in_background(), rule.compiling():
        answer = solve_rows(rows, 100, method="auto", rent=rule)
    print(json.dumps({
        "path": answer.path, "gpus": answer.gpus.tolist(), "objective": answer.objective,
        "children": compiler.children,
        "misses": events.count("/jax/compilation_cache/cache_misses"),
        "hits": events.count("/jax/compilation_cache/cache_hits"),
        "ready": sorted(rule.ready),
    }))
    """
)
TIMEOUT_S = 300.0  # a child's JAX import and compile on a loaded 2-core machine


def _controller(cache: Path) -> dict[str, object]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("JAX_COMPILATION_CACHE")
    }
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env={**env, CACHE_ENV: str(cache)},
        capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_child_fills_the_cache_and_the_controller_loads_it_and_decides_the_same(
    tmp_path: Path,
) -> None:
    rows = np.sort(np.random.default_rng(5).random((23, 9)), axis=1)
    rows[:, 0] = -np.inf
    exact = solve_rows(rows, 100, method="numpy")
    cold = _controller(tmp_path)
    assert cold["path"] == "band"
    assert cold["gpus"] == exact.gpus.tolist()
    assert cold["objective"] == exact.objective
    assert cold["children"] == 1  # the one kernel, the width the NumPy bounds gave
    assert cold["misses"] == 0  # the controller compiled nothing: it loaded the kernel
    assert cold["hits"] != 0
    assert list(tmp_path.glob("*-cache"))  # JAX's entries, written by the child
    assert len(list((tmp_path / MARKERS).iterdir())) == 1
    warm = _controller(tmp_path)  # a restarted controller on the same cache
    assert warm == {**cold, "children": 0}


def test_a_child_that_fails_leaves_the_kernel_to_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the child finds no cache to hand its kernel over to, and says so
    for key in ("JAX_COMPILATION_CACHE_DIR", CACHE_ENV):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv(CACHE_ENV, "off")
    compiler = ChildCompiler(tmp_path)
    rows = np.sort(np.random.default_rng(6).random((7, 7)), axis=1)
    rows[:, 0] = -np.inf
    jobs, k_max, width = padded_shape(7, 6, 42)  # 42: what the rows can use of the 50
    with pytest.raises(ChildCompileError, match="cache is off"):
        compiler(("dp", jobs, k_max, width))
    rule = RentRule(compile_s=0.0, compiler=compiler, delegate=True)
    with rule.in_background(), rule.compiling():
        answer = solve_rows(rows, 50, method="auto", rent=rule)
    assert answer.path == "numpy"
    assert np.array_equal(answer.gpus, solve_rows(rows, 50, method="numpy").gpus)
    assert list(rule.failed) == [("dp", jobs, k_max, width)]
    assert compiler.children == 2
    assert not (tmp_path / MARKERS).exists()


def test_without_a_cache_the_compiler_starts_no_child() -> None:
    assert ChildCompiler.for_this_process({}).folder is None
    folder = "/var/cache/bellows/jax"
    assert ChildCompiler.for_this_process({"JAX_COMPILATION_CACHE_DIR": folder}).folder == Path(
        folder
    )


def test_the_child_reads_its_kernel_from_its_command_line() -> None:
    assert _kernel(["banded", "768", "8", "64"]) == ("banded", 768, 8, 64)
    for bad in (["banded", "768", "8"], ["scan", "1", "2", "3"]):
        with pytest.raises(SystemExit, match="usage"):
            _kernel(bad)
