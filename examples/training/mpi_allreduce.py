#!/usr/bin/env python3
"""Elastic Horovod-style data-parallel training for a Bellows-managed MPIJob.

Written the way a Horovod script is (rank 0 loads the checkpoint and broadcasts it and the
parameters; gradients are all-reduced explicitly before each optimizer step) but on
``torch.distributed``, because Horovod cannot be installed here. Under ``mpirun`` the
ranks find their place from ``OMPI_COMM_WORLD_SIZE``/``OMPI_COMM_WORLD_RANK`` (or
``PMI_SIZE``/``PMI_RANK``) and meet at the first host of ``/etc/mpi/hostfile``, which the
MPI Operator rewrites for every new worker count. To port it to Horovod, replace
``init_process_group`` by ``hvd.init()``, :func:`broadcast_state` by
``hvd.broadcast_object`` and ``hvd.broadcast_parameters``, and :func:`allreduce_gradients`
by ``hvd.DistributedOptimizer(..., op=hvd.Sum)``; the contract parts stay as they are.

The gradient noise (``elastic.GradientNoise``) is measured as Horovod would: each rank's
local gradient norm just before the explicit all-reduce, the all-reduced one after, and the
ranks' local norms summed in the same all-reduce as the loss (``hvd.allreduce`` of two
numbers). With one rank, two micro-batches of each step.

Launch it with a ``-np`` derived from the hostfile so that a rescale needs no new command::

    mpirun -np "$(grep -c . /etc/mpi/hostfile)" python mpi_allreduce.py --checkpoint-dir /ckpt
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
import torch.distributed as dist
from elastic import (
    HALT_EXIT_CODE,
    Checkpointer,
    ElasticEnv,
    GradientNoise,
    HaltSignal,
    SampleStream,
    scale_lr,
    shard_bounds,
    shard_sizes,
    squared_norm,
)
from task import (
    add_arguments,
    build_model,
    check_resumable,
    load_dataset,
    noise_fields,
    report,
    summed_loss,
)
from task import trace as trace_samples
from torch import nn


def broadcast_state(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """Rank 0's checkpoint to every rank (``hvd.broadcast_object``)."""
    box: list[dict[str, Any] | None] = [state]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def broadcast_parameters(model: nn.Module) -> None:
    """Every rank starts from rank 0's weights (``hvd.broadcast_parameters``)."""
    for tensor in model.state_dict().values():
        dist.broadcast(tensor, src=0)


def allreduce_gradients(model: nn.Module) -> None:
    """Sum the gradients of all ranks (``hvd.DistributedOptimizer`` with ``op=hvd.Sum``)."""
    for parameter in model.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--hostfile", default="/etc/mpi/hostfile")
    args = parser.parse_args(argv)
    env = ElasticEnv.from_mpi_env(
        batch_env=args.batch_env,
        local_batch_env=args.local_batch_env,
        default_batch=args.default_batch,
        hostfile=args.hostfile,
    )
    halt = HaltSignal().install()
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        world_size=env.world_size,
        rank=env.rank,
    )
    try:
        return train(args, env, halt, device)
    finally:
        dist.destroy_process_group()


