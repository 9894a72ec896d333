"""One cell of a sweep: what identifies it, its trace, and the run itself.

A cell's *identity* is everything its numbers depend on: its parameters (the autoscaler
settings in effect, the size, the horizon), its trace's (the generator's parameters, seed and
size, or the SHA-256 of the imported file), its cluster profile's content, and the version of
the code that decides results (:func:`code_version`). Its SHA-256 (:func:`cell_hash`) is
kept beside the results, so that a re-run skips exactly the cells whose results still hold.

:func:`run_cell` is what a worker runs: it fits the trace to the cluster (as ``simulate``
does), simulates, and returns the ``summary.json`` and ``jobs.csv`` contents for the caller to
write, since a Ray worker may not share the caller's disk.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, fields
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any, Final

import numpy as np

import bellows
from bellows.scaling import MODEL_EFFICIENCY
from bellows.sim.engine import run
from bellows.sim.grids import Cell, TraceChoice, reference_of, run_summary, simulator_switches
from bellows.sim.metrics import jobs_csv_text
from bellows.sim.workloads.generating import generate
from bellows.sim.workloads.importing import import_itp, import_pollux
from bellows.sim.workloads.traces import TraceJob, fit_trace, read_trace

__all__ = [
    "CellOutput",
    "build_trace",
    "cell_hash",
    "cell_identity",
    "code_version",
    "file_digest",
    "run_cell",
    "trace_identity",
    "trace_key",
]

# What decides a run's numbers: these packages and modules of bellows (their .py and .json).
_DECIDING: Final = (
    "inputs.py", "jobs.py", "scaling", "optimizer", "autoscaler", "sim/engine.py",
    "sim/events.py", "sim/metrics.py", "sim/cells.py", "sim/workloads",
)  # fmt: skip


@cache
def code_version() -> str:
    """``bellows.__version__`` and a digest of the source that decides results: a change to
    the simulator, the core or the workloads re-runs every cell, an edit to plots does not."""
    root = Path(bellows.__file__).resolve().parent
    digest = hashlib.sha256()
    for part in _DECIDING:
        path = root / part
        files = [path] if path.is_file() else sorted(
            p for p in path.rglob("*") if p.suffix in {".py", ".json"} and p.is_file()
        )  # fmt: skip
        for file in files:
            digest.update(file.relative_to(root).as_posix().encode())
            digest.update(file.read_bytes())
    return f"{bellows.__version__}+{digest.hexdigest()[:16]}"


@cache
def _file_digest(path: Path, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (read once per size and modification time)."""
    stat = path.stat()
    return _file_digest(path, stat.st_size, stat.st_mtime_ns)


def trace_identity(trace: TraceChoice, *, seed: int | None, gpus: int) -> dict[str, Any]:
    """What a cell's trace is made of: a generated one's parameters, seed and size (rates
    scale with the cluster), or an imported file's content; and the cut to its first jobs."""
    if trace.generated:
        ident: dict[str, Any] = {"generate": dict(trace.params), "seed": seed, "gpus": gpus}
    else:
        assert trace.path is not None
        ident = {trace.kind: file_digest(trace.path)}
    ident["first"] = trace.first
    return ident


# Config fields that change how fast a run goes, never its decisions (AutoscalerConfig).
_NOT_DECIDING: Final = frozenset({"optimizer"})


def _config_identity(cell: Cell) -> dict[str, Any]:
    """Every autoscaler setting in effect: a field added to the config joins the identity."""
    config = cell.config()
    out: dict[str, Any] = {}
    for f in fields(config):
        if f.name not in _NOT_DECIDING:
            value = getattr(config, f.name)
            out[f.name] = value.value if isinstance(value, Enum) else value
    return out


def cell_identity(cell: Cell) -> dict[str, Any]:
    """Everything the cell's numbers depend on (see the module docstring)."""
    return {
        "trace": trace_identity(cell.trace, seed=cell.seed, gpus=cell.gpus),
        "cluster": cell.cluster.digest,
        "gpus": cell.gpus,
        "config": _config_identity(cell),
        "reference": reference_of(dict(cell.settings)),  # pollux, tiresias: their own policy
        "horizon_min": cell.horizon_min,
        "code": code_version(),
    }


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def cell_hash(cell: Cell) -> str:
    """SHA-256 of the cell's canonical identity."""
    return hashlib.sha256(_canonical(cell_identity(cell))).hexdigest()


def trace_key(cell: Cell) -> str:
    """A key shared by every cell that runs on the same trace (before it is fitted)."""
    ident = trace_identity(cell.trace, seed=cell.seed, gpus=cell.gpus)
    ident["cluster"] = cell.cluster.digest
    return hashlib.sha256(_canonical(ident)).hexdigest()[:24]


def build_trace(cell: Cell) -> tuple[TraceJob, ...]:
    """The cell's trace: generated from its seed (as ``bellows workload generate``), or
    imported, cut to its first jobs when the GRID says so; not yet fitted to the cluster."""
    trace = cell.trace
    profile = cell.cluster.profile
    if trace.generated:
        jobs = generate(trace.workload(cell.gpus), np.random.default_rng(cell.seed),
                        cluster=profile)  # fmt: skip
    elif trace.kind == "itp":
        assert trace.path is not None
        jobs = import_itp(trace.path, cluster=profile)
    elif trace.kind == "pollux":
        assert trace.path is not None
        jobs = import_pollux(trace.path)
    else:
        assert trace.path is not None
        jobs = read_trace(trace.path)
    return jobs if trace.first is None else jobs[: trace.first]


@dataclass(frozen=True)
class CellOutput:
    """What a cell's run produced: its ``summary.json`` object and ``jobs.csv`` text (the
    same wherever it ran), the seconds it took and the code that ran it."""

    summary: dict[str, Any]
    jobs_csv: str
    wall_s: float
    code: str


def run_cell(trace: tuple[TraceJob, ...], cell: Cell, code: str) -> CellOutput:
    """Simulate ``cell`` on ``trace`` (fitted to the cluster here, as ``simulate`` does).

    ``code`` is the sweep's :func:`code_version`: a worker that runs other code (a Ray node
    with another install) refuses the cell rather than file numbers under the wrong hash.
    """
    started = time.perf_counter()
    mine = code_version()
    if mine != code:
        raise RuntimeError(f"this worker runs bellows {mine}, the sweep {code}: install the same")
    jobs, _ = fit_trace(trace, cell.gpus, source=cell.trace.name)
    config = cell.config()
    settings = dict(cell.settings)
    horizon = None if cell.horizon_min is None else cell.horizon_min * 60.0
    charge = MODEL_EFFICIENCY if settings.get("efficiency", False) else None
    policy = str(settings.get("policy", "elastic"))
    # a reference (policy: pollux, tiresias) runs as bellows simulate --policy runs it
    result = run(jobs, gpus=cell.gpus, config=config, cluster=cell.cluster.profile,
                 horizon_s=horizon, efficiency=charge,
                 **simulator_switches(policy))  # fmt: skip
    # summary.json as bellows simulate writes it; the wall time goes beside it (cell.json),
    # so that the file is the same wherever and whenever the cell ran
    summary = run_summary(result.summary(), config, policy)
    text = jobs_csv_text(result.jobs)
    return CellOutput(summary, text, time.perf_counter() - started, mine)
