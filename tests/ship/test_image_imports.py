"""What the image's two processes load: the live service and nothing of the twin harness.

The image runs ``bellows controller`` and ``bellows bridge`` (``ENTRYPOINT ["bellows"]``).
Their modules, and every module of ``bellows.service``, imported in a fresh interpreter,
must not load the simulator (``bellows.sim``), the emulated cluster (``bellows.emulator``)
or the twin (``bellows.twin``); import-linter's contracts say the same of the static imports
(pyproject.toml), this checks what actually loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

HARNESS = ("bellows.sim", "bellows.emulator", "bellows.twin")

PROGRAM = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    from bellows.cli.main import load_command

    for name in ("controller", "bridge"):  # what `bellows controller|bridge` loads to run
        load_command(name)
    import bellows.service
    from bellows.service.runner import run_bridge, run_controller  # noqa: F401

    for module in pkgutil.walk_packages(bellows.service.__path__, "bellows.service."):
        importlib.import_module(module.name)
    for name in sys.argv[1:]:
        importlib.import_module(name)
    print(json.dumps(sorted(sys.modules)))
    """
)


def _loaded(*extra: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    modules: list[str] = json.loads(done.stdout)
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HARNESS)]


def test_the_controller_and_the_bridge_load_no_simulator_emulator_or_twin_module() -> None:
    assert _loaded() == []


def test_the_check_sees_the_harness_when_it_is_loaded() -> None:
    # the twin's ledger speaks the simulator's metrics: importing it loads bellows.sim
    loaded = _loaded("bellows.twin.ledger")
    assert "bellows.twin.ledger" in loaded
    assert "bellows.sim.metrics" in loaded
