"""``bellows status`` (and ``kubectl bellows status``): what Bellows decided for each job, and why.

Read-only, against the cluster of a kubeconfig context as ``kubectl`` is: one row per
opted-in job from the jobs' ``bellows.io/`` journal and Bellows' Events
(:mod:`bellows.kube.statuses`), a cluster line first. ``-o wide|json|yaml`` as kubectl.
Only the Kubernetes client and the JSA are imported, when the command runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bellows.cli.params import ClusterFile, kube_options

if TYPE_CHECKING:
    from bellows.kube.statuses import ClusterLine, JobStatus
    from bellows.scaling import ClusterProfile

__all__ = ["human_duration", "kubectl_bellows", "status", "table"]

STATES = ("waiting", "running", "halted", "finished", "invalid", "skipped")


def human_duration(seconds: float | None) -> str:
    """As kubectl prints ages: ``45s``, ``3m12s``, ``15m``, ``3h12m``, ``2d3h``, ``400d``."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def _speed(value: float | None) -> str:
    if value is None:
        return "-"
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def _optional(value: int | None) -> str:
    return "-" if value is None else str(value)


def _row(job: JobStatus, *, wide: bool, namespaces: bool) -> list[str]:
    name = job.job if namespaces else job.name
    cells = [
        job.kind,
        name,
        str(job.state),
        str(job.gpus),
        _optional(job.target),
        _optional(job.batch),
        _speed(job.predicted),
        _speed(job.learned),
        str(job.restarts),
        human_duration(job.waited_s),
    ]
    if wide:
        cells += [job.queue or "-", job.phase or "-", job.event or "-"]
    return [*cells, job.reason]


def table(
    jobs: Sequence[JobStatus], *, wide: bool = False, namespaces: bool = True, headers: bool = True
) -> list[str]:
    """The rows as kubectl prints a table: columns padded by three spaces, the last free."""
    head = ["KIND", "NAMESPACE/NAME" if namespaces else "NAME", "STATE", "GPUS", "TARGET"]
    head += ["BATCH", "PREDICTED", "LEARNED", "RESTARTS", "WAITED"]
    if wide:
        head += ["QUEUE", "PHASE", "EVENT"]
    head.append("REASON")
    rows = [_row(job, wide=wide, namespaces=namespaces) for job in jobs]
    if headers:
        rows.insert(0, head)
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return [
        "   ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + "   " + r[-1]
        for r in rows
    ]


def cluster_text(line: ClusterLine) -> str:
    capacity = "?" if line.capacity is None else str(line.capacity)
    states = ", ".join(f"{n} {s}" for s, n in line.states.items() if n or s in STATES[:3])
    return f"cluster: {capacity} GPUs, {line.in_use} in use; jobs: {states}"


