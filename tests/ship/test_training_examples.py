"""The example elastic jobs halt and resume at another world size and batch, losing nothing.

Real processes (one per rank, as the operators start them), gloo on 127.0.0.1, a tiny
model and dataset. A job halted at world size 2 and resumed at world size 3 (or 1) ends
with the same weights as one run straight through, so the checkpoint carries the model,
the optimizer and the data position, and the gradient does not depend on the world size.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO

torch = pytest.importorskip("torch")

EXAMPLES = REPO / "examples" / "training"
DATASET = 64
COMMON = ["--synthetic-size", str(DATASET), "--base-batch", "8", "--base-lr", "0.05"]
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


_TEARDOWN_ABORT = "terminate called without an active exception"


class PortTakenError(RuntimeError):
    """The rendezvous port was taken between choosing it and binding it (retry)."""


@dataclass
class Run:
    """The processes of one incarnation of a job (what one set of pods would be)."""

    procs: list[subprocess.Popen[str]]

    def wait(self) -> tuple[list[int], list[dict[str, Any]]]:
        codes, lines, errors = [], [], []
        for rank, proc in enumerate(self.procs):
            out, err = proc.communicate(timeout=TIMEOUT_S)
            codes.append(proc.returncode)
            errors.append(err)
            if rank == 0:
                lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        done = any(line.get("event") == "done" for line in lines)
        for rank, (code, err) in enumerate(zip(codes, errors, strict=True)):
            if code not in (0, 143):
                if "address already in use" in err.lower() and not lines:
                    raise PortTakenError(err[-500:])
                if done and code == -signal.SIGABRT and _TEARDOWN_ABORT in err:
                    # rank 0 said "done" after the final barrier: every rank had trained and
                    # saved; torch's C++ teardown then aborted a rank on its way out (seen in
                    # full suites on a loaded machine: a thread still joinable at exit)
                    codes[rank] = 0
                    continue
                raise AssertionError(f"rank {rank} exited {code}:\n{err[-3000:]}")
        return codes, lines


def run_job(
    script: str, world: int, batch: int, ckpt: Path, *args: str, mpi: bool = False
) -> tuple[list[int], list[dict[str, Any]]]:
    """Launch and wait; a rendezvous port lost to another process is retried (no step ran)."""
    for _ in range(3):
        try:
            return launch(script, world, batch, ckpt, *args, mpi=mpi).wait()
        except PortTakenError:
            continue
    raise AssertionError("the rendezvous port was taken three times")


def launch(script: str, world: int, batch: int, ckpt: Path, *args: str, mpi: bool = False) -> Run:
    port = _free_port()
    procs = []
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMI_"))}
        env.update({"MASTER_PORT": str(port), "BELLOWS_GLOBAL_BATCH_SIZE": str(batch)})
        env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLES)})
        if mpi:  # what mpirun sets; the rendezvous host comes from the hostfile
            env.pop("MASTER_ADDR", None)
            env.update({"OMPI_COMM_WORLD_SIZE": str(world), "OMPI_COMM_WORLD_RANK": str(rank)})
        else:  # what the training operator sets on PyTorchJob pods
            env.update({"WORLD_SIZE": str(world), "RANK": str(rank), "MASTER_ADDR": "127.0.0.1"})
        command = [sys.executable, str(EXAMPLES / script), "--checkpoint-dir", str(ckpt)]
        procs.append(
            subprocess.Popen(
                [*command, *COMMON, *args],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    return Run(procs)


def checkpoint(ckpt: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(ckpt / "checkpoint.pt", weights_only=False)
    return state


def assert_same_training_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert (a["step"], a["samples_seen"]) == (b["step"], b["samples_seen"])
    for name, tensor in a["model"].items():
        torch.testing.assert_close(tensor, b["model"][name], rtol=1e-5, atol=1e-6)
    momenta_a = [s["momentum_buffer"] for s in a["optimizer"]["state"].values()]
    momenta_b = [s["momentum_buffer"] for s in b["optimizer"]["state"].values()]
    assert len(momenta_a) == len(momenta_b) > 0
    for x, y in zip(momenta_a, momenta_b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6)


def traced_positions(folder: Path) -> dict[int, list[tuple[int, int]]]:
    """Stream positions each step used, from every rank of every incarnation."""
    steps: dict[int, list[tuple[int, int]]] = {}
    for path in folder.glob("rank*.jsonl"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            steps.setdefault(entry["step"], []).append(tuple(entry["positions"]))
    return steps


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """World size 1, global batch 8, 12 steps straight through."""
    ckpt = tmp_path_factory.mktemp("reference")
    codes, lines = run_job("pytorch_ddp.py", 1, 8, ckpt, "--total-samples", "96")
    assert codes == [0]
    assert lines[-1] == {"event": "done", "samples_seen": 96, "step": 12}
    return checkpoint(ckpt)


@pytest.mark.slow
def test_pytorchjob_halted_at_2_resumed_at_3_matches_a_straight_run(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    ckpt, trace = tmp_path / "ckpt", tmp_path / "trace"
    trace.mkdir()
    args = ("--total-samples", "96", "--trace-samples", str(trace))
    codes, lines = run_job("pytorch_ddp.py", 2, 8, ckpt, *args, "--stop-at-step", "5")
    assert codes == [143, 143]  # a halted job never looks finished
    assert lines[-1] == {"event": "halted", "samples_seen": 40, "step": 5}
    halted = checkpoint(ckpt)
    assert (halted["step"], halted["samples_seen"], halted["world_size"]) == (5, 40, 2)

    codes, lines = run_job("pytorch_ddp.py", 3, 8, ckpt, *args)
    assert codes == [0, 0, 0]
    start = lines[0]
    assert start["resumed"] is True
    assert (start["step"], start["samples_seen"], start["world_size"]) == (5, 40, 3)
    assert lines[-1] == {"event": "done", "samples_seen": 96, "step": 12}
    assert_same_training_state(checkpoint(ckpt), reference)

    # Every stream position was used exactly once, in order, across both incarnations.
    steps = traced_positions(trace)
    assert sorted(steps) == list(range(1, 13))
    covered = sorted(p for step in steps.values() for p in step)
    assert covered[0][0] == 0
    assert covered[-1][1] == 96
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert [len(steps[s]) for s in range(1, 13)] == [2] * 5 + [3] * 7


@pytest.mark.slow
def test_sigterm_halts_every_rank_and_a_new_batch_resumes_the_work(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    run = launch("pytorch_ddp.py", 2, 8, ckpt, "--total-samples", "100000000")
    rank0 = run.procs[0]
    assert rank0.stdout is not None
    deadline = time.monotonic() + TIMEOUT_S
    for line in rank0.stdout:  # wait until a few steps are done, as a running job would be
        if json.loads(line).get("step", 0) >= 6 or time.monotonic() > deadline:
            break
    for proc in run.procs:  # Kubernetes signals every pod of a suspended job
        proc.send_signal(signal.SIGTERM)
    codes = [proc.wait(timeout=TIMEOUT_S) for proc in run.procs]
    errors = [proc.stderr.read()[-2000:] if proc.stderr else "" for proc in run.procs]
    assert codes == [143, 143], errors
    halted = checkpoint(ckpt)
    step, seen = halted["step"], halted["samples_seen"]
    assert step >= 6
    assert seen == 8 * step

    # Resume on one worker with a global batch of 12: four more steps finish the work.
    total = seen + 4 * 12
    codes, lines = run_job("pytorch_ddp.py", 1, 12, ckpt, "--total-samples", str(total))
    assert codes == [0]
    start, steps = lines[0], [e for e in lines if e["event"] == "step"]
    assert (start["step"], start["samples_seen"], start["global_batch"]) == (step, seen, 12)
    assert start["lr"] == pytest.approx(0.05 * 12 / 8)  # linear scaling from the base batch
    assert [e["samples_seen"] for e in steps] == [seen + 12 * i for i in range(1, 5)]
    assert lines[-1] == {"event": "done", "samples_seen": total, "step": step + 4}
    # The work continued from the trained weights, not from scratch.
    fresh = _full_data_loss(None)
    assert _full_data_loss(halted) < 0.8 * fresh
    assert _full_data_loss(checkpoint(ckpt)) < 0.8 * fresh


def _full_data_loss(state: dict[str, Any] | None) -> float:
    """Mean loss over the whole synthetic dataset of a checkpoint (None: initial weights)."""
    sys.path.insert(0, str(EXAMPLES))
    import task  # noqa: PLC0415

    data = task.synthetic_dataset(DATASET, seed=0)
    torch.manual_seed(0)
    model = task.build_model(int(data["x"].shape[1]))
    if state is not None:
        model.load_state_dict(state["model"])
    with torch.no_grad():
        return float(task.summed_loss(model, data["x"], data["y"])) / DATASET


@pytest.mark.slow
def test_mpijob_example_halts_and_resumes_like_the_pytorchjob_one(
    tmp_path: Path, reference: dict[str, Any]
) -> None:
    ckpt = tmp_path / "ckpt"
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=1\n")
    args = ("--total-samples", "96", "--hostfile", str(hostfile))
    codes, lines = run_job("mpi_allreduce.py", 2, 8, ckpt, *args, "--stop-at-step", "5", mpi=True)
    assert codes == [143, 143]
    assert lines[-1] == {"event": "halted", "samples_seen": 40, "step": 5}
    codes, lines = run_job("mpi_allreduce.py", 1, 8, ckpt, *args, mpi=True)
    assert codes == [0]
    assert lines[-1] == {"event": "done", "samples_seen": 96, "step": 12}
    # Same math as the DDP job: same weights and momentum as the straight reference run.
    assert_same_training_state(checkpoint(ckpt), reference)


def _exact_noise(seed: int = 0) -> tuple[float, float]:
    """``|G|^2`` and ``tr(Sigma)`` (sample variance) of the per-sample gradients of the
    examples' model at its initial weights over the whole synthetic dataset."""
    sys.path.insert(0, str(EXAMPLES))
    import task  # noqa: PLC0415

    data = task.synthetic_dataset(DATASET, seed=seed)
    torch.manual_seed(seed)
    model = task.build_model(int(data["x"].shape[1]))
    grads = []
    for i in range(DATASET):
        model.zero_grad()
        task.summed_loss(model, data["x"][i : i + 1], data["y"][i : i + 1]).backward()
        grads.append(torch.cat([p.grad.reshape(-1).double() for p in model.parameters()]))
    g = torch.stack(grads)
    mean = g.mean(0)
    return float(mean.pow(2).sum()), float((g - mean).pow(2).sum(1).sum() / (DATASET - 1))


