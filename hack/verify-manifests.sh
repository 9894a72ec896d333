#!/usr/bin/env bash
# Check that manifests/ is what the chart generates and that kustomize builds it.
# Needs the dev extra (helm-python-sdk) and kubectl, whose built-in kustomize builds the
# overlays. Exit status 1 names the stale file and the command that fixes it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" hack/generate_manifests.py --check
for folder in manifests/base manifests/overlays/*/; do
  kubectl kustomize "$folder" > /dev/null
  echo "kustomize builds $folder"
done
