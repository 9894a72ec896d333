"""Domain types for training jobs, their profiles and their allocations.

Plain frozen dataclasses, validated on construction, with no I/O and no dependency on any
other part of Bellows but :mod:`bellows.inputs` (the bounded parser and its error). Every
invalid value raises :class:`SpecError`, which names the field, the value and what would be
valid, so that a bad job can be reported to its owner and skipped without touching anything
else.

Units: seconds for time, samples for batches and work, parameters for ``weights``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from bellows.inputs import SpecError, check_float, check_int

__all__ = [
    "MAX_BATCH",
    "MAX_GPUS",
    "MAX_LOCAL_BATCH",
    "MAX_MIN_RUNTIME_S",
    "MAX_PLACEMENTS",
    "MAX_PLACEMENT_POINTS",
    "MAX_PROFILE_POINTS",
    "MAX_RESTART_S",
    "MAX_STEP_SECONDS",
    "MAX_WEIGHTS",
    "MAX_WORK",
    "Allocation",
    "JobSpec",
    "MeasuredPlacement",
    "SpecError",
    "StepProfile",
    "TypeSection",
    "check_batch_range",
    "check_names_unique",
    "check_placements",
    "check_restart_s",
    "check_type_sections",
    "feasible_allocations",
    "fit_to_cluster",
    "is_feasible",
    "least_gpus",
    "per_gpu_batches",
]


# Documented bounds (docs/user-guide-annotations.md, docs/simulator.md): past them a value is
# a mistake or an attack, and tables sized by it would exhaust memory.
MAX_GPUS = 65_536  # k_max and gpus of one job
MAX_BATCH = 1 << 30  # global batch sizes, samples per iteration
MAX_LOCAL_BATCH = 1 << 20  # m_max and the profile's per-GPU batches
MAX_WEIGHTS = 10**13  # model parameters
MAX_WORK = 1e15  # samples to process
MAX_STEP_SECONDS = 1e5  # one profiled iteration on one GPU
MAX_PROFILE_POINTS = 256
MAX_PLACEMENTS = 256  # measured placements of one job (nodes, GPUs)
MAX_PLACEMENT_POINTS = 1024  # their per-GPU batches in all (the Pollux models: 140-483)
MAX_RESTART_S = 86_400.0  # a job's restart cost: see check_restart_s
MAX_MIN_RUNTIME_S = 86_400.0  # seconds a job may be kept from shrinking after a (re)start


def check_batch_range(
    b_min: int, b_max: int, fields: tuple[str, str] = ("b_min", "b_max"), written: object = None
) -> None:
    """The one rule of a job's batch bounds, ``b_min <= b_max`` (each already an integer in
    ``[1, MAX_BATCH]``). The error names ``fields`` (an owner's annotation keys where the
    bounds come from annotations) and shows ``written``, the value as written, else
    ``b_min``."""
    if b_min > b_max:
        shown_min = b_min if written is None else written
        raise SpecError(fields[0], shown_min, f"<= {fields[1]} ({b_max})")


def check_restart_s(name: str, value: object) -> float:
    """A job's restart cost, in seconds: the progress one halt costs it (checkpoint, pods
    restart, reload), in ``[0, MAX_RESTART_S]`` (a day). The one definition behind the
    annotation ``bellows.io/restart-seconds``, a progress report's ``restartSeconds``, the
    cluster's default (``controller.restartCostSeconds``) and :attr:`JobSpec.restart_s`;
    ``name`` is the field as its reader spells it."""
    return check_float(name, value, minimum=0.0, maximum=MAX_RESTART_S)


def _require_positive_float(name: str, value: object, *, maximum: float) -> float:
    return check_float(name, value, minimum=0.0, maximum=maximum, open_min=True)


@dataclass(frozen=True)
class StepProfile:
    """Measured single-GPU iteration times ``t_proc(m)`` at per-GPU batch sizes ``m``.

    ``local_batches`` are strictly increasing positive integers; ``seconds[i]`` is the
    measured time of one iteration at ``local_batches[i]`` on one GPU (no communication).
    """

    local_batches: tuple[int, ...]
    seconds: tuple[float, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "local_batches", tuple(self.local_batches))
        object.__setattr__(self, "seconds", tuple(self.seconds))
        if not 1 <= len(self.local_batches) <= MAX_PROFILE_POINTS:
            raise SpecError(
                "profile.local_batches",
                f"{len(self.local_batches)} points",
                f"at least one point and at most {MAX_PROFILE_POINTS}",
            )
        if len(self.seconds) != len(self.local_batches):
            raise SpecError(
                "profile.seconds",
                self.seconds,
                f"{len(self.local_batches)} values, one per local batch",
            )
        previous = 0
        for i, m in enumerate(self.local_batches):
            check_int(f"profile.local_batches[{i}]", m, minimum=1, maximum=MAX_LOCAL_BATCH)
            if m <= previous:
                raise SpecError(
                    f"profile.local_batches[{i}]", m, f"strictly increasing (> {previous})"
                )
            previous = m
        for i, s in enumerate(self.seconds):
            _require_positive_float(f"profile.seconds[{i}]", s, maximum=MAX_STEP_SECONDS)

    @classmethod
    def from_points(cls, points: Iterable[tuple[int, float]]) -> StepProfile:
        """Build from ``(local_batch, seconds)`` pairs in any order; duplicates are averaged."""
        grouped: dict[int, list[float]] = {}
        for m, s in points:
            grouped.setdefault(m, []).append(s)
        batches = sorted(grouped)
        return cls(tuple(batches), tuple(sum(grouped[m]) / len(grouped[m]) for m in batches))


@dataclass(frozen=True)
class MeasuredPlacement:
    """Step times measured on ``gpus`` GPUs over ``nodes`` nodes (issue 36), at per-GPU
    batches ``local_batches`` (strictly increasing): ``seconds[i]`` one step, its
    synchronisation included; ``sync_seconds[i]`` that synchronisation, at most the step
    (empty: not measured, taken as 0, so that an extra pass of gradient accumulation costs
    the whole step). What the JSA predicts, measured: where a job carries such rows, the core
    decides its packed placements by them (:mod:`bellows.scaling.placement_steps`)."""

    nodes: int
    gpus: int
    local_batches: tuple[int, ...]
    seconds: tuple[float, ...]
    sync_seconds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("local_batches", "seconds", "sync_seconds"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check_int("nodes", self.nodes, minimum=1, maximum=MAX_GPUS)
        check_int("gpus", self.gpus, minimum=self.nodes, maximum=MAX_GPUS)
        StepProfile(self.local_batches, self.seconds)  # the same rules as one GPU's times
        if self.sync_seconds and len(self.sync_seconds) != len(self.seconds):
            raise SpecError(
                "syncSeconds", f"{len(self.sync_seconds)} values",
                f"none, or {len(self.seconds)}: one per local batch",
            )  # fmt: skip
        for i, (sync, step) in enumerate(zip(self.sync_seconds, self.seconds, strict=False)):
            check_float(f"syncSeconds[{i}]", sync, minimum=0.0, maximum=step)

    @property
    def syncs(self) -> tuple[float, ...]:
        """The synchronisation seconds per local batch (0 where not measured)."""
        return self.sync_seconds or (0.0,) * len(self.seconds)


def check_placements(placements: object) -> None:
    """``placements`` as a job's measured placements: a tuple of :class:`MeasuredPlacement`,
    one per (nodes, GPUs), at most :data:`MAX_PLACEMENTS` of them and
    :data:`MAX_PLACEMENT_POINTS` batches in all; else SpecError naming ``placements``."""
    if not isinstance(placements, tuple) or not all(
        isinstance(p, MeasuredPlacement) for p in placements
    ):
        raise SpecError("placements", placements, "a tuple of MeasuredPlacement")
    if len(placements) > MAX_PLACEMENTS:
        raise SpecError("placements", f"{len(placements)} placements", f"at most {MAX_PLACEMENTS}")
    points = sum(len(p.local_batches) for p in placements)
    if points > MAX_PLACEMENT_POINTS:
        raise SpecError(
            "placements", f"{points} measured batches", f"at most {MAX_PLACEMENT_POINTS} in all"
        )
    seen = [(p.nodes, p.gpus) for p in placements]
    if len(set(seen)) != len(seen):
        twice = next(key for key in seen if seen.count(key) > 1)
        raise SpecError("placements", f"nodes {twice[0]}, gpus {twice[1]} twice",
                        "one entry per (nodes, gpus)")  # fmt: skip


@dataclass(frozen=True)
class TypeSection:
    """What the JSA knows of a job on one GPU type (issue 39): its one-GPU step times there,
    its Allreduce weights, and the largest per-GPU batch that type's memory holds.
    ``imputed``: not measured on the type but scaled from the types the job was measured on
    (:func:`bellows.scaling.gpu_types.impute`), to be replaced once it has run there."""

    gpu_type: str
    profile: StepProfile
    weights: int
    m_max: int
    imputed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_type, str) or not self.gpu_type:
            raise SpecError("gpu_type", self.gpu_type, "a non-empty GPU type name")
        if not isinstance(self.profile, StepProfile):
            raise SpecError("profile", self.profile, "a StepProfile")
        check_int("weights", self.weights, minimum=1, maximum=MAX_WEIGHTS)
        check_int("m_max", self.m_max, minimum=1, maximum=MAX_LOCAL_BATCH)
        if not isinstance(self.imputed, bool):
            raise SpecError("imputed", self.imputed, "true or false")


@dataclass(frozen=True)
class JobSpec:
    """What a job's owner allows and what the JSA knows about the job.

    * ``b_min``..``b_max``: allowed global batch sizes (samples per iteration).
    * ``batch_size``: the batch the owner asked for; the fixed-batch baseline runs with it.
    * ``k_max``: most GPUs the job may get; ``m_max``: largest per-GPU batch that fits.
    * ``weights``: model parameters (drives Allreduce time); ``work``: samples to process.
    * ``elastic=False`` marks a rigid job: it always runs on exactly ``gpus`` GPUs with
      ``batch_size``. For elastic jobs ``gpus`` is what the owner requested (informative).
    * ``restart_s``: seconds of progress one halt costs this job (checkpoint, pods restart,
      reload), when the owner knows it better than the cluster's default (``None``).
    * ``min_runtime_s``: seconds after a start or resume during which no round shrinks the
      job to give its GPUs to another (``None``: the cluster's default); at most
      ``MAX_MIN_RUNTIME_S``.
    * ``placements``: step times measured on several GPUs (:class:`MeasuredPlacement`),
      which the core decides the job's packed placements by instead of the JSA; empty:
      the JSA's everywhere.
    * ``types``: on a cluster of several GPU types, what the JSA knows of the job per type
      (:class:`TypeSection`, one per type name); :meth:`on` is the job on one of them.
      Empty: one type, ``profile``, ``weights`` and ``m_max`` above.
    """

    name: str
    b_min: int
    b_max: int
    batch_size: int
    k_max: int
    m_max: int
    weights: int
    work: float
    profile: StepProfile
    elastic: bool = True
    gpus: int = 1
    category: str = field(default="", compare=False)
    restart_s: float | None = None
    min_runtime_s: float | None = None
    types: tuple[TypeSection, ...] = ()
    placements: tuple[MeasuredPlacement, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("name", self.name, "a non-empty string")
        check_int("b_min", self.b_min, minimum=1, maximum=MAX_BATCH)
        check_int("b_max", self.b_max, minimum=1, maximum=MAX_BATCH)
        check_batch_range(self.b_min, self.b_max)
        check_int("batch_size", self.batch_size, minimum=1, maximum=MAX_BATCH)
        if not self.b_min <= self.batch_size <= self.b_max:
            raise SpecError(
                "batch_size", self.batch_size, f"in [b_min, b_max] = [{self.b_min}, {self.b_max}]"
            )
        check_int("k_max", self.k_max, minimum=1, maximum=MAX_GPUS)
        check_int("m_max", self.m_max, minimum=1, maximum=MAX_LOCAL_BATCH)
        check_int("weights", self.weights, minimum=1, maximum=MAX_WEIGHTS)
        work = _require_positive_float("work", self.work, maximum=MAX_WORK)
        object.__setattr__(self, "work", work)
        if not isinstance(self.profile, StepProfile):
            raise SpecError("profile", self.profile, "a StepProfile")
        if not isinstance(self.elastic, bool):
            raise SpecError("elastic", self.elastic, "true or false")
        check_int("gpus", self.gpus, minimum=1, maximum=MAX_GPUS)
        if self.restart_s is not None:
            object.__setattr__(self, "restart_s", check_restart_s("restart_s", self.restart_s))
        if self.min_runtime_s is not None:
            least = check_float(
                "min_runtime_s", self.min_runtime_s, minimum=0.0, maximum=MAX_MIN_RUNTIME_S
            )
            object.__setattr__(self, "min_runtime_s", least)
        if self.gpus > self.k_max:
            raise SpecError("gpus", self.gpus, f"<= k_max ({self.k_max})")
        if self.elastic:
            if least_gpus(self) is None:
                raise SpecError(
                    "b_min",
                    self.b_min,
                    f"a range with a batch b = k*m for some 1 <= k <= k_max ({self.k_max}) "
                    f"and 1 <= m <= m_max ({self.m_max}); b_max is {self.b_max}",
                )
        elif math.ceil(self.batch_size / self.gpus) > self.m_max:
            raise SpecError(
                "batch_size",
                self.batch_size,
                f"at most gpus*m_max = {self.gpus * self.m_max} for a rigid job",
            )
        check_type_sections(self.types)
        check_placements(self.placements)

    @property
    def x1_batch(self) -> int:
        """The per-GPU batch at which the job's single-GPU length is measured."""
        return min(self.b_max, self.m_max)

    @property
    def type_names(self) -> tuple[str, ...]:
        """The GPU types the job has a section for."""
        return tuple(t.gpu_type for t in self.types)

    def section(self, gpu_type: str) -> TypeSection | None:
        """The job's section for ``gpu_type`` (``None``: none)."""
        return next((t for t in self.types if t.gpu_type == gpu_type), None)

    def on(self, gpu_type: str) -> JobSpec | None:
        """The job as a one-type job on ``gpu_type``: its section's profile, weights and
        ``m_max`` (``None`` where it has no section there, or no batch of its range fits the
        type's memory on ``k_max`` GPUs); a job without sections is itself on every type.
        Its measured placements are of its own profile, not of a section's: not carried."""
        if not self.types:
            return self
        found = self.section(gpu_type)
        if found is None:
            return None
        try:
            return replace(
                self,
                profile=found.profile,
                weights=found.weights,
                m_max=found.m_max,
                types=(),
                placements=(),
            )
        except SpecError:
            return None


@dataclass(frozen=True)
class Allocation:
    """GPUs and global batch size given to one job."""

    gpus: int
    batch: int

    def __post_init__(self) -> None:
        check_int("gpus", self.gpus, minimum=1, maximum=MAX_GPUS)
        check_int("batch", self.batch, minimum=1, maximum=MAX_BATCH)

    @property
    def local_batch(self) -> int:
        """Largest per-GPU batch (the slowest GPU carries ``ceil(batch / gpus)``)."""
        return -(-self.batch // self.gpus)


def feasible_allocations(job: JobSpec) -> list[Allocation]:
    """Every ``(k, b)`` the elastic policy may give ``job``: ``b = k*m`` with integer ``m``.

    ``b_min <= b <= b_max``, ``1 <= k <= k_max``, ``1 <= m <= m_max``. A rigid job has
    exactly one: ``(gpus, batch_size)``.
    """
    if not job.elastic:
        return [Allocation(job.gpus, job.batch_size)]
    out: list[Allocation] = []
    for k in range(1, job.k_max + 1):
        m_lo, m_hi = per_gpu_batches(job, k)
        out.extend(Allocation(k, k * m) for m in range(m_lo, m_hi + 1))
    return out


def per_gpu_batches(job: JobSpec, k: int) -> tuple[int, int]:
    """Per-GPU batches ``m`` allowed on ``k`` GPUs: ``[lo, hi]`` (empty when ``lo > hi``)."""
    return max(1, -(-job.b_min // k)), min(job.m_max, job.b_max // k)


def least_gpus(job: JobSpec) -> int | None:
    """The fewest GPUs ``job`` may run on (a rigid job: its own), ``None`` where no
    ``b = k*m`` is allowed: O(k_max), without listing the allocations."""
    if not job.elastic:
        return job.gpus
    for k in range(1, job.k_max + 1):
        lo, hi = per_gpu_batches(job, k)
        if lo <= hi:
            return k
    return None


def check_type_sections(types: object) -> None:
    """``types`` as a job's or a profile's sections per GPU type: a tuple of
    :class:`TypeSection`, one per type name; else SpecError naming ``types``."""
    if not isinstance(types, tuple) or not all(isinstance(t, TypeSection) for t in types):
        raise SpecError("types", types, "a tuple of TypeSection, one per GPU type")
    names = [t.gpu_type for t in types]
    if len(set(names)) != len(names):
        raise SpecError("types", names, "one section per GPU type name")


def is_feasible(job: JobSpec, allocation: Allocation, *, fixed_batch: bool = False) -> bool:
    """Whether ``allocation`` is allowed for ``job`` under the elastic or fixed-batch policy."""
    if not job.elastic:
        return allocation == Allocation(job.gpus, job.batch_size)
    if fixed_batch:
        return (
            allocation.batch == job.batch_size
            and 1 <= allocation.gpus <= min(job.k_max, job.batch_size)
            and allocation.local_batch <= job.m_max
        )
    k, b = allocation.gpus, allocation.batch
    if not 1 <= k <= job.k_max or b % k:
        return False
    lo, hi = per_gpu_batches(job, k)
    return lo <= b // k <= hi


def check_names_unique(jobs: Sequence[JobSpec]) -> None:
    """Raise :class:`SpecError` on the first job whose name repeats an earlier one."""
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if job.name in seen:
            raise SpecError(f"jobs[{i}].name", job.name, "a name not used by an earlier job")
        seen.add(job.name)


def fit_to_cluster(job: JobSpec, gpus: int) -> JobSpec:
    """``job`` with ``k_max`` no larger than a cluster of ``gpus`` GPUs (``job`` if it fits).

    GPU tables are sized by ``k_max``, so an owner's ``k_max`` of a million must not reach
    them. A rigid job keeps its GPU count (it either fits or waits); an elastic one asks for
    at most the cluster. :class:`SpecError` when no batch stays feasible on that many GPUs.
    ``gpus <= 0`` (capacity not known yet) changes nothing.
    """
    if gpus <= 0 or job.k_max <= gpus:
        return job
    k_max = max(gpus, job.gpus) if not job.elastic else gpus
    try:
        return replace(job, k_max=k_max, gpus=min(job.gpus, k_max))
    except SpecError as err:
        raise SpecError(
            "k_max", job.k_max, f"a size whose batches fit the cluster's {gpus} GPUs ({err.valid})"
        ) from None
