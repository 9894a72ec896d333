"""``bellows status`` (and ``kubectl bellows status``): what Bellows decided for each job, and why.

Read-only, against the cluster of a kubeconfig context as ``kubectl`` is: one row per
opted-in job from the jobs' ``bellows.io/`` journal and Bellows' Events
(:mod:`bellows.kube.statuses`), a cluster line first. ``-o wide|json|yaml`` as kubectl.
Only the Kubernetes client and the JSA are imported, when the command runs.

Most of what a row shows a tenant can write (its job's annotations, Events in its
namespace), so every cell of the table goes through :func:`printable`: control characters
(C0 with CR, LF and TAB, DEL, C1, hence ESC and BEL), Unicode format characters (the bidi
overrides and isolates, zero-width ones) and separators shown as visible escapes, and cut at
:data:`CELL_LIMIT` characters with an ellipsis, so that no text moves the cursor, recolours
the terminal, or starts a row of its own. ``-o json`` and ``-o yaml`` are escaped by their
encoders (every non-ASCII character too) and not cut.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bellows.cli.params import ClusterFile, kube_options

if TYPE_CHECKING:
    from bellows.kube.statuses import ClusterLine, JobStatus
    from bellows.scaling import ClusterProfile

__all__ = ["CELL_LIMIT", "human_duration", "kubectl_bellows", "printable", "status", "table"]

STATES = ("waiting", "running", "halted", "finished", "invalid", "skipped")
CELL_LIMIT = 200  # the most characters of one cell of the table, its ellipsis included
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def _escaped(char: str) -> str:
    if char.isprintable() and char != "\\":
        return char
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return (
        f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
        if code < 0x10000
        else f"\\U{code:08x}"
    )


def printable(text: str, limit: int = CELL_LIMIT) -> str:
    """``text`` safe to print in one cell of a terminal's line: each character Python does
    not call printable (the categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but the space: C0
    with ``\\n``, ``\\r``, ``\\t``, DEL, C1, the bidi controls U+202A-U+202E and
    U+2066-U+2069) and the backslash itself written as a visible escape (``\\x1b``,
    ``\\n``, ``\\u202e``, ``\\\\``), then at most ``limit`` characters, the last an
    ellipsis when cut. Only the first ``limit`` characters are ever read: a 256 KiB
    annotation costs what 200 characters do."""
    head = text[:limit]
    if not head.isprintable() or "\\" in head:
        head = "".join(map(_escaped, head))
    if len(head) > limit or len(text) > limit:
        return head[: limit - 1] + "\u2026"
    return head


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


def _row(job: JobStatus, *, wide: bool, namespaces: bool, typed: bool = False) -> list[str]:
    name = job.job if namespaces else job.name
    cells = [
        job.kind,
        name,
        str(job.state),
        str(job.gpus),
        *([job.gpu_type or "-"] if typed else []),
        _optional(job.target),
        _optional(job.batch),
        _speed(job.predicted),
        _speed(job.learned),
        str(job.restarts),
        human_duration(job.waited_s),
    ]
    if wide:
        cells += [job.queue or "-", job.phase or "-", job.event or "-"]
    cells.append(job.reason)
    whole = "".join(cells)  # one check per row: an honest row is printed as it is
    if whole.isprintable() and "\\" not in whole and max(map(len, cells)) <= CELL_LIMIT:
        return cells
    return [printable(cell) for cell in cells]


def table(
    jobs: Sequence[JobStatus], *, wide: bool = False, namespaces: bool = True, headers: bool = True
) -> list[str]:
    """The rows as kubectl prints a table: columns padded by three spaces, the last free."""
    typed = any(job.gpu_type for job in jobs)  # a cluster of several GPU types: TYPE
    head = ["KIND", "NAMESPACE/NAME" if namespaces else "NAME", "STATE", "GPUS"]
    head += ["TYPE"] if typed else []
    head += ["TARGET", "BATCH", "PREDICTED", "LEARNED", "RESTARTS", "WAITED"]
    if wide:
        head += ["QUEUE", "PHASE", "EVENT"]
    head.append("REASON")
    rows = [_row(job, wide=wide, namespaces=namespaces, typed=typed) for job in jobs]
    if headers:
        rows.insert(0, head)
    if not rows:
        return []
    columns = list(zip(*rows, strict=True))
    widths = [max(map(len, column)) for column in columns[:-1]]
    # one format per table, not one ljust per cell: 10 000 rows of 11 cells
    line = "   ".join(f"{{:<{w}}}" for w in widths) + "   {}"
    return [line.format(*r) for r in rows]


def cluster_text(line: ClusterLine) -> str:
    capacity = ("?" if line.capacity is None else str(line.capacity)) + " GPUs"
    if line.by_type:  # nodes of several GPU types: each type's, untyped ones as "other"
        kinds = ", ".join(f"{t or 'other'} {g}" for t, g in line.by_type.items())
        capacity = f"{capacity} ({kinds})"
    states = ", ".join(f"{n} {s}" for s, n in line.states.items() if n or s in STATES[:3])
    return f"cluster: {capacity}, {line.in_use} in use, mode {line.mode}; jobs: {states}"


def _namespace_of_context(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace of the kubeconfig context (``default`` when it names none), as kubectl."""
    from bellows.kube.kubeconfig import KubeconfigError, UnknownContextError, context_namespace

    try:
        return context_namespace(kubeconfig, context)
    except UnknownContextError as err:
        raise click.BadParameter(str(err), param_hint="--context") from None
    except KubeconfigError as err:
        raise click.ClickException(f"cannot read the jobs: {err}") from None


