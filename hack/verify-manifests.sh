#!/usr/bin/env bash
# Check that manifests/ is what the chart generates and that kustomize builds it.
# Needs the dev extra (helm-python-sdk) and kubectl, whose built-in kustomize builds the
# overlays. Exit status 1 names the stale file and the command that fixes it. The overlays
# are built from a copy, with throw-away NATS passwords (hack/quickstart-credentials.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
"$PYTHON" hack/generate_manifests.py --check
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cp -r manifests "$scratch/"
rm -f "$scratch/manifests/overlays/quickstart/nats-auth.env"
PYTHON="$PYTHON" hack/quickstart-credentials.sh "$scratch/manifests/overlays/quickstart/nats-auth.env" > /dev/null
for folder in "$scratch"/manifests/base "$scratch"/manifests/overlays/*/; do
  kubectl kustomize "$folder" > /dev/null
  echo "kustomize builds ${folder#"$scratch"/}"
done