def _namespace_of_context(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (``default`` when it names none), as kubectl."""
    import os

    from kubernetes import config as k8s_config

    if "KUBERNETES_SERVICE_HOST" in os.environ and kubeconfig is None:
        account = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        return account.read_text().strip() if account.exists() else "default"
    contexts, active = k8s_config.list_kube_config_contexts(
        config_file=str(kubeconfig) if kubeconfig else None
    )
    chosen = active
    if context is not None:
        chosen = next((c for c in contexts if c.get("name") == context), None)
        if chosen is None:
            names = sorted(str(c.get("name")) for c in contexts)
            raise click.BadParameter(
                f"{context!r} is not a context of {names}", param_hint="--context"
            )
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


async def _capacity(api: Any) -> int | None:
    """The GPUs of the ready, schedulable nodes (``None``: the nodes cannot be read)."""
    from bellows.service.capacity import node_gpus

    total = 0
    try:
        async for page, _ in api.list_nodes():
            for node in page:
                try:
                    total += node_gpus(node, "nvidia.com/gpu")
                except ValueError:
                    continue
    except Exception:  # forbidden (a user without nodes/list), or no API: shown as "?"
        return None
    return total


def _read(
    *,
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
    kinds: tuple[str, ...],
    events: bool,
    cluster: ClusterProfile,
) -> tuple[ClusterLine, list[JobStatus]]:
    import asyncio
    from datetime import UTC, datetime

    from bellows.kube.adapters import ALL_KINDS as KINDS
    from bellows.kube.client import KubeApi, client_from_config
    from bellows.kube.statuses import cluster_line, read_status

    chosen = [k for k in KINDS if not kinds or k.kind.lower() in kinds]

    async def read() -> tuple[ClusterLine, list[JobStatus]]:
        client = client_from_config(str(kubeconfig) if kubeconfig else None, context)
        try:
            api = KubeApi(client)
            capacity_task = asyncio.create_task(_capacity(api))
            rows = await read_status(
                api,
                now=datetime.now(UTC),
                cluster=cluster,
                namespace=namespace,
                kinds=chosen,
                events=events,
            )
            return cluster_line(await capacity_task, rows), rows
        finally:
            client.close()

    return asyncio.run(read())


def _kind_names() -> list[str]:
    from bellows.kube.adapters import ALL_KINDS as KINDS

    return sorted(k.kind.lower() for k in KINDS)


class _KindChoice(click.Choice):  # type: ignore[type-arg]
    """The kinds of the registry (bellows.kube.adapters.ALL_KINDS), read when first used."""

    def __init__(self) -> None:
        super().__init__([], case_sensitive=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        self.choices = tuple(_kind_names())
        return super().convert(str(value).lower(), param, ctx)

    def get_metavar(self, param: click.Parameter, *args: Any, **kwargs: Any) -> str:
        return "KIND"


@click.command("status")
@kube_options
@click.option(
    "-n", "--namespace", default=None, help="Only this namespace (default: the context's)."
)
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace.")
@click.option(
    "--kind", "kinds", multiple=True, type=_KindChoice(), help="Only this job kind (repeatable)."
)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice(STATES),
    help="Only jobs in this state (repeatable).",
)
@click.option(
    "-o", "--output", type=click.Choice(["wide", "json", "yaml"]), default=None, help="Format."
)
@click.option("--no-headers", is_flag=True, help="No header row (and no cluster line).")
@click.option(
    "--events/--no-events",
    default=True,
    help="Read Bellows' Events too (one list), for the jobs its journal says nothing of yet.",
)
@click.option(
    "--cluster",
    type=ClusterFile(),
    default=None,
    help="Cluster profile of the speeds (default: the fitted Pollux T4 cluster).",
)
def status(
    *,
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    kinds: tuple[str, ...],
    states: tuple[str, ...],
    output: str | None,
    no_headers: bool,
    events: bool,
    cluster: ClusterProfile | None,
) -> None:
    """Show what Bellows decided for each opted-in job, and why.

    One row per job: kind, name, state (waiting, running, halted, finished, invalid,
    skipped), GPUs now and the last decision's target, batch now, predicted and learned
    samples/s at that allocation, restarts, how long it waited to start, and the reason of
    the last decision; first a line on the cluster (GPUs of the ready nodes, in use, jobs
    per state). Read-only: the jobs' bellows.io/ annotations and Bellows' Events, one list
    per kind.
    """
    import json

    from bellows.scaling import default_cluster

    if all_namespaces and namespace is not None:
        raise click.UsageError("give -n/--namespace or -A/--all-namespaces, not both")
    where = None if all_namespaces else namespace or _namespace_of_context(kubeconfig, context)
    try:
        line, rows = _read(
            kubeconfig=kubeconfig,
            context=context,
            namespace=where,
            kinds=kinds,
            events=events,
            cluster=cluster or default_cluster(),
        )
    except Exception as err:  # no API server, forbidden, a bad kubeconfig: one line
        from bellows.inputs import brief

        raise click.ClickException(f"cannot read the jobs: {brief(err)}") from None
    if states:
        rows = [r for r in rows if str(r.state) in states]
    rows.sort(key=lambda r: (r.kind, r.namespace, r.name))
    if output in ("json", "yaml"):
        document = {"cluster": line.as_dict(), "items": [r.as_dict() for r in rows]}
        if output == "json":
            click.echo(json.dumps(document, indent=2))
        else:
            import yaml

            click.echo(yaml.safe_dump(document, sort_keys=False), nl=False)
        return
    if not no_headers:
        click.echo(cluster_text(line))
    lines = table(rows, wide=output == "wide", namespaces=where is None, headers=not no_headers)
    if not rows and not no_headers:
        scope = "any namespace" if where is None else f"namespace {where}"
        click.echo(f"No opted-in jobs found in {scope}.")
        return
    for text in lines:
        click.echo(text)


def kubectl_bellows() -> None:
    """``kubectl-bellows``: the kubectl plugin (``kubectl bellows status``), the same commands."""
    from bellows.cli.main import main

    main(prog_name="kubectl bellows")
