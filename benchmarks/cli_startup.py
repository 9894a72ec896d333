"""Start-up time of the ``bellows`` command: ``bellows --help`` and ``bellows <cmd> --help``
as whole processes, cold and warm, medians.

    python benchmarks/cli_startup.py [--repeat 5] [--before DIR]

Cold: every run gets a fresh, empty bytecode cache (``PYTHONPYCACHEPREFIX``), so Python
compiles every module it imports from source, as on the first run after an install that
wrote no ``.pyc`` files (the worst case). Warm: the usual case, the installed bytecode.
Target (issue 11): warm ``--help`` <= 0.5 s for the group and every command. Commands whose
modules import an engine at module level show as over target. ``--before DIR`` adds a
column for a second source tree (``DIR/plugin``, e.g. ``git archive HEAD plugin | tar -x
-C DIR``), warm, for a side-by-side comparison.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bellows.cli.main import COMMANDS
from processes import Timed, bellows_command, median_of, time_process

TARGET_S = 0.5


def _cold_and_warm(argv: list[str], repeat: int) -> tuple[Timed, Timed]:
    cold: list[Timed] = []
    warm: list[Timed] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bellows-pyc-") as prefix:
            env = {"PYTHONPYCACHEPREFIX": str(Path(prefix))}
            cold.append(time_process(argv, env=env))
        warm.append(time_process(argv))
    return median_of(cold), median_of(warm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--before", type=Path, default=None)
    args = parser.parse_args()
    command, _ = bellows_command()
    print(
        f"{'command':<28} {'cold s':>7} {'warm s':>7} {'warm MiB':>9}"
        f"{'  before warm s' if args.before else ''}  target {TARGET_S} s"
    )
    over = []
    for words in [[], *([name] for name in sorted(COMMANDS))]:
        cold, warm = _cold_and_warm([*command, *words, "--help"], args.repeat)
        label = " ".join(["bellows", *words, "--help"])
        flag = "" if warm.wall_s <= TARGET_S else "  OVER"
        then = ""
        if args.before:
            old, env = bellows_command(args.before)
            try:
                runs = [time_process([*old, *words, "--help"], env=env) for _ in range(args.repeat)]
                then = f" {median_of(runs).wall_s:15.2f}"
            except RuntimeError:  # a command the other tree does not have
                then = f" {'n/a':>15}"
        print(f"{label:<28} {cold.wall_s:7.2f} {warm.wall_s:7.2f} {warm.peak_mib:9.0f}{then}{flag}")
        if flag:
            over.append(label)
    print(f"over target: {', '.join(over) if over else 'none'}")


if __name__ == "__main__":
    main()
