"""The ``bellows.io/`` annotation keys: what a job's owner allows, and what Bellows writes back.

Owner keys (a job that carries any of them has opted in; see
``docs/user-guide-annotations.md``) are parsed into :class:`Settings`; every bad value
raises :class:`bellows.jobs.SpecError` whose ``field`` is the annotation key. Bellows' own
keys (the step journal and the status line) live here too, with their encoders, so that
one module owns the whole ``bellows.io/`` namespace.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from bellows import jobs
from bellows.inputs import SpecError, check_name, parse_float, parse_int, parse_json, parse_time
from bellows.scaling import JobProfile, parse_job_profile
from bellows.scaling.profiles import DEFAULT_PRIOR

__all__ = [
    "ALLOCATION",
    "JOURNAL_KEYS",
    "OWNER_KEYS",
    "PHASE",
    "PREFIX",
    "PROGRESS",
    "REASON",
    "RECREATED_FROM",
    "RECREATION",
    "REQUESTED",
    "RESTARTS",
    "STARTED_AT",
    "STATUS",
    "SUSPENDED_AT",
    "TARGET",
    "ConfigMapRef",
    "Settings",
    "format_pair",
    "format_progress",
    "opted_in",
    "parse_pair",
    "parse_progress",
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
RESTART_SECONDS = PREFIX + "restart-seconds"
MIN_RUNTIME_SECONDS = PREFIX + "min-runtime-seconds"
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
    RESTART_SECONDS,
    MIN_RUNTIME_SECONDS,
)

# Written by Bellows (never read as owner settings).
REQUESTED = PREFIX + "requested"  # "k=2,b=64": the owner's ask, saved before the first patch
TARGET = PREFIX + "target"  # "k=4,b=128": the allocation being applied
PHASE = PREFIX + "phase"  # step journal, see bellows.kube.journal
SUSPENDED_AT = PREFIX + "suspended-at"  # when Bellows last set suspend=true (RFC 3339)
ALLOCATION = PREFIX + "allocation"  # "k=4,b=128": the allocation the job runs with
PROGRESS = PREFIX + "progress"  # "samples=1.2e6,at=<RFC 3339>": done when last resumed
STATUS = PREFIX + "status"  # one human-readable line: what Bellows did or refused
RECREATED_FROM = PREFIX + "recreated-from"  # uid of the TrainJob this one re-creates (resize)
# the token of the re-creation record a TrainJob was created from (random, kept in the
# records namespace, which no tenant reads): a job that carries it is the copy Bellows made
RECREATION = PREFIX + "recreation"
FIT = PREFIX + "fit"  # JobProfile JSON: the profile refitted to the job's progress reports
REASON = PREFIX + "reason"  # why the last decision on the job, one sentence (bellows status)
RESTARTS = PREFIX + "restarts"  # how many times Bellows resumed the job after a halt
STARTED_AT = PREFIX + "started-at"  # when Bellows first started the job (RFC 3339)
# On the controller's leader-election Lease, written by the leader with each renewal:
MODE = PREFIX + "mode"  # the core's mode, "paper" or "bellows" (the cluster line of status)
COMPONENT = "bellows"  # the source.component of the Events Bellows records
JOURNAL_KEYS = frozenset(
    {
        REQUESTED,
        TARGET,
        PHASE,
        SUSPENDED_AT,
        ALLOCATION,
        PROGRESS,
        STATUS,
        RECREATED_FROM,
        RECREATION,
        FIT,
        REASON,
        RESTARTS,
        STARTED_AT,
        MODE,
    }
)
"""Every ``bellows.io/`` key Bellows writes itself (its journal, the status line, the fit, the
Lease's mode): never an owner's to set (the Pipelines component refuses them)."""

DEFAULT_PROFILE_KEY = "profile.json"
PROFILE_MAX_BYTES = 64 * 1024  # a profile is a few hundred bytes; annotations hold 256 KiB
PROFILE_MAX_DEPTH = 5  # {"types": {"a100": {"step": [{...}]}}}
SHARED_PROFILES = 64  # profile texts whose parsed profile is kept and shared
SHARED_PROFILE_BYTES = 4096  # the longest text kept so: at most 256 KiB of texts in all
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Names the shell, the dynamic loader, Python or the launchers read for themselves: a batch
# size written there would change how the training process starts, not its batch.
_RESERVED_ENV = re.compile(
    r"PATH|HOME|SHELL|IFS|ENV|BASH_ENV|HOSTNAME|USER|TMPDIR|LANG|TZ"
    r"|LD_\w*|DYLD_\w*|PYTHON\w*|NODE_OPTIONS|KUBERNETES_\w*|NCCL_\w*|CUDA_\w*|NVIDIA_\w*"
    r"|OMPI_\w*|PMIX_\w*|TORCHELASTIC_\w*|PET_\w*|MASTER_ADDR|MASTER_PORT|RANK|LOCAL_RANK"
    r"|WORLD_SIZE|LOCAL_WORLD_SIZE|GROUP_RANK|ROLE_RANK",
    re.IGNORECASE,
)
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,251}[a-z0-9])?")
_CONFIGMAP_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}")
_PAIR = re.compile(r"k=([0-9]{1,9}),b=([0-9]{1,12})")
_PROGRESS = re.compile(r"samples=([0-9.eE+-]{1,32}),at=([0-9T:.+Z-]{1,40})")
_BOUNDS = {
    MIN_BATCH: jobs.MAX_BATCH,
    MAX_BATCH: jobs.MAX_BATCH,
    MAX_GPUS: jobs.MAX_GPUS,
    MAX_BATCH_PER_GPU: jobs.MAX_LOCAL_BATCH,
}


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
    restart_s: float | None = None  # seconds one halt costs the job; None: the cluster default
    min_runtime_s: float | None = None  # no rebalance shrink sooner after a (re)start

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
        raise SpecError(
            key, None, f"an integer in [1, {_BOUNDS[key]}] (the annotation is required)"
        )
    return parse_int(key, annotations[key], minimum=1, maximum=_BOUNDS[key])


def _work(annotations: Mapping[str, str]) -> float:
    if WORK not in annotations:
        raise SpecError(WORK, None, "samples to process, a number > 0 (the annotation is required)")
    return parse_float(WORK, annotations[WORK], minimum=0.0, maximum=jobs.MAX_WORK, open_min=True)


def _profile(annotations: Mapping[str, str]) -> JobProfile | ConfigMapRef:
    inline, ref = annotations.get(PROFILE), annotations.get(PROFILE_CONFIGMAP)
    if inline is not None and ref is not None:
        raise SpecError(
            PROFILE_CONFIGMAP, ref, f"absent when {PROFILE} is set (give one of the two)"
        )
    if inline is not None:
        return parse_profile_text(PROFILE, inline)
    if ref is None:
        return DEFAULT_PRIOR  # schedulable at once; the controller learns the job's speed
    name, _, key = ref.partition("/")
    if not _DNS_NAME.fullmatch(name) or (key and not _CONFIGMAP_KEY.fullmatch(key)):
        raise SpecError(PROFILE_CONFIGMAP, ref, "'<configmap-name>' or '<configmap-name>/<key>'")
    return ConfigMapRef(name, key or DEFAULT_PROFILE_KEY)


def parse_profile_text(where: str, text: str) -> JobProfile:
    """A profile from JSON text; errors name ``where`` (annotation or ConfigMap key) first.

    A text of at most :data:`SHARED_PROFILE_BYTES` gives the same (immutable) profile object
    each time it is met again soon (the last :data:`SHARED_PROFILES` texts): the jobs of one
    model carry one profile, and 10 000 jobs then hold a few step profiles, not 10 000
    copies of one (docs/live.md), and are not parsed 10 000 times.
    """
    if isinstance(text, str) and len(text) <= SHARED_PROFILE_BYTES:
        return _shared_profile(where, text)
    return _parse_profile_text(where, text)


@functools.lru_cache(maxsize=SHARED_PROFILES)
def _shared_profile(where: str, text: str) -> JobProfile:
    return _parse_profile_text(where, text)


def _parse_profile_text(where: str, text: str) -> JobProfile:
    document = parse_json(
        where,
        text,
        max_bytes=PROFILE_MAX_BYTES,
        max_depth=PROFILE_MAX_DEPTH,
        what="a JobProfile JSON document",
    )
    try:
        return parse_job_profile(document)
    except SpecError as err:
        raise err.within(where) from None


def _env(annotations: Mapping[str, str], key: str) -> str | None:
    name = annotations.get(key)
    if name is None:
        return None
    check_name(key, name, _ENV_NAME, "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    if _RESERVED_ENV.fullmatch(name):
        raise SpecError(
            key,
            name,
            "a name of the job's own, such as BELLOWS_GLOBAL_BATCH_SIZE (not one the shell, "
            "the loader, Python, CUDA/NCCL or the launchers read: PATH, LD_*, PYTHON*, RANK…)",
        )
    return name


def parse_settings(annotations: Mapping[str, str]) -> Settings:
    """The owner's settings; :class:`SpecError` names the first key that is wrong."""
    b_min, b_max = _int(annotations, MIN_BATCH), _int(annotations, MAX_BATCH)
    jobs.check_batch_range(b_min, b_max, (MIN_BATCH, MAX_BATCH), annotations[MIN_BATCH])
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
    restart = annotations.get(RESTART_SECONDS)
    restart_s = (
        None
        if restart is None
        else parse_float(RESTART_SECONDS, restart, minimum=0.0, maximum=jobs.MAX_RESTART_S)
    )
    least = annotations.get(MIN_RUNTIME_SECONDS)
    min_runtime_s = (
        None
        if least is None
        else parse_float(MIN_RUNTIME_SECONDS, least, minimum=0.0, maximum=jobs.MAX_MIN_RUNTIME_S)
    )
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
        restart_s=restart_s,
        min_runtime_s=min_runtime_s,
    )