def backward(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    env: ElasticEnv,
    batch: int,
    measure: bool,
) -> tuple[torch.Tensor, tuple[float, float] | None]:
    """The step's loss (summed over this rank's samples) and local gradients (divided by the
    global batch); with ``measure``, ``(local, inverse)``: ``|g_i|^2`` of this rank's mean
    gradient (two micro-batches' mean with one rank) and the mean of ``1 / m_i``."""
    if not measure or batch < max(2, env.world_size):  # every piece needs a sample
        summed = summed_loss(model, x, y)
        (summed / batch).backward()
        return summed, None
    params = [p for p in model.parameters() if p.requires_grad]
    if env.world_size > 1:
        summed = summed_loss(model, x, y)
        (summed / batch).backward()
        share = shard_sizes(batch, env.world_size)
        local = squared_norm(p.grad for p in params) * (batch / share[env.rank]) ** 2
        return summed, (local, sum(1.0 / m for m in share) / env.world_size)
    half = max(1, x.shape[0] // 2)
    rest = x.shape[0] - half
    first = summed_loss(model, x[:half], y[:half])
    (first / batch).backward()
    g1 = [p.grad.detach().clone() for p in params if p.grad is not None]
    second = summed_loss(model, x[half:], y[half:])
    (second / batch).backward()
    g2 = [p.grad.detach() - a for p, a in zip(params, g1, strict=True) if p.grad is not None]
    local = squared_norm(g1) * (batch / half) ** 2 + squared_norm(g2) * (batch / rest) ** 2
    return first + second, (local / 2.0, (1.0 / half + 1.0 / rest) / 2.0)


def reduce_loss_and_noise(
    model: nn.Module,
    summed: torch.Tensor,
    measured: tuple[float, float] | None,
    *,
    noise: GradientNoise | None,
    world: int,
    batch: int,
) -> float:
    """The loss summed over every rank; one all-reduce (``hvd.allreduce`` of two numbers)
    carries it and the ranks' local norms, whose mean and the all-reduced gradient's norm
    then update ``noise``."""
    local = 0.0 if measured is None else measured[0]
    totals = torch.tensor([float(summed.detach()), local], dtype=torch.float64)
    dist.all_reduce(totals)
    if noise is not None and measured is not None:
        big = squared_norm(p.grad for p in model.parameters())
        noise.update(float(totals[1]) / world, measured[1], big, batch)
    return float(totals[0])


def train(args: argparse.Namespace, env: ElasticEnv, halt: HaltSignal, device: Any) -> int:
    data = load_dataset(args.data, args.synthetic_size, args.seed)
    size = int(data["x"].shape[0])
    total = args.total_samples or args.epochs * size
    torch.manual_seed(args.seed)
    model = build_model(int(data["x"].shape[1])).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr, momentum=args.momentum)
    checkpointer = Checkpointer(args.checkpoint_dir)
    state = broadcast_state(checkpointer.load() if env.rank == 0 else None)
    step, seen = 0, 0
    if state is not None:
        check_resumable(state, seed=args.seed, dataset_size=size)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, seen = state["step"], state["samples_seen"]
    broadcast_parameters(model)
    lr = scale_lr(args.base_lr, args.base_batch, env.global_batch, args.lr_scaling)
    for group in optimizer.param_groups:
        group["lr"] = lr
    stream = SampleStream(size, args.seed)
    noise = None if args.no_gradient_noise else GradientNoise()
    report(
        env.rank,
        event="start",
        resumed=state is not None,
        step=step,
        samples_seen=seen,
        world_size=env.world_size,
        global_batch=env.global_batch,
        lr=lr,
    )

    def save() -> None:
        if env.rank == 0:
            checkpointer.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                    "samples_seen": seen,
                    "seed": args.seed,
                    "dataset_size": size,
                    "global_batch": env.global_batch,
                    "world_size": env.world_size,
                }
            )

    while seen < total:
        if halt.agreed(device):
            save()
            # Leave together: a rank that tears down its connections while another is still
            # writing the checkpoint can make the other's communication threads abort.
            dist.barrier()
            report(env.rank, event="halted", step=step, samples_seen=seen)
            return HALT_EXIT_CODE
        batch = min(env.global_batch, total - seen)
        lo, hi = shard_bounds(batch, env.world_size, env.rank)
        index = torch.tensor(stream.indices(seen + lo, hi - lo), dtype=torch.long)
        x, y = data["x"][index].to(device), data["y"][index].to(device)
        optimizer.zero_grad(set_to_none=False)
        # local gradients, summed over ranks below: the global-batch mean
        summed, measured = backward(model, x, y, env=env, batch=batch, measure=noise is not None)
        allreduce_gradients(model)
        optimizer.step()
        loss = reduce_loss_and_noise(
            model, summed, measured, noise=noise, world=env.world_size, batch=batch
        )
        step, seen = step + 1, seen + batch
        trace_samples(
            args.trace_samples,
            env.rank,
            env.world_size,
            step=step,
            positions=(seen - batch + lo, seen - batch + hi),
            indices=index.tolist(),
        )
        report(
            env.rank,
            event="step",
            step=step,
            samples_seen=seen,
            loss=loss / batch,
            lr=lr,
            **noise_fields(noise),
        )
        if step % args.checkpoint_every == 0:
            save()
        if step == args.stop_at_step:
            halt.requested = True
    save()
    dist.barrier()  # as on a halt: no rank tears down while another still writes
    report(env.rank, event="done", step=step, samples_seen=seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
