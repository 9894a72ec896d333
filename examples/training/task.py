"""The model, data and loss of the example jobs: the part a data scientist replaces.

A small multi-layer perceptron regresses a noisy linear function of its inputs. The
dataset is either a file (``torch.save({"x": [N, D] tensor, "y": [N] tensor}, path)``) or
made from a seed, so the examples run anywhere, CPU included.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn


def build_model(input_dim: int, hidden: int = 32) -> nn.Module:
    return nn.Sequential(nn.Linear(input_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def synthetic_dataset(size: int, input_dim: int = 8, seed: int = 0) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(size, input_dim, generator=generator)
    weights = torch.randn(input_dim, generator=generator)
    y = 0.5 * (x @ weights) + 0.05 * torch.randn(size, generator=generator)
    return {"x": x, "y": y}


def load_dataset(path: str | None, synthetic_size: int, seed: int) -> dict[str, torch.Tensor]:
    if path is None:
        return synthetic_dataset(synthetic_size, seed=seed)
    data: dict[str, torch.Tensor] = torch.load(Path(path), map_location="cpu")
    if data["x"].shape[0] != data["y"].shape[0]:
        raise ValueError(f"{path}: x has {data['x'].shape[0]} rows but y {data['y'].shape[0]}")
    return data


def summed_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss summed (not averaged) over this rank's samples.

    Summing lets the caller divide by the *global* batch, so that ranks with one sample
    more or less still weigh every sample equally and the gradient does not depend on how
    many workers share the batch.
    """
    prediction = model(x).squeeze(-1)
    return nn.functional.mse_loss(prediction, y, reduction="sum")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line settings both example jobs share."""
    add = parser.add_argument
    add("--checkpoint-dir", required=True, help="storage that outlives the pods (a PVC)")
    add("--data", help="torch.save'd {'x', 'y'} tensors; default: a synthetic dataset")
    add("--synthetic-size", type=int, default=4096, help="rows of the synthetic dataset")
    add("--total-samples", type=int, help="work: samples to process (default: --epochs passes)")
    add("--epochs", type=int, default=10, help="passes over the data when no --total-samples")
    add("--base-lr", type=float, default=0.05, help="learning rate tuned at --base-batch")
    add("--base-batch", type=int, default=64, help="global batch at which --base-lr was tuned")
    add("--lr-scaling", choices=["linear", "sqrt", "none"], default="linear")
    add("--momentum", type=float, default=0.5)
    add("--seed", type=int, default=0, help="model init, data order; fixed for the whole job")
    add("--checkpoint-every", type=int, default=50, help="steps between periodic checkpoints")
    add("--batch-env", default="BELLOWS_GLOBAL_BATCH_SIZE", help="env var of the global batch")
    add("--local-batch-env", default="BELLOWS_LOCAL_BATCH_SIZE", help="env var, per-GPU batch")
    add("--default-batch", type=int, help="global batch when neither env var is set")
    add("--stop-at-step", type=int, help="halt after this step as on SIGTERM (rehearsal)")
    add("--trace-samples", help="folder to log, per rank, the stream positions each step used")
    add("--no-gradient-noise", action="store_true", help="do not estimate the gradient noise")


def noise_fields(noise: Any) -> dict[str, float]:
    """``gradSqr``/``gradVar`` of an ``elastic.GradientNoise`` for a step line, once known."""
    if noise is None or noise.grad_sqr is None:
        return {}
    return {"gradSqr": noise.grad_sqr, "gradVar": noise.grad_var}


def report(rank: int, **fields: object) -> None:
    """One JSON line of progress on rank 0's standard output (what a log collector reads)."""
    if rank == 0:
        print(json.dumps(fields, sort_keys=True), flush=True)


def trace(folder: str | None, rank: int, world: int, **fields: object) -> None:
    if folder is not None:
        path = Path(folder) / f"rank{rank}-of-{world}.jsonl"
        with path.open("a") as out:
            out.write(json.dumps(fields) + "\n")


def check_resumable(state: dict[str, Any], *, seed: int, dataset_size: int) -> None:
    """A checkpoint resumes only the same job: same data order, same dataset."""
    for key, value in (("seed", seed), ("dataset_size", dataset_size)):
        if state[key] != value:
            raise ValueError(
                f"checkpoint {key}={state[key]!r} but this run has {key}={value!r}: the sample"
                " stream would not continue where it stopped; use the job's original value"
            )
