#!/usr/bin/env bash
# Regenerate manifests/base and manifests/overlays/quickstart from charts/bellows.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" hack/generate_manifests.py "$@"