@pytest.mark.parametrize(
    ("script", "world"), [("pytorch_ddp.py", 2), ("pytorch_ddp.py", 1), ("mpi_allreduce.py", 2)]
)
def test_gradient_noise_estimates_match_the_exact_statistics(
    tmp_path: Path, script: str, world: int
) -> None:
    """With the learning rate 0 the weights stay at their start, so the smoothed estimates
    of every step (DDP: local norms by the communication hook against the all-reduced one;
    one process: two micro-batches; MPI: before and after the explicit all-reduce) must
    approach the exact per-sample statistics of the dataset at those weights."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=1\n")
    extra = ("--hostfile", str(hostfile)) if script.startswith("mpi") else ()
    args = ("--total-samples", str(16 * DATASET), "--base-lr", "0", *extra)
    codes, lines = run_job(script, world, 8, tmp_path / "ckpt", *args, mpi=extra != ())
    assert codes == [0] * world
    steps = [line for line in lines if line.get("event") == "step"]
    assert all(math.isfinite(s["gradSqr"]) and s["gradSqr"] > 0 for s in steps[10:])
    assert all(math.isfinite(s["gradVar"]) and s["gradVar"] >= 0 for s in steps[10:])
    sqr, var = _exact_noise()
    late = steps[len(steps) // 2 :]  # each a smoothed estimate; their median, late on
    median_sqr = statistics.median(s["gradSqr"] for s in late)
    median_var = statistics.median(s["gradVar"] for s in late)
    # batches drawn without replacement from a finite dataset: E[gradSqr] = |G|^2 - var / N
    expected = sqr - var / DATASET
    assert median_sqr == pytest.approx(expected, rel=0.25)
    assert median_var == pytest.approx(var, rel=0.25)
    assert median_var / median_sqr == pytest.approx(var / expected, rel=0.4)  # noise scale