def format_pair(gpus: int, batch: int) -> str:
    """``k=<gpus>,b=<batch>``, the form of ``requested``, ``target`` and ``allocation``."""
    return f"k={gpus},b={batch}"


def parse_pair(key: str, text: str | None) -> tuple[int, int] | None:
    """``(gpus, batch)`` from ``k=…,b=…``; ``None`` when absent; SpecError when malformed."""
    if text is None:
        return None
    top_k, top_b = jobs.MAX_GPUS, jobs.MAX_BATCH
    valid = f"'k=<gpus>,b=<batch>' with 1 <= gpus <= {top_k} and 1 <= batch <= {top_b}"
    match = _PAIR.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise SpecError(key, text, valid)
    gpus, batch = int(match.group(1)), int(match.group(2))
    if not (1 <= gpus <= top_k and 1 <= batch <= top_b):
        raise SpecError(key, text, valid)
    return gpus, batch


def format_progress(samples: float, at: datetime) -> str:
    """``samples=<n>,at=<RFC 3339>``: the samples a job had done when it resumed at ``at``."""
    stamp = at.astimezone(UTC).isoformat(timespec="milliseconds").removesuffix("+00:00")
    return f"samples={samples:.6g},at={stamp}Z"


def parse_progress(text: str | None) -> tuple[float, datetime] | None:
    """``(samples, at)`` from :func:`format_progress`; ``None`` when absent; SpecError when not
    in that form (a bounded count of samples and an RFC 3339 time)."""
    if text is None:
        return None
    match = _PROGRESS.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise SpecError(PROGRESS, text, "'samples=<number>,at=<RFC 3339 time>'")
    samples = parse_float(PROGRESS, match.group(1), minimum=0.0, maximum=jobs.MAX_WORK)
    return samples, parse_time(PROGRESS, match.group(2))
