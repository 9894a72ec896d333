"""The ``bellows.io/`` annotation keys: what a job's owner allows, and what Bellows writes back.

Owner keys (a job that carries any of them has opted in; see
``docs/user-guide-annotations.md``) are parsed into :class:`Settings`; every bad value
raises :class:`bellows.jobs.SpecError` whose ``field`` is the annotation key. Bellows' own
keys (the step journal and the status line) live here too, with their encoders, so that
one module owns the whole ``bellows.io/`` namespace.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from bellows.jobs import SpecError
from bellows.scaling import JobProfile, parse_job_profile

__all__ = [
    "ALLOCATION",
    "OWNER_KEYS",
    "PHASE",
    "PREFIX",
    "REQUESTED",
    "STATUS",
    "SUSPENDED_AT",
    "TARGET",
    "ConfigMapRef",
    "Settings",
    "format_pair",
    "opted_in",
    "parse_pair",
    "parse_settings",
]

PREFIX = "bellows.io/"
MIN_BATCH = PREFIX + "min-batch-size"
MAX_BATCH = PREFIX + "max-batch-size"
MAX_GPUS = PREFIX + "max-gpus"
MAX_BATCH_PER_GPU = PREFIX + "max-batch-per-gpu"
WORK = PREFIX + "work"
PROFILE = PREFIX + "profile"
PROFILE_CONFIGMAP = PREFIX + "profile-configmap"
BATCH_ENV = PREFIX + "batch-size-env"
LOCAL_BATCH_ENV = PREFIX + "local-batch-size-env"
ELASTIC = PREFIX + "elastic"
OWNER_KEYS = (
    MIN_BATCH,
    MAX_BATCH,
    MAX_GPUS,
    MAX_BATCH_PER_GPU,
    WORK,
    PROFILE,
    PROFILE_CONFIGMAP,
    BATCH_ENV,
    LOCAL_BATCH_ENV,
    ELASTIC,
)

# Written by Bellows (never read as owner settings).
REQUESTED = PREFIX + "requested"  # "k=2,b=64": the owner's ask, saved before the first patch
TARGET = PREFIX + "target"  # "k=4,b=128": the allocation being applied
PHASE = PREFIX + "phase"  # step journal, see bellows.kube.journal
SUSPENDED_AT = PREFIX + "suspended-at"  # when Bellows last set suspend=true (RFC 3339)
ALLOCATION = PREFIX + "allocation"  # "k=4,b=128": the allocation the job runs with
STATUS = PREFIX + "status"  # one human-readable line: what Bellows did or refused

DEFAULT_PROFILE_KEY = "profile.json"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_PAIR = re.compile(r"^k=(\d+),b=(\d+)$")


@dataclass(frozen=True)
class ConfigMapRef:
    """A profile stored in a ConfigMap of the job's namespace, under ``key``."""

    name: str
    key: str = DEFAULT_PROFILE_KEY


@dataclass(frozen=True)
class Settings:
    """What a job's owner allows, parsed from its annotations (not yet a ``JobSpec``)."""

    b_min: int
    b_max: int
    k_max: int
    m_max: int
    work: float
    profile: JobProfile | ConfigMapRef
    batch_env: str | None
    local_batch_env: str | None
    elastic: bool = True

    @property
    def env_names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.batch_env, self.local_batch_env) if n is not None)


def opted_in(annotations: Mapping[str, str] | None) -> bool:
    """Whether a job carries any owner key: the only thing read from a job that did not."""
    if not annotations:
        return False
    return any(key in annotations for key in OWNER_KEYS)


def _int(annotations: Mapping[str, str], key: str) -> int:
    if key not in annotations:
        raise SpecError(key, None, "an integer >= 1 (the annotation is required)")
    text = annotations[key].strip()
    if not text.isdigit() or int(text) < 1:
        raise SpecError(key, annotations[key], "an integer >= 1")
    return int(text)


