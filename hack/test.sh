#!/usr/bin/env bash
# Every check CI runs: lint, format, types, layer contracts, then the test suite.
# Run from the repository root after installing the dev extras (see README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${VENV:-.venv}/bin"

echo "== ruff check"; "$bin/ruff" check plugin tests benchmarks hack examples
echo "== ruff format --check"; "$bin/ruff" format --check plugin tests benchmarks hack examples
echo "== mypy --strict"; "$bin/mypy"
echo "== import-linter (layers)"; "$bin/lint-imports"
# Two workers by default (CI has two cores; most of the suite's time is spent waiting on real
# processes: nats-server, the emulated cluster, training workers). PYTEST_WORKERS=0 runs serially.
echo "== pytest"; "$bin/pytest" -n "${PYTEST_WORKERS:-2}" "$@"
