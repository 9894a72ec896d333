"""The autoscaler stays in rooms (issue 39, item 5): no module of ``bellows.autoscaler``
over 500 lines and no function there over 60, as for the live service
(``tests/service/test_service_sizes.py``, whose counting this uses); the core's
``Autoscaler`` stays the one state machine, what it computes in the modules it calls."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO
from tests.service.test_service_sizes import long_functions, long_modules

AUTOSCALER = REPO / "plugin" / "bellows" / "autoscaler"
ROOMS = ("admission.py", "applying.py", "core.py", "rows.py", "state.py", "valuing.py")


def _modules() -> list[Path]:
    modules = sorted(AUTOSCALER.rglob("*.py"))
    names = {p.name for p in modules}
    assert set(ROOMS) <= names, names  # the folder is where this test thinks it is
    return modules


def test_no_autoscaler_module_is_over_500_lines() -> None:
    assert long_modules(AUTOSCALER, _modules()) == {}


def test_no_autoscaler_function_is_over_60_lines() -> None:
    assert long_functions(AUTOSCALER, _modules()) == {}


def test_the_core_module_holds_one_class_with_methods_only() -> None:
    """What the core computes lives in the modules it calls: ``core.py`` defines the
    ``Autoscaler`` (and its ``ClockError``) and no function of its own beyond a check."""
    tree = ast.parse((AUTOSCALER / "core.py").read_text())
    classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)]
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert classes == ["ClockError", "Autoscaler"]
    assert functions == ["_check_capacity"]
