"""Real traces turned into Bellows traces: the ITP cluster trace and the Pollux workloads.

Every assumption made on the way is listed here (and in ``docs/simulator.md``):

* **Profiles.** Each trace model is mapped to the measured Pollux model closest to it
  (:data:`ITP_MODELS`): resnet50 and inception3 -> imagenet (ResNet-50, measured), vgg16 ->
  imagenet (the only measured ImageNet CNN; VGG's larger gradient is not modelled),
  bert and gpt2 -> bert (the only measured transformer), deepspeech2 -> deepspeech2.
  Pollux workloads name the measured models directly.
* **GPUs and batch.** The recorded GPU count becomes ``gpus`` (what the owner asked for) and
  ``k_max = max(gpus, 8)``. The allowed range is the measured one: ``b_min`` = smallest
  measured per-GPU batch, ``m_max`` = largest, ``b_max = k_max * m_max``. The recorded batch
  is the baseline's ``batch_size``, clipped into ``[b_min, gpus * m_max]`` (ITP batches were
  chosen for other GPUs: a 256-sample GPT-2 batch does not fit one 16 GB T4 running BERT).
* **Work (ITP).** The trace gives each job's duration on its recorded GPUs; ``work`` is the
  samples the job processes in that time at its recorded (GPUs, batch) under our profile,
  ``work = duration * X(batch, gpus)``. The trace's durations are kept; its iteration counts
  are not used (they count iterations of other hardware and batch sizes).
* **Work (Pollux).** The workload files carry no duration; ``work = epochs * dataset size``
  with the epochs of the Pollux artifact (``simulator/applications.py``: bert 2, cifar10
  100, ncf 10, imagenet 90, deepspeech2 80, yolov3 50) and the public dataset sizes in
  :data:`POLLUX_DATASETS` (deepspeech2's CMU-ARCTIC size and NCF's samples per epoch are
  our estimates). ``work="validation"`` (issue 36, opt in) takes instead the work the
  artifact's own simulator runs each job to: :data:`POLLUX_VALIDATION_WORK`, the progress of
  its validation curves at the last epoch. They agree within 0.6 % except deepspeech2, whose
  curves hold 7 134 samples an epoch (our estimate: 20 000, 2.8x the work).
* **Batches (Pollux, opt in).** ``batches="accumulate"`` (issue 36) gives each job the
  batches the artifact's simulator gives it: any global batch up to the largest of its
  validation runs (:data:`POLLUX_MAX_BATCH`), a per-GPU share beyond what fits memory reached
  by gradient accumulation (``m_max`` raised to that batch; the JSA's step time beyond the
  largest profiled per-GPU batch is its time per sample times the samples, one Allreduce: the
  cost of the extra passes), the memory limit the artifact sets (yolov3: 8 per GPU,
  :data:`POLLUX_LOCAL_LIMIT`; the profile is cut there), and the trace's batch kept unclipped
  (bert's 384 on 6 GPUs, where the default clips it to 72), and as many GPUs as the
  artifact lets a job take (its ``max_replicas`` bound: the largest batch over the smallest
  per-GPU batch, at most :data:`POLLUX_MAX_REPLICAS`; 8 by default): yolov3 and imagenet
  64 GPUs, where ``k_max = 8`` held the Pollux reference 6-20 % behind the published
  Pollux (issue 36, docs/simulator.md).
* **Cells.** Every number goes through :mod:`bellows.inputs` with the documented bounds
  (GPUs at most :data:`bellows.jobs.MAX_GPUS`, batches at most ``MAX_BATCH``, times and
  durations at most :data:`~bellows.sim.workloads.traces.MAX_ARRIVAL_S` seconds, ``b_max``
  clipped to ``MAX_BATCH``); names are unique; a file holds at most ``MAX_TRACE_JOBS`` rows.
  Anything else is a :class:`~bellows.jobs.SpecError` naming ``file:line.column``.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from bellows.inputs import brief, parse_float, parse_int
from bellows.jobs import MAX_BATCH, MAX_GPUS, JobSpec, MeasuredPlacement, SpecError, StepProfile
from bellows.scaling import ClusterProfile, single_gpu_throughput, throughput
from bellows.sim.workloads.categories import K_MAX
from bellows.sim.workloads.models import ModelProfile, model
from bellows.sim.workloads.pollux_placements import pollux_placements
from bellows.sim.workloads.traces import MAX_ARRIVAL_S, MAX_TRACE_JOBS, TraceJob

__all__ = [
    "ITP_MODELS",
    "POLLUX_BATCHES",
    "POLLUX_DATASETS",
    "POLLUX_EPOCHS",
    "POLLUX_LOCAL_LIMIT",
    "POLLUX_MAX_BATCH",
    "POLLUX_MAX_REPLICAS",
    "POLLUX_VALIDATION_WORK",
    "gpus_for_load",
    "import_itp",
    "import_pollux",
]

ITP_MODELS: Mapping[str, str] = {
    "resnet50": "imagenet",
    "inception3": "imagenet",
    "vgg16": "imagenet",
    "bert": "bert",
    "gpt2": "bert",
    "deepspeech2": "deepspeech2",
}

POLLUX_EPOCHS: Mapping[str, int] = {
    "bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50,
}  # fmt: skip

POLLUX_DATASETS: Mapping[str, int] = {
    "bert": 88_641,  # SQuAD v1.1 training features (BERT tokenisation)
    "cifar10": 50_000,  # CIFAR-10 training set
    "ncf": 5_000_000,  # MovieLens-1M ratings x (1 positive + 4 sampled negatives): estimate
    "imagenet": 1_281_167,  # ImageNet-1k training set
    "deepspeech2": 20_000,  # CMU-ARCTIC utterances, all speakers: estimate
    "yolov3": 16_551,  # PASCAL VOC 2007+2012 trainval
}


POLLUX_VALIDATION_WORK: Mapping[str, float] = {
    "bert": 177_288.0,
    "cifar10": 5_000_052.2,
    "ncf": 49_708_544.0,
    "imagenet": 115_305_119.0,
    "deepspeech2": 570_720.0,
    "yolov3": 827_551.8,
}
"""Reference samples to completion as the Pollux artifact's simulator counts them: the least
``progress`` over a model's ``validation-<B>.csv`` files at its last epoch (the epochs of
:data:`POLLUX_EPOCHS`) times the smallest ``B`` (``../shared/data/pollux/profiles/``, the
artifact's measurements; ``benchmarks/fidelity.py`` computes them again from the files)."""

POLLUX_WORK: tuple[str, ...] = ("epochs", "validation")
"""How :func:`import_pollux` sets a job's work (module docstring)."""

POLLUX_MAX_BATCH: Mapping[str, int] = {
    "bert": 384, "cifar10": 4096, "ncf": 32768, "imagenet": 12800, "deepspeech2": 640,
    "yolov3": 512,
}  # fmt: skip
"""The largest global batch the Pollux artifact's simulator lets a job run at: its model's
largest ``validation-<B>.csv`` (``../shared/data/pollux/profiles/``)."""

POLLUX_MAX_REPLICAS = 64
"""The most GPUs the artifact's simulator gives one job (its ``max_replicas`` bound, with the
largest batch over the smallest per-GPU batch): ``k_max`` with ``batches="accumulate"``."""

POLLUX_LOCAL_LIMIT: Mapping[str, int] = {"yolov3": 8}
"""Per-GPU batches the artifact's ``applications.py`` holds below the measured largest (beyond
them it accumulates); the other models keep their measured largest."""

POLLUX_BATCHES: tuple[str, ...] = ("measured", "accumulate")
"""How :func:`import_pollux` bounds a job's batches (module docstring)."""


def _accumulating(profile: ModelProfile, app: str) -> ModelProfile:
    """``profile`` cut at the artifact's per-GPU memory limit (:data:`POLLUX_LOCAL_LIMIT`)."""
    limit = POLLUX_LOCAL_LIMIT.get(app)
    if limit is None:
        return profile
    kept = [(m, t) for m, t in zip(profile.step.local_batches, profile.step.seconds,
                                   strict=True) if m <= limit]  # fmt: skip
    step = StepProfile(tuple(m for m, _ in kept), tuple(t for _, t in kept))
    return replace(profile, step=step)


def _template(
    name: str,
    profile: ModelProfile,
    *,
    gpus: int,
    batch: int,
    work: float,
    category: str,
    largest: int | None = None,
) -> JobSpec:
    """A job of ``profile``; ``largest``: the largest global batch, reached by accumulation
    beyond what fits (the per-GPU limit raised to it), else the measured limits."""
    k_max = max(gpus, K_MAX)
    b_min, m_max = profile.m_min, profile.m_max
    b_max = min(k_max * m_max, MAX_BATCH)
    if largest is not None:
        m_max = b_max = max(largest, b_min)
        k_max = max(gpus, min(POLLUX_MAX_REPLICAS, b_max // b_min))
    batch_size = min(max(batch, b_min), gpus * m_max, b_max)
    return JobSpec(
        name=name,
        b_min=b_min,
        b_max=b_max,
        batch_size=batch_size,
        k_max=k_max,
        m_max=m_max,
        weights=profile.weights,
        work=work,
        profile=profile.step,
        gpus=gpus,
        category=category,
    )


_MAX_TIMESTAMP_S = 1e12  # an absolute submission time (UNIX seconds until the year 33658)


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str | None]]]:
    """The rows of a CSV file with ``required`` columns, each with its line number."""
    rows: list[tuple[int, dict[str, str | None]]] = []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            columns = reader.fieldnames or []
            missing = [c for c in required if c not in columns]
            if missing:
                raise SpecError(f"{path.name}.columns", columns, f"columns {required}")
            for row in reader:
                if len(rows) >= MAX_TRACE_JOBS:
                    raise SpecError(
                        f"{path.name}:{reader.line_num}", f"more than {MAX_TRACE_JOBS} rows",
                        f"a trace of at most {MAX_TRACE_JOBS} jobs",
                    )  # fmt: skip
                rows.append((reader.line_num, row))
    except OSError as err:
        raise SpecError(
            path.name, err.strerror or type(err).__name__, "a readable CSV file"
        ) from None
    except (UnicodeDecodeError, csv.Error) as err:
        raise SpecError(path.name, brief(err), "a CSV file in UTF-8") from None
    return rows


