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
  our estimates).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path

from bellows.jobs import JobSpec, SpecError
from bellows.scaling import ClusterProfile, single_gpu_throughput, throughput
from bellows.sim.workloads.categories import K_MAX
from bellows.sim.workloads.models import ModelProfile, model
from bellows.sim.workloads.traces import TraceJob

__all__ = [
    "ITP_MODELS",
    "POLLUX_DATASETS",
    "POLLUX_EPOCHS",
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


def _template(
    name: str, profile: ModelProfile, *, gpus: int, batch: int, work: float, category: str
) -> JobSpec:
    k_max = max(gpus, K_MAX)
    b_min, m_max = profile.m_min, profile.m_max
    b_max = k_max * m_max
    batch_size = min(max(batch, b_min), gpus * m_max)
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


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise SpecError(f"{path.name}.columns", reader.fieldnames, f"columns {required}")
        return list(enumerate(reader, start=2))


def _int(path: Path, line: int, row: dict[str, str], column: str, minimum: int) -> int:
    try:
        value = int(float(row[column]))
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise SpecError(f"{path.name}:{line}.{column}", row[column], f"an integer >= {minimum}")
    return value


def import_itp(path: Path, *, cluster: ClusterProfile) -> tuple[TraceJob, ...]:
    """An ElasticFlow/ITP cluster CSV as a trace; arrivals shift so the first is at 0."""
    rows = _rows(path, ("job_id", "submission_time", "model_name", "batch_size", "num_gpu"))
    jobs: list[TraceJob] = []
    start = min((float(r["submission_time"]) for _, r in rows), default=0.0)
    for line, row in rows:
        trace_model = row["model_name"]
        if trace_model not in ITP_MODELS:
            raise SpecError(
                f"{path.name}:{line}.model_name", trace_model, f"one of {sorted(ITP_MODELS)}"
            )
        profile = model(ITP_MODELS[trace_model])
        gpus = _int(path, line, row, "num_gpu", 1)
        duration = _int(path, line, row, "duration", 1)
        spec = _template(
            row["job_id"], profile, gpus=gpus, batch=_int(path, line, row, "batch_size", 1),
            work=1.0, category=trace_model,
        )  # fmt: skip
        work = duration * throughput(spec, gpus, spec.batch_size, cluster)
        spec = _template(
            row["job_id"], profile, gpus=gpus, batch=spec.batch_size, work=work,
            category=trace_model,
        )  # fmt: skip
        arrival = float(row["submission_time"]) - start
        jobs.append(TraceJob(arrival, spec, profile.name))
    return tuple(jobs)


def import_pollux(path: Path) -> tuple[TraceJob, ...]:
    """A Pollux workload CSV (``name,time,application,num_replicas,batch_size``) as a trace."""
    rows = _rows(path, ("name", "time", "application", "num_replicas", "batch_size"))
    jobs: list[TraceJob] = []
    for line, row in rows:
        app = row["application"]
        if app not in POLLUX_EPOCHS:
            raise SpecError(
                f"{path.name}:{line}.application", app, f"one of {sorted(POLLUX_EPOCHS)}"
            )
        profile = model(app)
        spec = _template(
            row["name"], profile, gpus=_int(path, line, row, "num_replicas", 1),
            batch=_int(path, line, row, "batch_size", 1),
            work=float(POLLUX_EPOCHS[app] * POLLUX_DATASETS[app]), category=app,
        )  # fmt: skip
        arrival = float(_int(path, line, row, "time", 0))
        jobs.append(TraceJob(arrival, spec, profile.name))
    return tuple(jobs)


def gpus_for_load(trace: tuple[TraceJob, ...], *, load: float, cluster: ClusterProfile) -> int:
    """Cluster size at which ``trace`` offers ``load`` (GPU-time at one GPU per job / available)."""
    if not trace:
        return 1
    span = max(j.arrival_s for j in trace) - min(j.arrival_s for j in trace)
    asked = sum(j.spec.work / single_gpu_throughput(j.spec, cluster) for j in trace)
    return max(1, math.ceil(asked / (load * max(span, 1.0))))
