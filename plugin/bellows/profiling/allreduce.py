"""Timing Allreduce with torch.distributed: gloo on CPUs, NCCL on GPUs, one process per rank.

:func:`measure_allreduce` starts ``k`` local processes for each process count ``k``, has
them all-reduce float32 buffers of each size, and returns one
:class:`~bellows.profiling.calibrating.AllreduceSample` per ``(k, size)``: the median over
iterations of the *slowest* rank's time, since a synchronous step waits for the last rank.
With NCCL, rank ``r`` uses GPU ``r``, so ``k`` may not exceed the visible GPUs.
"""

from __future__ import annotations

import json
import multiprocessing
import socket
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bellows.jobs import SpecError
from bellows.profiling.calibrating import AllreduceSample

__all__ = ["measure_allreduce"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class _Job:
    """What every rank of one measurement needs (picklable, for spawned processes)."""

    world: int
    port: int
    backend: str
    sizes: tuple[int, ...]
    iterations: int
    warmup: int
    out: str


def _worker(rank: int, job: _Job) -> None:
    """One rank: all-reduce each buffer size, rank 0 writes ``[[size, seconds], ...]``."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    torch.set_num_threads(1)  # ranks share the CPU; more threads only fight each other
    dist.init_process_group(
        job.backend, init_method=f"tcp://127.0.0.1:{job.port}", world_size=job.world, rank=rank
    )
    device = torch.device("cuda", rank) if job.backend == "nccl" else torch.device("cpu")

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    results: list[list[float]] = []
    try:
        for size in job.sizes:
            buffer = torch.ones(size, dtype=torch.float32, device=device)
            for _ in range(job.warmup):
                dist.all_reduce(buffer)
            sync()
            times: list[float] = []
            for _ in range(job.iterations):
                dist.barrier()
                start = time.perf_counter()  # the edge of the system: a real clock
                dist.all_reduce(buffer)
                sync()
                times.append(time.perf_counter() - start)
            slowest = torch.tensor([statistics.median(times)], dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            results.append([float(size), float(slowest.item())])
    finally:
        dist.destroy_process_group()
    if rank == 0:
        Path(job.out).write_text(json.dumps(results))


def _run_ranks(job: _Job, timeout_s: float) -> None:
    """Start one spawned process per rank and wait; a failed or stuck rank is an error."""
    context = multiprocessing.get_context("spawn")  # CUDA cannot be used after fork
    ranks = [context.Process(target=_worker, args=(r, job)) for r in range(job.world)]
    for process in ranks:
        process.start()
    deadline = time.monotonic() + timeout_s
    for process in ranks:
        process.join(max(deadline - time.monotonic(), 0.0))
    stuck = [r for r, p in enumerate(ranks) if p.is_alive()]
    for process in ranks:
        if process.is_alive():
            process.terminate()
            process.join()
    if stuck:
        raise RuntimeError(f"Allreduce ranks {stuck} of {job.world} still ran after {timeout_s} s")
    failed = {r: p.exitcode for r, p in enumerate(ranks) if p.exitcode != 0}
    if failed:
        raise RuntimeError(f"Allreduce ranks failed (rank: exit code) {failed}; see their stderr")


def measure_allreduce(
    process_counts: Sequence[int],
    sizes: Sequence[int],
    *,
    backend: str = "gloo",
    iterations: int = 10,
    warmup: int = 2,
    timeout_s: float = 600.0,
) -> list[AllreduceSample]:
    """Allreduce times for every ``(processes, size)`` pair, measured on this machine."""
    import torch  # noqa: PLC0415

    if backend not in ("gloo", "nccl"):
        raise SpecError("--backend", backend, "'gloo' (CPU) or 'nccl' (GPU)")
    for i, k in enumerate(process_counts):
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise SpecError(f"processes[{i}]", k, "an integer >= 2")
    for i, n in enumerate(sizes):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise SpecError(f"sizes[{i}]", n, "an integer >= 1 (float32 values)")
    if backend == "nccl" and max(process_counts) > torch.cuda.device_count():
        raise SpecError(
            "processes",
            max(process_counts),
            f"at most the {torch.cuda.device_count()} visible GPUs (one rank per GPU)",
        )
    samples: list[AllreduceSample] = []
    with tempfile.TemporaryDirectory(prefix="bellows-calibrate-") as folder:
        for k in sorted(set(process_counts)):
            out = str(Path(folder) / f"k{k}.json")
            job = _Job(k, _free_port(), backend, tuple(sizes), iterations, warmup, out)
            _run_ranks(job, timeout_s)
            for size, seconds in json.loads(Path(out).read_text()):
                samples.append(AllreduceSample(k, int(size), max(float(seconds), 1e-9)))
    return samples
