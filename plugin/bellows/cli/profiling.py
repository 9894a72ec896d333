"""``bellows profile`` and ``bellows calibrate``: measure a job's step time, a cluster's Allreduce.

Both write the JSON documents of :mod:`bellows.scaling.documents`; ``profile`` can also wrap
its result in a ConfigMap that a job's ``bellows.io/profile-configmap`` annotation names.
The profiling code (NumPy, torch) is imported when a command runs, not at ``--help``.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from bellows.cli.choices import MAX_CLASSES, MAX_OVERLAP
from bellows.cli.params import (
    MAX_ITERATIONS,
    BoundedInt,
    FiniteFloat,
    IntList,
    JsonText,
    Name,
    OutputFile,
    output_errors,
)
from bellows.jobs import MAX_GPUS, MAX_LOCAL_BATCH, MAX_PROFILE_POINTS, SpecError, TypeSection

__all__ = ["COMMANDS", "calibrate", "profile"]

PROFILE_KEY = "profile.json"  # the key bellows.io/profile-configmap reads by default


MAX_PROCESSES = 1_024  # Allreduce ranks on one node
MAX_BUFFER = 1 << 30  # float32 values in one Allreduce buffer (4 GiB)
MAX_THREADS = 1_024
MAX_MODEL_KWARGS = 64 * 1024  # bytes of --model-kwargs JSON
_GPU_TYPE = Name(
    r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
    "a GPU type name (lowercase letters, digits and '-', at most 63, as a label value)",
)
_CONFIGMAP = Name(
    r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?",
    "a Kubernetes object name (lowercase letters, digits, '-' and '.', at most 253)",
)


def _write(output: Path | str, text: str) -> None:
    if output == "-":
        sys.stdout.write(text)
    else:
        with output_errors(output):
            Path(output).write_text(text, "utf-8")


def _default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@click.command()
@click.option(
    "--model",
    "model_ref",
    required=True,
    help="Factory of the nn.Module: 'package.module:name' or 'file.py:name'.",
)
@click.option(
    "--model-kwargs",
    default="{}",
    show_default=True,
    type=JsonText(max_bytes=MAX_MODEL_KWARGS, mapping=True),
    help="JSON object of keyword arguments for the factory.",
)
@click.option("--input-shape", required=True, help="Shape of one sample, e.g. 3,224,224.")
@click.option(
    "--classes",
    type=BoundedInt(2, MAX_CLASSES),
    help="Cross-entropy over this many classes (else MSE).",
)
@click.option(
    "--vocab", type=BoundedInt(1, MAX_CLASSES), help="Inputs are token ids below this (e.g. 30522)."
)
@click.option("--optimizer", type=click.Choice(["sgd", "adam"]), default="sgd", show_default=True)
@click.option(
    "--batches",
    type=IntList(1, MAX_LOCAL_BATCH, max_items=MAX_PROFILE_POINTS),
    required=True,
    help="Per-GPU batch sizes to time, e.g. 8,16,32,64.",
)
@click.option(
    "--iterations",
    type=BoundedInt(1, MAX_ITERATIONS),
    default=10,
    show_default=True,
    help="Timed iterations per batch size (the median is kept).",
)
@click.option(
    "--warmup",
    type=BoundedInt(0, MAX_ITERATIONS),
    default=3,
    show_default=True,
    help="Untimed iterations first (allocator, autotuning, caches).",
)
@click.option("--device", help="torch device; default: cuda if present, else cpu.")
@click.option(
    "--threads",
    type=BoundedInt(1, MAX_THREADS),
    help="CPU threads torch may use (steadier CPU timings).",
)
@click.option(
    "--output",
    "-o",
    type=OutputFile(dash=True),
    default="profile.json",
    show_default=True,
    help="Where to write; '-' for standard output.",
)
@click.option(
    "--configmap",
    type=_CONFIGMAP,
    help="Write a ConfigMap of this name holding the profile instead.",
)
@click.option("--source", help="Provenance text stored in the profile (default: what ran).")
@click.option(
    "--gpu-type",
    type=_GPU_TYPE,
    help="The GPU type this runs on (issue 39): the measurement becomes the profile's section "
    "for that type (types.<name>), the largest batch that fit its memory limit there.",
)
@click.option(
    "--add-to",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --gpu-type: a profile file to add the type's section to (its other sections "
    "and its default section are kept; one for this type is replaced).",
)
@click.option(
    "--noise-draws",
    type=BoundedInt(0, MAX_ITERATIONS),
    default=8,
    show_default=True,
    help="Gradients drawn at the smallest and the largest batch that fit, for the "
    "profile's efficiency section (the gradient noise scale); 0: no section.",
)
def profile(
    *,
    model_ref: str,
    model_kwargs: dict[str, Any],
    input_shape: str,
    classes: int | None,
    vocab: int | None,
    optimizer: str,
    batches: list[int],
    iterations: int,
    warmup: int,
    device: str | None,
    threads: int | None,
    output: Path | str,
    configmap: str | None,
    source: str | None,
    gpu_type: str | None,
    add_to: Path | None,
    noise_draws: int,
) -> None:
    """Time one training iteration of a model at several per-GPU batch sizes.

    Writes the JobProfile the JSA reads (t_proc(m) for each batch that fit, and the weight
    count). The first batch that runs out of device memory ends the sweep; the largest that
    fit is the job's bellows.io/max-batch-per-gpu.
    """
    import torch
    import yaml

    from bellows.cli.progress import steps
    from bellows.profiling import (
        SyntheticBatch,
        TorchWorkload,
        load_object,
        parse_shape,
        profile_job,
    )
    from bellows.scaling import job_profile_to_json, load_job_profile

    if add_to is not None and gpu_type is None:
        raise click.UsageError("--add-to needs --gpu-type: the type whose section to add")
    try:
        base = None if add_to is None else load_job_profile(add_to)
    except SpecError as error:
        raise click.UsageError(str(error)) from None
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        workload = TorchWorkload(
            load_object(model_ref),
            SyntheticBatch(parse_shape(input_shape), classes=classes, vocab=vocab),
            device=device or _default_device(),
            optimizer=optimizer,
            factory_kwargs=model_kwargs,
        )
        with steps(f"profiling {model_ref}") as show:

            def make_step(batch: int) -> Any:
                where = f"local batch {batch} ({batches.index(batch) + 1} of {len(batches)})"
                show(f"profiling {model_ref}: {where}")
                return workload.make_step(batch)

            run = profile_job(
                make_step,
                batches,
                weights=workload.weights,
                iterations=iterations,
                warmup=warmup,
                clock=time.perf_counter,
                synchronize=workload.synchronize,
                is_out_of_memory=workload.is_out_of_memory,
                release=workload.release,
                source=source
                or f"bellows profile: {model_ref} = {workload.describe()}, median of {iterations}",
            )
    except SpecError as error:
        raise click.UsageError(str(error)) from None
    measured = _with_noise(workload, run, noise_draws)
    if gpu_type is not None:
        measured = _typed(measured, gpu_type, base)
    document = job_profile_to_json(measured)
    if configmap:
        text = yaml.safe_dump(_config_map(configmap, document), sort_keys=False)
    else:
        text = json.dumps(document, indent=2) + "\n"
    _write(output, text)
    click.echo(f"{workload.describe()}", err=True)
    click.echo(f"{'local batch':>12} {'seconds':>12} {'spread':>8} {'samples/s':>12}", err=True)
    for m, timing in run.timings:
        rate = m / timing.median if timing.median > 0 else float("inf")
        line = f"{m:>12} {timing.median:>12.6f} {timing.spread:>8.1%} {rate:>12.1f}"
        click.echo(line, err=True)
    if run.out_of_memory_at is not None:
        click.echo(
            f"batch {run.out_of_memory_at} ran out of device memory: annotate the job with "
            f'bellows.io/max-batch-per-gpu: "{run.largest_batch}"',
            err=True,
        )
    if output != "-":
        click.echo(f"wrote {output}", err=True)


def _typed(measured: Any, gpu_type: str, base: Any) -> Any:
    """``measured`` as the section of ``gpu_type`` of ``base`` (``None``: of itself)."""
    section = TypeSection(gpu_type, measured.step, measured.effective_weights,
                          measured.step.local_batches[-1])  # fmt: skip
    into = measured if base is None else base
    kept = tuple(t for t in into.types if t.gpu_type != gpu_type)
    return dataclasses.replace(into, types=(*kept, section))


def _with_noise(workload: Any, run: Any, draws: int) -> Any:
    """``run``'s profile with the efficiency section its gradient noise says
    (:mod:`bellows.profiling.noise`), measured at the smallest and the largest batch that
    fit; the profile alone (and why, on standard error) when it cannot be said."""
    import dataclasses

    from bellows.profiling.noise import efficiency_prior, gradient_noise

    batches = [m for m, _ in run.timings]
    if draws == 0:
        return run.profile
    if len(batches) < 2:
        click.echo("no efficiency section: the noise needs two batches that fit", err=True)
        return run.profile
    small, large = batches[0], batches[-1]
    try:
        noise = gradient_noise(
            [workload.gradient_norm(small) for _ in range(draws)],
            [workload.gradient_norm(large) for _ in range(draws)],
            small,
            large,
        )
    except SpecError as error:
        click.echo(f"no efficiency section: {error}", err=True)
        return run.profile
    what = f"local batches {small} and {large}, synthetic inputs"
    prior = efficiency_prior(noise, small, what)
    click.echo(
        f"gradient noise scale {noise.noise_scale:.4g} samples (|G|^2 {noise.grad_sqr:.4g}, "
        f"tr(Sigma) {noise.grad_var:.4g}; {draws} draws at batches {small} and {large})",
        err=True,
    )
    return dataclasses.replace(run.profile, efficiency=prior)


def _config_map(name: str, document: dict[str, object]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "bellows"}},
        "data": {PROFILE_KEY: json.dumps(document, separators=(",", ":"))},
    }


@click.command()
@click.option(
    "--processes",
    type=IntList(2, MAX_PROCESSES),
    help="Process counts to time, e.g. 2,4,8 (default: 2 up to the GPUs, or up to 4 on CPU).",
)
@click.option(
    "--sizes",
    type=IntList(1, MAX_BUFFER, exponent=True),
    default="1e4,1e5,1e6,1e7",
    show_default=True,
    help="Buffer sizes in float32 values (weights).",
)
@click.option(
    "--backend",
    type=click.Choice(["gloo", "nccl"]),
    help="torch.distributed backend; default: nccl with GPUs, else gloo.",
)
@click.option("--iterations", type=BoundedInt(1, MAX_ITERATIONS), default=10, show_default=True)
@click.option("--warmup", type=BoundedInt(0, MAX_ITERATIONS), default=2, show_default=True)
@click.option(
    "--gpus-per-node",
    type=BoundedInt(1, MAX_GPUS),
    help="GPUs of one node (default: the processes measured here).",
)
@click.option(
    "--inter-node-from",
    type=click.Path(exists=True, dir_okay=False),
    help="Take the inter-node link from this ClusterProfile (else intra-node's).",
)
@click.option(
    "--overlap",
    type=FiniteFloat(1.0, MAX_OVERLAP),
    default=1.0,
    show_default=True,
    help="Compute/communication overlap exponent (1: additive, the paper's model).",
)
@click.option(
    "--output",
    "-o",
    type=OutputFile(dash=True),
    default="cluster-profile.json",
    show_default=True,
    help="Where to write; '-' for standard output.",
)
@click.option(
    "--measurements",
    type=OutputFile(),
    help="Also write the raw times here as CSV (processes,weights,seconds).",
)
@click.option(
    "--gpu-type",
    type=_GPU_TYPE,
    help="The GPU type these nodes carry (issue 39): recorded in the profile (gpuType).",
)
def calibrate(
    *,
    processes: list[int] | None,
    sizes: list[int],
    backend: str | None,
    iterations: int,
    warmup: int,
    gpus_per_node: int | None,
    inter_node_from: str | None,
    overlap: float,
    output: Path | str,
    measurements: Path | None,
    gpu_type: str | None,
) -> None:
    """Time Allreduce for several buffer sizes and process counts on this node.

    Fits the ring model t_ar(w, k) = latency*(k-1) + per_weight*w*2(k-1)/k and writes the
    cluster's generic profile. Processes run on this node, so what is measured is the
    intra-node link; the inter-node link comes from --inter-node-from or, failing that,
    is copied from the intra-node one (the profile's source says which).
    """
    import torch

    from bellows.cli.progress import steps
    from bellows.profiling import cluster_profile, fit_link, measure_allreduce
    from bellows.scaling import cluster_profile_to_json, load_cluster_profile

    gpus = torch.cuda.device_count()
    chosen_backend = backend or ("nccl" if gpus > 0 else "gloo")
    counts = (
        processes if processes else list(range(2, (gpus if chosen_backend == "nccl" else 4) + 1))
    )
    try:
        inter = None if inter_node_from is None else load_cluster_profile(inter_node_from)
        counted = ", ".join(map(str, counts))
        with steps(f"timing Allreduce on {counted} processes ({chosen_backend})"):
            samples = measure_allreduce(
                counts,
                sizes,
                backend=chosen_backend,
                iterations=iterations,
                warmup=warmup,
            )
        fit = fit_link(samples)
        where = (
            f"inter-node link from {inter_node_from}"
            if inter
            else ("inter-node link not measured: copied from intra-node")
        )
        result = cluster_profile(
            fit,
            inter=None if inter is None else inter.inter_node,
            gpus_per_node=gpus_per_node or max(counts),
            overlap=overlap,
            source=(
                f"bellows calibrate: {chosen_backend}, processes {','.join(map(str, counts))}, "
                f"median relative error {fit.median_relative_error:.1%}; {where}"
            ),
        )
        if gpu_type is not None:
            result = dataclasses.replace(result, gpu_type=gpu_type)
    except SpecError as error:
        raise click.UsageError(str(error)) from None
    _write(output, json.dumps(cluster_profile_to_json(result), indent=2) + "\n")
    if measurements:
        with output_errors(measurements), measurements.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["processes", "weights", "seconds"])
            writer.writerows((s.processes, s.weights, s.seconds) for s in samples)
    click.echo(f"{'processes':>9} {'weights':>12} {'seconds':>12} {'model':>12}", err=True)
    for s in samples:
        predicted = fit.predict(s.processes, s.weights)
        click.echo(
            f"{s.processes:>9} {s.weights:>12} {s.seconds:>12.6f} {predicted:>12.6f}", err=True
        )
    link = fit.link
    bandwidth = 4.0 / link.per_weight / 1e9 if link.per_weight > 0 else float("inf")
    click.echo(
        f"latency {link.latency * 1e6:.1f} us per ring step, {link.per_weight:.3e} s per weight "
        f"({bandwidth:.2f} GB/s), median error {fit.median_relative_error:.1%}, "
        f"max {fit.max_relative_error:.1%}",
        err=True,
    )
    if output != "-":
        click.echo(f"wrote {output}", err=True)


COMMANDS = (profile, calibrate)
