"""JAX's persistent compilation cache: where it lives, and turning it on for a process.

The optimizer's JAX kernels compile once per padded shape, and a compile costs seconds
(docs/optimizer.md). With the cache on, a compiled kernel is written to disk and the next
process that needs the same shape loads it instead. The pure core never touches files: the
outer layers (every ``bellows`` command, the controller) call :func:`enable_compile_cache`
before anything imports JAX, which only sets the environment JAX reads when it is imported —
so a process that never runs a JAX path never imports JAX for it.

Where: ``$BELLOWS_JAX_CACHE`` if set (``off`` turns the cache off), else
``$XDG_CACHE_HOME/bellows/jax``, else ``~/.cache/bellows/jax``. A ``JAX_COMPILATION_CACHE_DIR``
already in the environment wins. JAX trusts what it loads from this folder, so it is
created private to the user (mode 0700); never point it at a folder others can write.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Final

__all__ = ["CACHE_ENV", "cache_folder", "enable_compile_cache", "enabled_folder"]

CACHE_ENV: Final = "BELLOWS_JAX_CACHE"
_JAX_DIR: Final = "JAX_COMPILATION_CACHE_DIR"
# Cache every kernel, however small or quick to compile: JAX's defaults skip compiles under
# one second, and ours take 0.3 to 24 s depending on the machine's load.
_JAX_SETTINGS: Final = {
    "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
}


def cache_folder(env: Mapping[str, str]) -> Path | None:
    """The cache folder ``env`` asks for (see the module docstring); ``None``: off."""
    if _JAX_DIR in env:
        return Path(env[_JAX_DIR])
    given = env.get(CACHE_ENV)
    if given is not None:
        return None if given.strip().lower() in ("", "off") else Path(given)
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "bellows" / "jax"


def enable_compile_cache(env: MutableMapping[str, str] = os.environ) -> Path | None:
    """Turn the cache on for this process (and its children, through ``env``).

    Creates the folder (0700) and sets the variables JAX reads when imported; if JAX is
    already imported, also updates its configuration. Returns the folder, or ``None`` when
    the cache is off or its folder cannot be created (the run goes on, compiling anew).
    """
    folder = cache_folder(env)
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return None
    env[_JAX_DIR] = str(folder)
    for key, value in _JAX_SETTINGS.items():
        env.setdefault(key, value)
    jax = sys.modules.get("jax")
    if jax is not None:  # imported before us: its configuration was read already
        jax.config.update("jax_compilation_cache_dir", str(folder))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return folder


def enabled_folder(env: Mapping[str, str] = os.environ) -> Path | None:
    """The folder :func:`enable_compile_cache` turned the cache on at, as JAX (this
    process's, and a child's inheriting ``env``) reads it; ``None``: not turned on."""
    given = env.get(_JAX_DIR)
    return Path(given) if given else None