def _work(annotations: Mapping[str, str]) -> float:
    if WORK not in annotations:
        raise SpecError(WORK, None, "samples to process, a number > 0 (the annotation is required)")
    try:
        work = float(annotations[WORK])
    except ValueError:
        work = math.nan
    if not math.isfinite(work) or work <= 0:
        raise SpecError(WORK, annotations[WORK], "samples to process, a finite number > 0")
    return work


def _profile(annotations: Mapping[str, str]) -> JobProfile | ConfigMapRef:
    inline, ref = annotations.get(PROFILE), annotations.get(PROFILE_CONFIGMAP)
    if inline is not None and ref is not None:
        raise SpecError(
            PROFILE_CONFIGMAP, ref, f"absent when {PROFILE} is set (give one of the two)"
        )
    if inline is not None:
        return parse_profile_text(PROFILE, inline)
    if ref is None:
        raise SpecError(PROFILE, None, f"a JobProfile JSON document, or set {PROFILE_CONFIGMAP}")
    name, _, key = ref.partition("/")
    if not _DNS_NAME.match(name) or (key and not _CONFIGMAP_KEY.match(key)):
        raise SpecError(PROFILE_CONFIGMAP, ref, "'<configmap-name>' or '<configmap-name>/<key>'")
    return ConfigMapRef(name, key or DEFAULT_PROFILE_KEY)


def parse_profile_text(where: str, text: str) -> JobProfile:
    """A profile from JSON text; errors name ``where`` (annotation or ConfigMap key) first."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(where, text[:80], f"a JobProfile JSON document ({err.msg})") from None
    try:
        return parse_job_profile(document)
    except SpecError as err:
        raise err.within(where) from None


def _env(annotations: Mapping[str, str], key: str) -> str | None:
    name = annotations.get(key)
    if name is not None and not _ENV_NAME.match(name):
        raise SpecError(key, name, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return name


def parse_settings(annotations: Mapping[str, str]) -> Settings:
    """The owner's settings; :class:`SpecError` names the first key that is wrong."""
    b_min, b_max = _int(annotations, MIN_BATCH), _int(annotations, MAX_BATCH)
    if b_min > b_max:
        raise SpecError(MIN_BATCH, annotations[MIN_BATCH], f"<= {MAX_BATCH} ({b_max})")
    k_max, m_max = _int(annotations, MAX_GPUS), _int(annotations, MAX_BATCH_PER_GPU)
    batch_env, local_env = _env(annotations, BATCH_ENV), _env(annotations, LOCAL_BATCH_ENV)
    if batch_env is None and local_env is None:
        raise SpecError(
            BATCH_ENV,
            None,
            f"the name of the env var carrying the global batch "
            f"size (or set {LOCAL_BATCH_ENV} for the per-GPU batch)",
        )
    if batch_env is not None and batch_env == local_env:
        raise SpecError(LOCAL_BATCH_ENV, local_env, f"a name other than {BATCH_ENV}'s")
    elastic_text = annotations.get(ELASTIC, "true")
    if elastic_text not in ("true", "false"):
        raise SpecError(ELASTIC, elastic_text, "'true' or 'false'")
    return Settings(
        b_min=b_min,
        b_max=b_max,
        k_max=k_max,
        m_max=m_max,
        work=_work(annotations),
        profile=_profile(annotations),
        batch_env=batch_env,
        local_batch_env=local_env,
        elastic=elastic_text == "true",
    )


def format_pair(gpus: int, batch: int) -> str:
    """``k=<gpus>,b=<batch>``, the form of ``requested``, ``target`` and ``allocation``."""
    return f"k={gpus},b={batch}"


def parse_pair(key: str, text: str | None) -> tuple[int, int] | None:
    """``(gpus, batch)`` from ``k=…,b=…``; ``None`` when absent; SpecError when malformed."""
    if text is None:
        return None
    match = _PAIR.match(text)
    if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
        raise SpecError(key, text, "'k=<gpus>,b=<batch>' with integers >= 1")
    return int(match.group(1)), int(match.group(2))