GPU_TYPE_LABEL = "nvidia.com/gpu.product"  # the controller's default gpuTypeLabel


async def _capacity(api: Any) -> tuple[int | None, dict[str, int]]:
    """The GPUs of the ready, schedulable nodes (``None``: the nodes cannot be read), and
    the same per GPU type where some node carries :data:`GPU_TYPE_LABEL` (its value)."""
    from bellows.kube.nodes import node_gpus, node_type

    total, by_type = 0, dict[str, int]()
    try:
        async for page, _ in api.list_nodes():
            for node in page:
                try:
                    gpus = node_gpus(node, "nvidia.com/gpu")
                except ValueError:
                    continue
                total += gpus
                kind = node_type(node, GPU_TYPE_LABEL, {})
                by_type[kind] = by_type.get(kind, 0) + gpus
    except Exception:  # forbidden (a user without nodes/list), or no API: shown as "?"
        return None, {}
    return total, dict(sorted(by_type.items())) if set(by_type) - {""} else {}


async def _mode(api: Any, lease: tuple[str, str]) -> str:
    """The controller's mode from its Lease (``unknown`` when it cannot be read)."""
    from datetime import UTC, datetime

    from bellows.kube.statuses import controller_mode

    try:
        found = await api.get_lease(*lease)
    except Exception:  # forbidden (no get on the Lease), or no API: not known
        found = None
    return controller_mode(found, now=datetime.now(UTC))


@contextlib.contextmanager
def _reads(kubeconfig: Path | None, context: str | None) -> Iterator[Any]:
    """The cluster's reads through the official client, as the controller makes them (its
    kubeconfig loader, credentials and TLS: :mod:`bellows.kube.kubeconfig`)."""
    from bellows.kube.client import KubeApi, client_from_config

    client = client_from_config(kubeconfig, context)
    try:
        yield KubeApi(client)
    finally:
        client.close()


@dataclass(frozen=True)
class Query:
    """What one ``bellows status`` asks the cluster (and ``-w`` asks again)."""

    kubeconfig: Path | None
    context: str | None
    namespace: str | None  # None: every namespace
    kinds: tuple[str, ...]
    events: bool
    cluster: ClusterProfile
    lease: tuple[str, str]
    selector: str | None = None
    states: tuple[str, ...] = ()

    def chosen(self) -> list[Any]:
        from bellows.kube.adapters import ALL_KINDS as KINDS

        return [k for k in KINDS if not self.kinds or k.kind.lower() in self.kinds]


async def read_with(api: Any, query: Query) -> tuple[ClusterLine, list[JobStatus]]:
    """The cluster line and the rows (of ``query.states``, sorted) through ``api``."""
    import asyncio
    from datetime import UTC, datetime

    from bellows.kube.statuses import cluster_line, read_status

    capacity_task = asyncio.create_task(_capacity(api))
    mode_task = asyncio.create_task(_mode(api, query.lease))
    try:
        rows = await read_status(
            api,
            now=datetime.now(UTC),
            cluster=query.cluster,
            namespace=query.namespace,
            kinds=query.chosen(),
            events=query.events,
            selector=query.selector,
            strict=bool(query.kinds),
        )
    except BaseException:
        capacity_task.cancel()
        mode_task.cancel()
        raise
    capacity, by_type = await capacity_task
    line = cluster_line(capacity, rows, await mode_task, by_type)
    if query.states:
        rows = [r for r in rows if str(r.state) in query.states]
    rows.sort(key=lambda r: (r.kind, r.namespace, r.name))
    return line, rows


def _kind_names() -> list[str]:
    from bellows.kube.adapters import ALL_KINDS as KINDS

    return sorted(k.kind.lower() for k in KINDS)


DEFAULT_LEASE = "bellows-system/bellows-controller"  # the chart's leaderElection defaults


