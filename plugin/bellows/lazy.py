"""A package's names imported from their modules when first used (PEP 562).

``bellows.kube`` and ``bellows.bus`` re-export the names of their modules; importing each
module up front made every command that needs one of them (``bellows status`` reads
``bellows.kube.statuses``) import them all, NATS and aiohttp included (``benchmarks/status.py``,
``benchmarks/cli_startup.py``). The package keeps its imports under ``TYPE_CHECKING`` for the
type checker and import-linter, and a table of where each name lives for the runtime.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``name`` from its module in ``where`` (then kept
    in the package), else the submodule ``package.name``, else AttributeError."""
    namespace = importlib.import_module(package).__dict__

    def lookup(name: str) -> Any:
        module = where.get(name)
        if module is not None:
            value = getattr(importlib.import_module(module), name)
            namespace[name] = value
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{package}.{name}")
            except ModuleNotFoundError as err:
                if err.name != f"{package}.{name}":
                    raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return lookup
