#!/usr/bin/env python3
"""Elastic PyTorch DDP training for a Bellows-managed PyTorchJob.

The training operator sets ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
Bellows sets the global batch in ``BELLOWS_GLOBAL_BATCH_SIZE`` (the env var named by the
job's ``bellows.io/batch-size-env`` annotation). On SIGTERM (Bellows suspends the job to
rescale it) every rank stops after the same step, rank 0 checkpoints and all exit with
status 143. When the pods come back, with another world size and batch, the script
resumes from that checkpoint: same step count, same samples seen, same model and
optimizer state, the data stream continuing exactly where it stopped, and the learning
rate rescaled to the new batch. Each step also estimates the gradient noise
(``elastic.GradientNoise``: each replica's local gradient norm, read by a DDP communication
hook before the all-reduce, against the all-reduced one; with one replica, two
micro-batches), prints it and reports it with the progress. Run one process per GPU (or
several on CPU, with gloo)::

    WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
    BELLOWS_GLOBAL_BATCH_SIZE=64 python pytorch_ddp.py --checkpoint-dir /ckpt
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
    ProgressReporter,
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
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel


def local_norm_hook(norms: list[torch.Tensor]) -> Any:
    """A DDP communication hook: records each bucket's squared norm before the all-reduce
    (this replica's local gradient), then all-reduces as DDP does by default."""

    def hook(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        norms.append(bucket.buffer().detach().double().pow(2).sum())
        return default_hooks.allreduce_hook(None, bucket)  # type: ignore[arg-type]

    # DDP checks the hook's annotations as objects (this module's are strings)
    hook.__annotations__ = {
        "state": object,
        "bucket": dist.GradBucket,
        "return": torch.futures.Future[torch.Tensor],
    }
    return hook


def backward(
    ddp: DistributedDataParallel,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    env: ElasticEnv,
    batch: int,
    norms: list[torch.Tensor] | None,
) -> tuple[torch.Tensor, tuple[float, float, float] | None]:
    """The step's loss (summed over this rank's samples) and gradients; with ``norms`` (a
    hook's list) also this step's ``GradientNoise.update`` inputs ``(small, inverse, big)``
    but for the sum over ranks of ``small``, which the caller all-reduces with the loss."""
    # DDP averages gradients over ranks; scaling by world/batch makes that the mean
    # over the global batch whatever each rank's share.
    scale = env.world_size / batch
    if norms is None or batch < max(2, env.world_size):  # every piece needs a sample
        summed = summed_loss(ddp, x, y)
        (summed * scale).backward()
        return summed, None
    params = [p for p in ddp.parameters() if p.requires_grad]
    norms.clear()
    if env.world_size > 1:
        summed = summed_loss(ddp, x, y)
        (summed * scale).backward()
        share = shard_sizes(batch, env.world_size)
        local = float(torch.stack(norms).sum()) / (scale * share[env.rank]) ** 2
        inverse = sum(1.0 / m for m in share) / env.world_size
    else:  # one replica: two micro-batches of one step
        half = max(1, x.shape[0] // 2)
        with ddp.no_sync():
            first = summed_loss(ddp, x[:half], y[:half])
            (first * scale).backward()
        g1 = [p.grad.detach().clone() for p in params if p.grad is not None]
        second = summed_loss(ddp, x[half:], y[half:])
        (second * scale).backward()
        summed = first + second
        rest = x.shape[0] - half
        g2 = [p.grad.detach() - a for p, a in zip(params, g1, strict=True) if p.grad is not None]
        local = squared_norm(g1) / (scale * half) ** 2 + squared_norm(g2) / (scale * rest) ** 2
        local /= 2.0
        inverse = (1.0 / half + 1.0 / rest) / 2.0
    big = squared_norm(p.grad for p in params)
    return summed, (local, inverse, big)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    env = ElasticEnv.from_env(
        batch_env=args.batch_env,
        local_batch_env=args.local_batch_env,
        default_batch=args.default_batch,
    )
    halt = HaltSignal().install()
    # Optional (BELLOWS_PROGRESS_URL): made before the rendezvous so that job.started counts
    # the whole restart; one rank reports for the job.
    reporter = ProgressReporter.from_env() if env.rank == 0 else None
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://{env.master_addr}:{env.master_port}",
        world_size=env.world_size,
        rank=env.rank,
    )
    try:
        return train(args, env, halt, device, reporter)
    finally:
        dist.destroy_process_group()
        if reporter is not None:
            reporter.close()


def measure_noise(
    ddp: DistributedDataParallel, *, off: bool
) -> tuple[GradientNoise | None, list[torch.Tensor] | None]:
    """A :class:`GradientNoise` and the list its communication hook fills (``None``s: off)."""
    if off:
        return None, None
    norms: list[torch.Tensor] = []
    ddp.register_comm_hook(None, local_norm_hook(norms))
    return GradientNoise(), norms


def reduce_loss_and_noise(
    summed: torch.Tensor,
    measured: tuple[float, float, float] | None,
    noise: GradientNoise | None,
    world: int,
    batch: int,
) -> float:
    """The loss summed over every rank; one all-reduce carries it and (gradient noise) the
    ranks' local norms, whose mean then updates ``noise``."""
    local = 0.0 if measured is None else measured[0]
    totals = torch.tensor([float(summed.detach()), local], dtype=torch.float64)
    dist.all_reduce(totals)
    if noise is not None and measured is not None:
        noise.update(float(totals[1]) / world, measured[1], measured[2], batch)
    return float(totals[0])


def train(
    args: argparse.Namespace,
    env: ElasticEnv,
    halt: HaltSignal,
    device: Any,
    reporter: ProgressReporter | None = None,
) -> int:
    data = load_dataset(args.data, args.synthetic_size, args.seed)
    size = int(data["x"].shape[0])
    total = args.total_samples or args.epochs * size
    torch.manual_seed(args.seed)  # same initial weights on every rank (DDP broadcasts too)
    model = build_model(int(data["x"].shape[1])).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.base_lr, momentum=args.momentum)
    checkpointer = Checkpointer(args.checkpoint_dir)
    state = checkpointer.load()
    step, seen = 0, 0
    if state is not None:
        check_resumable(state, seed=args.seed, dataset_size=size)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step, seen = state["step"], state["samples_seen"]
    # The optimizer state keeps its momentum; only the rate follows the new batch.
    lr = scale_lr(args.base_lr, args.base_batch, env.global_batch, args.lr_scaling)
    for group in optimizer.param_groups:
        group["lr"] = lr
    ddp = DistributedDataParallel(
        model, device_ids=None if device.index is None else [device.index]
    )
    noise, norms = measure_noise(ddp, off=args.no_gradient_noise)
    stream = SampleStream(size, args.seed)
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
        batch = min(env.global_batch, total - seen)  # the last step takes what work is left
        lo, hi = shard_bounds(batch, env.world_size, env.rank)
        positions = (seen + lo, seen + hi)
        index = torch.tensor(stream.indices(seen + lo, hi - lo), dtype=torch.long)
        x, y = data["x"][index].to(device), data["y"][index].to(device)
        optimizer.zero_grad(set_to_none=True)
        summed, measured = backward(ddp, x, y, env=env, batch=batch, norms=norms)
        optimizer.step()
        loss = reduce_loss_and_noise(summed, measured, noise, env.world_size, batch)
        step, seen = step + 1, seen + batch
        if reporter is not None:
            reporter.step(seen, env.world_size, env.global_batch, noise=noise)
        trace_samples(
            args.trace_samples,
            env.rank,
            env.world_size,
            step=step,
            positions=positions,
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