def _int(
    path: Path, line: int, row: dict[str, str | None], column: str, bounds: tuple[int, int]
) -> int:
    low, high = bounds
    return parse_int(f"{path.name}:{line}.{column}", row.get(column), minimum=low, maximum=high)


def _seconds(
    path: Path, line: int, row: dict[str, str | None], column: str, maximum: float
) -> float:
    return parse_float(
        f"{path.name}:{line}.{column}", row.get(column), minimum=0.0, maximum=maximum
    )


def _name(
    path: Path, line: int, row: dict[str, str | None], column: str, seen: dict[str, int]
) -> str:
    name = row.get(column)
    if not isinstance(name, str) or not name:
        raise SpecError(f"{path.name}:{line}.{column}", name, "a non-empty name")
    first = seen.setdefault(name, line)
    if first != line:
        raise SpecError(
            f"{path.name}:{line}.{column}", name, f"a name not used before (line {first})"
        )
    return name


def _choice(
    path: Path, line: int, row: dict[str, str | None], column: str, known: Mapping[str, object]
) -> str:
    value = row.get(column)
    if not isinstance(value, str) or value not in known:
        raise SpecError(f"{path.name}:{line}.{column}", value, f"one of {sorted(known)}")
    return value


_GPUS = (1, MAX_GPUS)
_BATCH = (1, MAX_BATCH)


