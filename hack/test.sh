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
echo "== pytest"; "$bin/pytest" "$@"