class _LeaseName(click.ParamType):  # type: ignore[type-arg]
    """``NAMESPACE/NAME`` of a Lease, both DNS-1123 labels."""

    name = "namespace/name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import re

        if isinstance(value, tuple):
            return value
        namespace, _, name = str(value).partition("/")
        label = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
        if not (
            label.fullmatch(namespace)
            and re.fullmatch(r"[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?", name)
        ):
            self.fail(
                f"{value!r} is invalid: expected NAMESPACE/NAME, each lowercase letters, digits "
                "and '-' (the name also '.')",
                param,
                ctx,
            )
        return namespace, name


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
    "-l",
    "--selector",
    default=None,
    help="Only jobs matching this label selector, as kubectl's (-l team=ml,tier!=dev).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["wide", "json", "yaml", "name"]),
    default=None,
    help="Format (name: kind.group/name per line, as kubectl).",
)
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="After the list, watch the jobs and print each row again when it changes (Ctrl-C "
    "ends it).",
)
@click.option("--no-headers", is_flag=True, help="No header row (and no cluster line).")
@click.option(
    "--events/--no-events",
    default=True,
    help="Read Bellows' Events too (one list), for the jobs its journal says nothing of yet.",
)
@click.option(
    "--controller-lease",
    "lease",
    type=_LeaseName(),
    default=DEFAULT_LEASE,
    show_default=True,
    help="The controller's leader-election Lease (NAMESPACE/NAME): its bellows.io/mode is the "
    "mode on the cluster line (unknown when no controller holds it).",
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
    selector: str | None,
    output: str | None,
    watch: bool,
    no_headers: bool,
    events: bool,
    lease: tuple[str, str],
    cluster: ClusterProfile | None,
) -> None:
    """Show what Bellows decided for each opted-in job, and why.

    One row per job: kind, name, state (waiting, running, halted, finished, invalid,
    skipped), GPUs now and the last decision's target, batch now, predicted and learned
    samples/s at that allocation, restarts, how long it waited to start, and the reason of
    the last decision; first a line on the cluster (GPUs of the ready nodes, in use, jobs
    per state, and the controller's mode). Read-only: the jobs' bellows.io/ annotations and
    Bellows' Events, one list per kind.
    """
    import asyncio

    from bellows.scaling import default_cluster

    if all_namespaces and namespace is not None:
        raise click.UsageError("give -n/--namespace or -A/--all-namespaces, not both")
    where = None if all_namespaces else namespace or _namespace_of_context(kubeconfig, context)
    query = Query(
        kubeconfig=kubeconfig,
        context=context,
        namespace=where,
        kinds=kinds,
        events=events,
        cluster=cluster or default_cluster(),
        lease=lease,
        selector=selector,
        states=states,
    )

    async def run() -> None:
        with _reads(kubeconfig, context) as api:
            line, rows = await read_with(api, query)
            text = shown(line, rows, output=output, no_headers=no_headers, where=where)
            if text:  # nothing to show (-o name or --no-headers of no jobs): no line at all
                click.echo(text)
            if watch:
                from bellows.cli.status_watch import follow

                await follow(api, query, rows, output=output)

    try:
        asyncio.run(run())
    except KeyboardInterrupt:  # the end of -w/--watch, as kubectl's
        return
    except Exception as err:  # no API server, forbidden, a bad kubeconfig: one line
        from bellows.kube.client import described
        from bellows.kube.statuses import CrdMissingError

        # a kubeconfig's trouble in the words _namespace_of_context gives it, -A or not
        said = str(err) if isinstance(err, CrdMissingError) else described(err)
        raise click.ClickException(f"cannot read the jobs: {said}") from None


def name_of(row: JobStatus) -> str:
    """``-o name``: ``kind.group/name``, as kubectl prints a resource's name."""
    from bellows.kube.adapters import ALL_KINDS as KINDS

    group = next((k.group for k in KINDS if k.kind == row.kind), "")
    return f"{row.kind.lower()}.{group}/{row.name}" if group else f"{row.kind.lower()}/{row.name}"


def shown(
    line: ClusterLine,
    rows: Sequence[JobStatus],
    *,
    output: str | None,
    no_headers: bool,
    where: str | None,
) -> str:
    """The command's output for ``rows``, as one text (one write: 10 000 rows are one page)."""
    if output == "name":
        return "\n".join(name_of(r) for r in rows)
    if output in ("json", "yaml"):
        document = {"cluster": line.as_dict(), "items": [r.as_dict() for r in rows]}
        if output == "json":
            import json

            return json.dumps(document, indent=2)
        import yaml

        return str(yaml.safe_dump(document, sort_keys=False)).rstrip("\n")
    lines = [] if no_headers else [cluster_text(line)]
    if not rows and not no_headers:
        scope = "any namespace" if where is None else f"namespace {where}"
        lines.append(f"No opted-in jobs found in {scope}.")
    else:
        lines += table(
            rows, wide=output == "wide", namespaces=where is None, headers=not no_headers
        )
    return "\n".join(lines)


def kubectl_bellows() -> None:
    """``kubectl-bellows``: the kubectl plugin (``kubectl bellows status``), the same commands."""
    from bellows.cli.main import main

    main(prog_name="kubectl bellows")
