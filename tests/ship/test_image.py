"""The container image definition, OWNERS and the developer scripts (no Docker engine here)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with comments dropped and continuation lines joined
    (as Docker does: a comment line inside a continued instruction is dropped first)."""
    lines = DOCKERFILE.read_text().splitlines()
    text = re.sub(r"\\\n", " ", "\n".join(x for x in lines if not x.strip().startswith("#")))
    out = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            word, _, rest = stripped.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _args() -> dict[str, str]:
    return dict(
        rest.split("=", 1) for word, rest in _instructions() if word == "ARG" and "=" in rest
    )


def _resolve(image: str) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: _args()[m.group(1)], image)


def test_image_is_built_in_stages() -> None:
    froms = [rest for word, rest in _instructions() if word == "FROM"]
    assert len(froms) >= 2
    assert any("--from=build" in rest for word, rest in _instructions() if word == "COPY")


def test_base_images_are_pinned() -> None:
    for word, rest in _instructions():
        if word != "FROM":
            continue
        image = _resolve(rest.split()[0])
        # A digest, or an exact release tag with patch version and distribution.
        pinned = "@sha256:" in image or re.search(r":\d+\.\d+\.\d+-[a-z]+-[a-z]+$", image)
        assert pinned, image
        assert ":latest" not in image


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    instructions = _instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    users = [rest for word, rest in instructions[last_from:] if word == "USER"]
    assert users, "the final stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    assert gid.isdigit()
    assert int(gid) != 0
    # The chart's runAsUser matches, so runAsNonRoot can verify it.
    values = yaml.safe_load((REPO / "charts" / "bellows" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    entrypoint = [rest for word, rest in instructions[last_from:] if word == "ENTRYPOINT"]
    assert entrypoint == ['["bellows"]']


def test_the_build_stage_compiles_the_c_parts_and_fails_without_them() -> None:
    # setup.py's extensions are optional (a user without a compiler still installs), so the
    # image's build must check for them: else a missing compiler would ship the slow paths
    instructions = _instructions()
    runtime = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    build = [rest for word, rest in instructions[:runtime] if word == "RUN"]
    assert any("gcc" in rest and "apt-get install" in rest for rest in build)
    for module in ("bellows.optimizer._windowed", "bellows.scaling._batches"):
        assert any("pip install" in rest and module in rest for rest in build), module
    assert not any("gcc" in rest for word, rest in instructions[runtime:] if word == "RUN")


def test_no_secrets_in_the_image_definition() -> None:
    for word, rest in _instructions():
        if word in {"ENV", "ARG", "LABEL"}:
            assert not re.search(r"(?i)(password|secret|token|api[_-]?key|creds)", rest), rest
    assert not re.search(r"(?i)(ADD|COPY)\s+\S*\.(pem|key|creds)\b", DOCKERFILE.read_text())


def test_build_context_is_an_allow_list_of_files_that_exist() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    allowed = [line[1:].rstrip("/") for line in lines if line.startswith("!")]
    assert ".git" not in allowed
    copied = [
        src
        for word, rest in _instructions()
        if word == "COPY" and "--from" not in rest
        for src in rest.split()[:-1]
    ]
    for src in copied:
        assert src in allowed, f"COPY {src} is excluded by .dockerignore"
        assert (REPO / src).exists(), f"COPY {src}: not in the repository"


def test_owners_follow_the_kubernetes_format() -> None:
    owners = yaml.safe_load((REPO / "OWNERS").read_text())
    assert set(owners) <= {"approvers", "reviewers", "labels", "emeritus_approvers", "options"}
    aliases = yaml.safe_load((REPO / "OWNERS_ALIASES").read_text())["aliases"]
    for role in ("approvers", "reviewers"):
        assert owners[role]
        for name in owners[role]:
            assert name in aliases, f"{role}: {name} is not an alias in OWNERS_ALIASES"


@pytest.mark.parametrize(
    "script", sorted(p.name for p in (REPO / "hack").glob("*.sh") if p.name != "test.sh")
)
def test_hack_scripts_parse_and_are_executable(script: str) -> None:
    path = REPO / "hack" / script
    assert path.stat().st_mode & 0o111
    done = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert path.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in path.read_text()


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_verify_manifests_script_passes() -> None:
    done = subprocess.run(
        [str(REPO / "hack" / "verify-manifests.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr
    assert "kustomize builds manifests/overlays/quickstart/" in done.stdout
