#!/usr/bin/env python3
"""Elastic PyTorch DDP training for a Bellows-managed PyTorchJob.

The training operator sets ``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``;
Bellows sets the global batch in ``BELLOWS_GLOBAL_BATCH_SIZE`` (the env var named by the
job's ``bellows.io/batch-size-env`` annotation). On SIGTERM (Bellows suspends the job to
rescale it) every rank stops after the same step, rank 0 checkpoints and all exit with
status 143. When the pods come back, with another world size and batch, the script
resumes from that checkpoint: same step count, same samples seen, same model and
optimizer state, the data stream continuing exactly where it stopped, and the learning
rate rescaled to the new batch. Run one process per GPU (or several on CPU, with gloo)::

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
    HaltSignal,
    ProgressReporter,
    SampleStream,
    scale_lr,
    shard_bounds,
)
from task import add_arguments, build_model, check_resumable, load_dataset, report, summed_loss
from task import trace as trace_samples
from torch.nn.parallel import DistributedDataParallel


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
        summed = summed_loss(ddp, x, y)
        # DDP averages gradients over ranks; scaling by world/batch makes that the mean
        # over the global batch whatever each rank's share.
        (summed * (env.world_size / batch)).backward()
        optimizer.step()
        total_loss = summed.detach().reshape(1)
        dist.all_reduce(total_loss)
        step, seen = step + 1, seen + batch
        if reporter is not None:
            reporter.step(seen, env.world_size, env.global_batch)
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
            loss=float(total_loss.item()) / batch,
            lr=lr,
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
