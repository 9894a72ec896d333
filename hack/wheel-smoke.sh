#!/usr/bin/env bash
# The package alone, as a user who installs it gets it: build the sdist and the wheel
# (`python -m build`; the wheel is built from the sdist, so neither a stale build/ folder nor
# a file beside the checkout can hide in it), check that every data file of plugin/bellows is
# in the wheel, install the wheel into a fresh venv outside the checkout, and run from a
# working folder outside it too: `bellows --version`, `bellows simulate` on a generated trace,
# and `bellows demo --gpus 8 --minutes 30` with BELLOWS_CRDS at the workspace's copy of the
# upstream CRDs (../shared/data/crds; the demo downloads them when it has none, which CI must
# not do). Needs the dev extras (`build`, `setuptools`). CI runs it after hack/test.sh; it prints
# its wall time.
set -euo pipefail
started=$SECONDS
step() { echo "== $* (at $((SECONDS - started)) s)"; }
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${VENV:-$repo/.venv}/bin/python"
crds="${BELLOWS_CRDS:-$repo/../shared/data/crds}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

step "python -m build"
# --no-isolation: the build requirements are in the dev extras; two throwaway venvs with
# setuptools in them would cost ten times the build itself.
if ! "$python" -m build --no-isolation --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1; then
    cat "$work/build.log"
    exit 1
fi
wheel="$(echo "$work"/dist/bellows-*.whl)"

step "every data file of plugin/bellows is in $(basename "$wheel")"
# (the C sources are built, not shipped: their compiled modules, built in place by the
# editable install, are looked for under the same names)
(cd "$repo/plugin" && find bellows -type f ! -name '*.py' ! -name '*.pyc' ! -name '*.c') |
    "$python" -c '
import sys, zipfile
packed = set(zipfile.ZipFile(sys.argv[1]).namelist())
missing = [name for name in sys.stdin.read().split() if name not in packed]
if missing:
    sys.exit("missing from the wheel (pyproject.toml, [tool.setuptools.package-data]): "
             + " ".join(missing))
' "$wheel"

step "a fresh venv outside the checkout, with only the wheel and its dependencies in it"
# The checkout's pip installs into it (pip --python): no pip of its own to set up, and no
# byte-compiling of ~600 MB of dependencies that the run below never imports; both halve the
# time. The downloads come from pip's cache, filled by the install before hack/test.sh.
"$python" -m venv --without-pip "$work/venv"
if ! "$python" -m pip --python "$work/venv/bin/python" install --no-compile \
    --disable-pip-version-check "$wheel" >"$work/pip.log" 2>&1; then
    cat "$work/pip.log"
    exit 1
fi

# From here on nothing of the checkout is on the path, and the working folder is elsewhere.
cd "$work"
unset PYTHONPATH BELLOWS_DATA BELLOWS_SHARED_DATA BELLOWS_CRDS
bellows="$work/venv/bin/bellows"

step "bellows --version"
"$bellows" --version

step "the compiled parts (the DP layers, the TSF rows' weighing) are in the wheel and load"
"$work/venv/bin/python" -c 'from bellows.optimizer import _windowed, windowed
assert windowed._compiled_run is _windowed.run'
"$work/venv/bin/python" -c 'from bellows.scaling import _batches, tables
assert tables._compiled_best is _batches.best'

step "bellows simulate on a generated trace"
"$bellows" workload generate --pattern bursty --minutes 60 --categories 1,2,3,4 --gpus 16 \
    --seed 1 --out trace.jsonl
"$bellows" workload validate trace.jsonl
"$bellows" simulate trace.jsonl --gpus 16 --out sim
test -s sim/summary.json

step "bellows demo --gpus 8 --minutes 30 (BELLOWS_CRDS=$crds)"
BELLOWS_CRDS="$crds" "$bellows" demo --gpus 8 --minutes 30

echo "== the wheel works alone: $((SECONDS - started)) s in all"
