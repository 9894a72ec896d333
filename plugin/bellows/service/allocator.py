"""The C heap of a long-running process: free pages handed back to the system.

glibc's ``malloc`` keeps the pages a process freed, for later. The controller's start-up
frees a lot at once: the XLA compilations of the JAX optimizer's kernels (LLVM's working
memory) and the rehearsal's copies of the core. Kept, they stayed resident for the life of
the pod (docs/live.md: the controller at 10 000 jobs on 1 250 GPUs was resident at 555-590 MiB
on the JAX path, 381 MiB with the trim). :func:`release_free_heap` hands them back
(``malloc_trim``); the controller calls it once its start-up is over. Elsewhere than glibc
(musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import sys

__all__ = ["release_free_heap"]


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the system; ``True`` when some were."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))
