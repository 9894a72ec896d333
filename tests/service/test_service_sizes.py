"""The live service stays in small parts (issue 26): no module of ``bellows.service`` over
500 lines, and no function there over 60 (from its ``def`` line, decorators included, to
its last line; a nested function counts inside the one around it, and on its own)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

SERVICE = REPO / "plugin" / "bellows" / "service"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    modules = sorted(SERVICE.rglob("*.py"))
    assert len(modules) > 10, modules  # the folder is where this test thinks it is
    return modules


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def _lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    assert node.end_lineno is not None
    return node.end_lineno - first + 1


def long_modules(folder: Path, modules: list[Path]) -> dict[str, int]:
    """The ``modules`` (under ``folder``) over the bound, with their lengths."""
    sizes = {p.relative_to(folder).as_posix(): len(p.read_text().splitlines()) for p in modules}
    return {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}


def long_functions(folder: Path, modules: list[Path]) -> dict[str, int]:
    """The functions of ``modules`` (under ``folder``) over the bound, with their lengths."""
    long = {}
    for path in modules:
        for node in _functions(ast.parse(path.read_text(), filename=str(path))):
            if (n := _lines(node)) > MAX_FUNCTION_LINES:
                long[f"{path.relative_to(folder).as_posix()}:{node.lineno} {node.name}"] = n
    return long


def test_no_service_module_is_over_500_lines() -> None:
    assert long_modules(SERVICE, _modules()) == {}


def test_no_service_function_is_over_60_lines() -> None:
    assert long_functions(SERVICE, _modules()) == {}
