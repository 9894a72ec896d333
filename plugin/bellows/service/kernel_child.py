"""Compiling the optimizer's JAX kernels in a short-lived child process.

XLA's first compile in a process raises its resident memory by ~160 MiB that it keeps
(LLVM's code pages and heap), whatever the kernel, on top of the ~150 MiB importing JAX
costs; a second kernel adds ~20 MiB. At 10 000 jobs that compile was the controller's peak
(docs/live.md, "Memory and start-up"). Loading the same kernel from JAX's persistent
compilation cache (:mod:`bellows.service.compile_cache`) costs ~30 MiB and tenths of a
second. So the live controller's rent rule compiles through :class:`ChildCompiler`
(``RentRule(compiler=..., delegate=True)``): a child ``python -m bellows.service.kernel_child
KIND ROWS K_MAX WIDTH`` compiles the kernel into the cache and exits, giving its memory
back, and the controller then loads it from there. The same kernel, the same allocations.

A marker per kernel (``bellows-kernels/`` in the cache folder, named for the kernel and for
the JAX, jaxlib and ``XLA_FLAGS`` it was compiled with) says the cache holds it, so that a
restarted controller loads its kernels without starting a child. With the cache off there
is nowhere to hand a kernel over, and it compiles in the controller, as before.

The child asks the kernel to kill it first when memory runs out (``oom_score_adj`` 1000):
under the container's memory limit the compile dies, not the controller. A child that fails
(or runs past ``timeout_s``) raises :class:`ChildCompileError`, and the rent rule leaves that
kernel to the NumPy engine, which decides the same.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Final, Literal

import structlog

from bellows.optimizer.solving import Kernel, RentRule, compile_kernel
from bellows.service.compile_cache import enable_compile_cache, enabled_folder

__all__ = [
    "CHILD_TIMEOUT_S",
    "MARKERS",
    "ChildCompileError",
    "ChildCompiler",
    "controller_rent_rule",
    "main",
]

_log = structlog.get_logger("bellows.service")

CHILD_TIMEOUT_S: Final = 300.0  # one compile took 0.3-24 s on a loaded 2-core machine
MARKERS: Final = "bellows-kernels"  # beside JAX's entries (it reads only its ``*-cache``)
_KINDS: Final = ("dp", "banded")


class ChildCompileError(RuntimeError):
    """The child process did not compile the kernel (its exit status and last words)."""


@dataclass
class ChildCompiler:
    """Compiles each kernel it is called with in a child process, then loads it here.

    ``folder``: JAX's persistent cache, this process's and the child's
    (:meth:`for_this_process`); ``None`` (the cache off): compile here. ``children``
    counts the child processes started; one runs at a time (the rehearsal's, in the caller,
    and the background worker's never hold their memory together).
    """

    folder: Path | None
    timeout_s: float = CHILD_TIMEOUT_S
    children: int = 0
    _one: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def for_this_process(cls, env: Mapping[str, str] = os.environ) -> ChildCompiler:
        """The compiler for the cache folder this process's JAX uses (and a child it starts,
        inheriting ``env``), as :func:`enable_compile_cache` set it; none: compile here."""
        return cls(enabled_folder(env))

    def __call__(self, kernel: Kernel) -> None:
        if self.folder is not None:
            marker = self.folder / MARKERS / _marker_name(kernel)
            with self._one:
                if not marker.exists():
                    self._in_child(kernel)
                    with contextlib.suppress(OSError):  # a restart then asks a child again
                        marker.parent.mkdir(mode=0o700, exist_ok=True)
                        marker.touch()
        compile_kernel(kernel)  # with the kernel in the cache: loaded, not compiled

    def _in_child(self, kernel: Kernel) -> None:
        """Have a child compile ``kernel`` into the cache; :class:`ChildCompileError` if not."""
        try:
            self._run_child(kernel)
        except ChildCompileError as err:
            _log.warning("optimizer.kernel_not_compiled", problem=str(err))
            raise

    def _run_child(self, kernel: Kernel) -> None:
        self.children += 1
        args = [sys.executable, "-m", __name__, *(str(part) for part in kernel)]
        started = time.monotonic()
        try:
            done = subprocess.run(
                args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                timeout=self.timeout_s, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as err:
            raise ChildCompileError(f"{kernel}: no answer in {self.timeout_s:.0f} s") from err
        seconds = time.monotonic() - started
        if done.returncode != 0:
            words = done.stderr.strip().splitlines()[-1:] or ["no output"]
            raise ChildCompileError(f"{kernel}: exit status {done.returncode}: {words[0]}")
        _log.info(
            "optimizer.kernel_compiled", kernel="/".join(map(str, kernel)),
            seconds=round(seconds, 3), child_peak_mib=done.stdout.strip() or None,
        )  # fmt: skip


def controller_rent_rule(env: Mapping[str, str] = os.environ) -> RentRule:
    """The live controller's rent rule: every kernel compiled by a :class:`ChildCompiler`,
    those its calls compile themselves (the start-up rehearsal's) too (``delegate``)."""
    return RentRule(compiler=ChildCompiler.for_this_process(env), delegate=True)


def _marker_name(kernel: Kernel) -> str:
    """The kernel's marker: its sizes, and what JAX's cache keys hold that may change."""
    versions = [_version("jax"), _version("jaxlib"), os.environ.get("XLA_FLAGS", "")]
    stamp = hashlib.sha256("\n".join(versions).encode()).hexdigest()[:16]
    return "-".join([*(str(part) for part in kernel), stamp])


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def _kernel(args: Sequence[str]) -> Kernel:
    """The kernel named on the child's command line: KIND ROWS K_MAX WIDTH."""
    if len(args) != 4 or args[0] not in _KINDS:
        raise SystemExit(f"usage: {__name__} {{{','.join(_KINDS)}}} ROWS K_MAX WIDTH")
    kind: Literal["dp", "banded"] = "dp" if args[0] == "dp" else "banded"
    rows, k_max, width = (int(arg) for arg in args[1:])
    return kind, rows, k_max, width


def _peak_mib() -> str:
    """This process's peak resident set (``VmHWM``), in MiB, if Linux tells it."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("VmHWM:"):
            return f"{int(line.split()[1]) / 1024:.1f}"
    return ""


def main(argv: Sequence[str] | None = None) -> None:
    """The child: compile one kernel into the persistent cache, print its peak MiB."""
    kernel = _kernel(sys.argv[1:] if argv is None else argv)
    # the first to go when memory runs out (raising one's own score needs no rights)
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text("1000")
    if enable_compile_cache() is None:
        raise SystemExit("the compilation cache is off: nowhere to hand the kernel over")
    compile_kernel(kernel)
    print(_peak_mib())


if __name__ == "__main__":
    main()