def import_itp(path: Path, *, cluster: ClusterProfile) -> tuple[TraceJob, ...]:
    """An ElasticFlow/ITP cluster CSV as a trace; arrivals shift so the first is at 0."""
    rows = _rows(path, ("job_id", "submission_time", "model_name", "batch_size", "num_gpu"))
    submitted = [_seconds(path, n, r, "submission_time", _MAX_TIMESTAMP_S) for n, r in rows]
    start = min(submitted, default=0.0)
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for (line, row), at in zip(rows, submitted, strict=True):
        name = _name(path, line, row, "job_id", seen)
        trace_model = _choice(path, line, row, "model_name", ITP_MODELS)
        profile = model(ITP_MODELS[trace_model])
        gpus = _int(path, line, row, "num_gpu", _GPUS)
        duration = _seconds(path, line, row, "duration", MAX_ARRIVAL_S)
        if duration <= 0:
            raise SpecError(f"{path.name}:{line}.duration", row.get("duration"), "seconds > 0")
        batch = _int(path, line, row, "batch_size", _BATCH)
        try:
            spec = _template(name, profile, gpus=gpus, batch=batch, work=1.0, category=trace_model)
            work = duration * throughput(spec, gpus, spec.batch_size, cluster)
            spec = _template(
                name, profile, gpus=gpus, batch=spec.batch_size, work=work, category=trace_model
            )
            jobs.append(TraceJob(at - start, spec, profile.name))
        except SpecError as err:
            raise err.within(f"{path.name}:{line}") from None
    return tuple(jobs)


