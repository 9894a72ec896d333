"""JSON documents for job and cluster profiles: parse, render, load and save.

Compact by design (the Kubernetes adapter carries a job profile inline in an annotation)::

    {"apiVersion": "bellows.io/v1alpha1", "kind": "JobProfile", "weights": 25557032,
     "step": [{"localBatch": 32, "seconds": 0.21}, ...], "source": "free text",
     "commWeights": 31000000,                       # optional, fitted
     "efficiency": {"model": "imagenet"},           # optional (bellows.scaling.priors)
     "types": {"a100": {"weights": 25557032, "maxLocalBatch": 800,   # optional, per GPU
                        "step": [{"localBatch": 32, "seconds": 0.05}, ...]}},  # type
     "placements": [{"nodes": 2, "gpus": 8, "localBatch": [32, 64],    # optional: step
                     "seconds": [0.41, 0.62], "syncSeconds": [0.2, 0.2]}, ...]}  # times
                                                    # measured on several GPUs (issue 36)

    {"apiVersion": "bellows.io/v1alpha1", "kind": "ClusterProfile", "gpusPerNode": 4,
     "overlap": 1.6, "allreduce": {"intraNode": {"latency": 0.002, "secondsPerWeight": 1e-9},
                                   "interNode": {"latency": 0.001, "secondsPerWeight": 7e-9}},
     "source": "free text"}

Unknown keys are refused (a typo must not silently fall back to a default). Every error is a
:class:`bellows.jobs.SpecError` whose field is the JSON path (``step[2].seconds``); the
schemas in ``schemas/`` say the same for tools that validate JSON on their own.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path

from bellows.inputs import check_float, check_int, parse_json
from bellows.jobs import (
    MAX_GPUS,
    MAX_LOCAL_BATCH,
    MAX_PLACEMENTS,
    MAX_STEP_SECONDS,
    MAX_WEIGHTS,
    MeasuredPlacement,
    SpecError,
    StepProfile,
    TypeSection,
    check_placements,
)
from bellows.scaling.priors import check_keys, efficiency_prior_to_json, parse_efficiency_prior
from bellows.scaling.profiles import MAX_OVERLAP, ClusterProfile, JobProfile, LinkCost

__all__ = [
    "API_VERSION",
    "cluster_profile_to_json",
    "job_profile_to_json",
    "load_cluster_profile",
    "load_job_profile",
    "parse_cluster_profile",
    "parse_job_profile",
    "save_cluster_profile",
    "save_job_profile",
]

API_VERSION = "bellows.io/v1alpha1"


def _mapping(path: str, value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise SpecError(path or "(document)", value, "a JSON object")
    return value


def _header(obj: Mapping[str, object], kind: str) -> None:
    if obj["apiVersion"] != API_VERSION:
        raise SpecError("apiVersion", obj["apiVersion"], repr(API_VERSION))
    if obj["kind"] != kind:
        raise SpecError("kind", obj["kind"], repr(kind))


def _int(path: str, value: object, *, minimum: int, maximum: int | None = None) -> int:
    return check_int(path, value, minimum=minimum, maximum=maximum)


def _number(path: str, value: object, *, minimum: float, maximum: float = math.inf) -> float:
    return check_float(path, value, minimum=minimum, maximum=maximum)


def _string(path: str, value: object) -> str:
    if not isinstance(value, str):
        raise SpecError(path, value, "a string")
    return value


def _step(value: object, path: str = "step") -> StepProfile:
    if not isinstance(value, list) or not value:
        raise SpecError(path, value, "a non-empty list of {localBatch, seconds} points")
    batches: list[int] = []
    seconds: list[float] = []
    for i, item in enumerate(value):
        here = f"{path}[{i}]"
        point = _mapping(here, item)
        check_keys(here, point, {"localBatch", "seconds"}, set())
        m = _int(f"{here}.localBatch", point["localBatch"], minimum=1, maximum=MAX_LOCAL_BATCH)
        if batches and m <= batches[-1]:
            raise SpecError(f"{here}.localBatch", m, f"strictly increasing (> {batches[-1]})")
        s = check_float(
            f"{here}.seconds",
            point["seconds"],
            minimum=0.0,
            maximum=MAX_STEP_SECONDS,
            open_min=True,
        )
        batches.append(m)
        seconds.append(s)
    return StepProfile(tuple(batches), tuple(seconds))


def parse_job_profile(obj: Mapping[str, object]) -> JobProfile:
    """A :class:`JobProfile` from its JSON object; :class:`SpecError` names the JSON field."""
    obj = _mapping("", obj)
    optional = {"source", "commWeights", "efficiency", "types", "placements"}
    check_keys("", obj, {"apiVersion", "kind", "weights", "step"}, optional)
    _header(obj, "JobProfile")
    comm, efficiency = obj.get("commWeights"), obj.get("efficiency")
    return JobProfile(
        types=_types(obj.get("types", {})),
        weights=_int("weights", obj["weights"], minimum=1, maximum=MAX_WEIGHTS),
        step=_step(obj["step"]),
        source=_string("source", obj.get("source", "")),
        comm_weights=(
            None if comm is None else _int("commWeights", comm, minimum=1, maximum=MAX_WEIGHTS)
        ),
        efficiency=(
            None if efficiency is None else parse_efficiency_prior("efficiency", efficiency)
        ),
        placements=_placements(obj.get("placements", [])),
    )


def _numbers(path: str, value: object, length: int, maximum: float) -> list[float]:
    """A list of ``length`` numbers in ``(0, maximum]``."""
    if not isinstance(value, list) or len(value) != length:
        shown = f"{len(value)} items" if isinstance(value, list) else value
        raise SpecError(path, shown, f"a list of {length} numbers, one per localBatch")
    return [check_float(f"{path}[{i}]", v, minimum=0.0, maximum=maximum, open_min=True)
            for i, v in enumerate(value)]  # fmt: skip


def _placements(value: object) -> tuple[MeasuredPlacement, ...]:
    """The ``placements`` section: a list of ``{nodes, gpus, localBatch: [...], seconds:
    [...], syncSeconds: [...]?}``, one per (nodes, gpus)."""
    if not isinstance(value, list):
        raise SpecError("placements", value, "a list of {nodes, gpus, localBatch, seconds}")
    if len(value) > MAX_PLACEMENTS:
        raise SpecError("placements", f"{len(value)} placements", f"at most {MAX_PLACEMENTS}")
    out: list[MeasuredPlacement] = []
    seen: dict[tuple[int, int], int] = {}
    for i, item in enumerate(value):
        here = f"placements[{i}]"
        entry = _mapping(here, item)
        check_keys(here, entry, {"nodes", "gpus", "localBatch", "seconds"}, {"syncSeconds"})
        nodes = _int(f"{here}.nodes", entry["nodes"], minimum=1, maximum=MAX_GPUS)
        gpus = _int(f"{here}.gpus", entry["gpus"], minimum=nodes, maximum=MAX_GPUS)
        if (nodes, gpus) in seen:
            raise SpecError(here, f"nodes {nodes}, gpus {gpus}",
                            f"one entry per (nodes, gpus): placements[{seen[nodes, gpus]}] "
                            "has them")  # fmt: skip
        seen[nodes, gpus] = i
        batches = entry["localBatch"]
        if not isinstance(batches, list) or not batches:
            raise SpecError(f"{here}.localBatch", batches, "a non-empty list of integers")
        local: list[int] = []
        for j, raw in enumerate(batches):
            m = _int(f"{here}.localBatch[{j}]", raw, minimum=1, maximum=MAX_LOCAL_BATCH)
            if local and m <= local[-1]:
                raise SpecError(
                    f"{here}.localBatch[{j}]", m, f"strictly increasing (> {local[-1]})"
                )
            local.append(m)
        seconds = _numbers(f"{here}.seconds", entry["seconds"], len(local), MAX_STEP_SECONDS)
        sync: list[float] = []
        if "syncSeconds" in entry:
            raw = entry["syncSeconds"]
            if not isinstance(raw, list) or len(raw) != len(local):
                raise SpecError(f"{here}.syncSeconds", raw, f"a list of {len(local)} numbers")
            sync = [check_float(f"{here}.syncSeconds[{j}]", v, minimum=0.0, maximum=seconds[j])
                    for j, v in enumerate(raw)]  # fmt: skip
        out.append(MeasuredPlacement(nodes, gpus, tuple(local), tuple(seconds), tuple(sync)))
    placements = tuple(out)
    check_placements(placements)  # the batches in all (MAX_PLACEMENT_POINTS)
    return placements


MAX_TYPES = 16  # GPU type sections in one profile
_TYPE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _types(value: object) -> tuple[TypeSection, ...]:
    """The ``types`` section: per GPU type name, ``weights``, ``maxLocalBatch``, ``step``."""
    sections = _mapping("types", value)
    if len(sections) > MAX_TYPES:
        raise SpecError("types", f"{len(sections)} types", f"at most {MAX_TYPES}")
    out = []
    for name, item in sections.items():
        here = f"types.{name}"
        if not _type_name(here, name):
            raise SpecError(here, name, "a GPU type name, not empty")
        section = _mapping(here, item)
        check_keys(here, section, {"weights", "maxLocalBatch", "step"}, set())
        out.append(TypeSection(
            name, _step(section["step"], f"{here}.step"),
            _int(f"{here}.weights", section["weights"], minimum=1, maximum=MAX_WEIGHTS),
            _int(f"{here}.maxLocalBatch", section["maxLocalBatch"], minimum=1,
                 maximum=MAX_LOCAL_BATCH),
        ))  # fmt: skip
    return tuple(out)


def job_profile_to_json(profile: JobProfile) -> dict[str, object]:
    """The JSON object of ``profile`` (round-trips through :func:`parse_job_profile`)."""
    out: dict[str, object] = {
        "apiVersion": API_VERSION,
        "kind": "JobProfile",
        "weights": profile.weights,
        "step": _points(profile.step),
        "source": profile.source,
    }
    if profile.comm_weights is not None:
        out["commWeights"] = profile.comm_weights
    if profile.efficiency is not None:
        out["efficiency"] = efficiency_prior_to_json(profile.efficiency)
    if profile.types:
        out["types"] = {
            t.gpu_type: {"weights": t.weights, "maxLocalBatch": t.m_max, "step": _points(t.profile)}
            for t in profile.types
        }
    if profile.placements:
        out["placements"] = [
            {"nodes": p.nodes, "gpus": p.gpus, "localBatch": list(p.local_batches),
             "seconds": list(p.seconds)}
            | ({"syncSeconds": list(p.sync_seconds)} if p.sync_seconds else {})
            for p in profile.placements
        ]  # fmt: skip
    return out


def _points(step: StepProfile) -> list[dict[str, object]]:
    return [{"localBatch": m, "seconds": s}
            for m, s in zip(step.local_batches, step.seconds, strict=True)]  # fmt: skip


# Far beyond any network (a ring step of 1 ms, a weight per ns are slow ones), and small
# enough that the overlap combination (values to the power 16) stays a finite float.
MAX_LINK_LATENCY_S = 1e3
MAX_SECONDS_PER_WEIGHT = 1e-3


def _link(path: str, value: object) -> LinkCost:
    link = _mapping(path, value)
    check_keys(path, link, {"latency", "secondsPerWeight"}, set())
    return LinkCost(
        latency=_number(
            f"{path}.latency", link["latency"], minimum=0.0, maximum=MAX_LINK_LATENCY_S
        ),
        per_weight=_number(
            f"{path}.secondsPerWeight", link["secondsPerWeight"], minimum=0.0,
            maximum=MAX_SECONDS_PER_WEIGHT,
        ),
    )  # fmt: skip


def parse_cluster_profile(obj: Mapping[str, object]) -> ClusterProfile:
    """A :class:`ClusterProfile` from its JSON object; :class:`SpecError` names the JSON field."""
    obj = _mapping("", obj)
    optional = {"gpusPerNode", "overlap", "source", "gpuType"}
    check_keys("", obj, {"apiVersion", "kind", "allreduce"}, optional)
    _header(obj, "ClusterProfile")
    allreduce = _mapping("allreduce", obj["allreduce"])
    check_keys("allreduce", allreduce, {"intraNode", "interNode"}, set())
    return ClusterProfile(
        intra_node=_link("allreduce.intraNode", allreduce["intraNode"]),
        inter_node=_link("allreduce.interNode", allreduce["interNode"]),
        overlap=_number("overlap", obj.get("overlap", 1.0), minimum=1.0, maximum=MAX_OVERLAP),
        gpus_per_node=_int("gpusPerNode", obj.get("gpusPerNode", 4), minimum=1),
        source=_string("source", obj.get("source", "")),
        gpu_type=_type_name("gpuType", obj.get("gpuType", "")),
    )


def _type_name(path: str, value: object) -> str:
    """A GPU type name (``""``: none), as a Kubernetes label value."""
    name = _string(path, value)
    if name and not _TYPE_NAME.fullmatch(name):
        raise SpecError(path, name, "a GPU type name: lowercase letters, digits and '-', "
                        "at most 63, as a Kubernetes label value")  # fmt: skip
    return name


def cluster_profile_to_json(profile: ClusterProfile) -> dict[str, object]:
    """The JSON object of ``profile`` (round-trips through :func:`parse_cluster_profile`)."""

    def link(cost: LinkCost) -> dict[str, object]:
        return {"latency": cost.latency, "secondsPerWeight": cost.per_weight}

    out: dict[str, object] = {
        "apiVersion": API_VERSION,
        "kind": "ClusterProfile",
        "gpusPerNode": profile.gpus_per_node,
        "overlap": profile.overlap,
        "allreduce": {"intraNode": link(profile.intra_node), "interNode": link(profile.inter_node)},
        "source": profile.source,
    }
    if profile.gpu_type:
        out["gpuType"] = profile.gpu_type
    return out


MAX_DOCUMENT_BYTES = 1 << 20  # a 256-point job profile takes about 15 KiB
_DOCUMENT_DEPTH = 5  # {"types": {"a100": {"step": [{...}]}}}


def _read(path: str | Path) -> Mapping[str, object]:
    """The JSON object in ``path``, read with :func:`bellows.inputs.parse_json`'s limits
    (size, nesting, UTF-8, finite numbers): every failure is a :class:`SpecError`."""
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)  # never more, whatever the file
    except OSError as exc:
        raise SpecError(str(path), exc.strerror or type(exc).__name__, "a readable file") from None
    obj = parse_json(
        str(path), data, max_bytes=MAX_DOCUMENT_BYTES, max_depth=_DOCUMENT_DEPTH,
        what="a JSON document",
    )  # fmt: skip
    return _mapping(str(path), obj)


def _in_file(path: str | Path, error: SpecError) -> SpecError:
    return SpecError(f"{path}: {error.field}", error.value, error.valid)


def load_job_profile(path: str | Path) -> JobProfile:
    """Read a job profile JSON file; errors name the file and the JSON field."""
    obj = _read(path)
    try:
        return parse_job_profile(obj)
    except SpecError as error:
        raise _in_file(path, error) from error


def save_job_profile(path: str | Path, profile: JobProfile) -> None:
    """Write ``profile`` as indented JSON."""
    Path(path).write_text(json.dumps(job_profile_to_json(profile), indent=2) + "\n", "utf-8")


def load_cluster_profile(path: str | Path) -> ClusterProfile:
    """Read a cluster profile JSON file; errors name the file and the JSON field."""
    obj = _read(path)
    try:
        return parse_cluster_profile(obj)
    except SpecError as error:
        raise _in_file(path, error) from error


def save_cluster_profile(path: str | Path, profile: ClusterProfile) -> None:
    """Write ``profile`` as indented JSON."""
    Path(path).write_text(json.dumps(cluster_profile_to_json(profile), indent=2) + "\n", "utf-8")
