#!/usr/bin/env bash
# Make the passwords of the quickstart overlay's NATS users (bellows-controller and
# bellows-bridge), for kustomize's secretGenerator: random, 40 letters and digits each, the
# first a letter (nats-server reads an env value like a config value). An existing file is
# kept, as Helm keeps its Secret on upgrade; delete it to rotate the passwords (the Secret's
# name changes with its content, so kubectl apply -k then rolls every pod).
#
#   hack/quickstart-credentials.sh [FILE]    # default: manifests/overlays/quickstart/nats-auth.env
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
file="${1:-$root/manifests/overlays/quickstart/nats-auth.env}"
if [[ -e "$file" ]]; then
  echo "kept $file"
  exit 0
fi
umask 077
"$PYTHON" - "$file" <<'PY'
import secrets
import string
import sys

def password() -> str:
    alnum = string.ascii_letters + string.digits
    return secrets.choice(string.ascii_letters) + "".join(secrets.choice(alnum) for _ in range(39))

with open(sys.argv[1], "x", encoding="ascii") as out:
    for user in ("controller", "bridge"):
        out.write(f"{user}-password={password()}\n")
PY
echo "wrote $file"