def import_pollux(
    path: Path, *, work: str = "epochs", batches: str = "measured", placements: Path | None = None
) -> tuple[TraceJob, ...]:
    """A Pollux workload CSV (``name,time,application,num_replicas,batch_size``) as a trace;
    ``work``: ``"epochs"`` (epochs x dataset size, the default) or ``"validation"`` (the
    artifact's, :data:`POLLUX_VALIDATION_WORK`); ``batches``: ``"measured"`` (the measured
    per-GPU limits, the default) or ``"accumulate"`` (the artifact's, module docstring).
    ``placements``: the artifact's profile folders (``pollux/profiles``), whose measured
    placements each job's profile then carries
    (:func:`~bellows.sim.workloads.pollux_placements.pollux_placements`; ``None``: none)."""
    if work not in POLLUX_WORK:
        raise SpecError("work", work, f"one of {', '.join(POLLUX_WORK)}")
    if batches not in POLLUX_BATCHES:
        raise SpecError("batches", batches, f"one of {', '.join(POLLUX_BATCHES)}")
    accumulate = batches == "accumulate"
    rows = _rows(path, ("name", "time", "application", "num_replicas", "batch_size"))
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    measured: dict[str, tuple[MeasuredPlacement, ...]] = {}
    for line, row in rows:
        name = _name(path, line, row, "name", seen)
        app = _choice(path, line, row, "application", POLLUX_EPOCHS)
        profile = _accumulating(model(app), app) if accumulate else model(app)
        gpus = _int(path, line, row, "num_replicas", _GPUS)
        batch = _int(path, line, row, "batch_size", _BATCH)
        arrival = _seconds(path, line, row, "time", MAX_ARRIVAL_S)
        try:
            spec = _template(
                name, profile, gpus=gpus, batch=batch,
                work=float(POLLUX_EPOCHS[app] * POLLUX_DATASETS[app]) if work == "epochs"
                else POLLUX_VALIDATION_WORK[app], category=app,
                largest=POLLUX_MAX_BATCH[app] if accumulate else None,
            )  # fmt: skip
            if placements is not None:
                if app not in measured:
                    measured[app] = pollux_placements(placements / app)
                spec = replace(spec, placements=measured[app])
            jobs.append(TraceJob(arrival, spec, profile.name))
        except SpecError as err:
            raise err.within(f"{path.name}:{line}") from None
    return tuple(jobs)


def gpus_for_load(trace: tuple[TraceJob, ...], *, load: float, cluster: ClusterProfile) -> int:
    """Cluster size at which ``trace`` offers ``load`` (GPU-time at one GPU per job / available)."""
    if not trace:
        return 1
    span = max(j.arrival_s for j in trace) - min(j.arrival_s for j in trace)
    asked = sum(j.spec.work / single_gpu_throughput(j.spec, cluster) for j in trace)
    return max(1, math.ceil(asked / (load * max(span, 1.0))))
