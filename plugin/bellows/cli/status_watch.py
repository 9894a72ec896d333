"""``bellows status -w``: after the list, the rows again as they change, as ``kubectl get -w``.

One watch per kind asked for (from the resourceVersion of a one-item list, so no old
change is replayed); any change to a job wakes the command, which reads the rows again
(the same lists as the first read: a row needs the job, its Events and its profile
ConfigMap) and prints the rows that differ from what it printed last, in the same format
and without a header. A row's waiting time grows by itself, so it is not a change. A watch
the server ends is opened again; one too old (410) lists again first. Ctrl-C ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import click

from bellows.cli.status import Query, name_of, read_with, table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bellows.kube.kinds import KindAdapter
    from bellows.kube.statuses import JobStatus

__all__ = ["follow"]

SETTLE_S = 0.2  # a burst of changes (a decision writes a job more than once) is one re-read


def _key(row: JobStatus) -> tuple[str, str, str]:
    return row.kind, row.namespace, row.name


def _content(row: JobStatus) -> dict[str, Any]:
    shown = row.as_dict()
    shown.pop("waitedSeconds", None)
    return shown


def _lines(rows: Sequence[JobStatus], output: str | None, *, namespaces: bool) -> list[str]:
    if output == "name":
        return [name_of(r) for r in rows]
    if output == "json":
        import json

        return [json.dumps(r.as_dict()) for r in rows]
    if output == "yaml":
        import yaml

        return ["---\n" + str(yaml.safe_dump(r.as_dict(), sort_keys=False)).rstrip() for r in rows]
    return table(rows, wide=output == "wide", namespaces=namespaces, headers=False)


async def _changes(api: Any, kind: KindAdapter, query: Query, woken: asyncio.Event) -> None:
    """Set ``woken`` on every change to a job of ``kind``, for as long as the command runs."""
    from bellows.kube.errors import ExpiredError, NotFoundError

    while True:
        pages = api.list_job_pages(kind, query.namespace, limit=1, selector=query.selector)
        try:
            _, version = await anext(pages)
        except NotFoundError:  # the kind's CRD is not installed: nothing to watch
            return
        finally:
            await pages.aclose()
        with contextlib.suppress(ExpiredError):
            async for _ in api.watch_jobs(kind, query.namespace, version):
                woken.set()


async def follow(api: Any, query: Query, rows: Sequence[JobStatus], *, output: str | None) -> None:
    """Print the rows that change after ``rows`` (the ones printed), until cancelled."""
    seen = {_key(r): _content(r) for r in rows}
    woken = asyncio.Event()
    watches = [asyncio.create_task(_changes(api, k, query, woken)) for k in query.chosen()]
    try:
        while True:
            await woken.wait()
            await asyncio.sleep(SETTLE_S)
            woken.clear()
            _, now = await read_with(api, query)
            changed = [r for r in now if seen.get(_key(r)) != _content(r)]
            seen = {_key(r): _content(r) for r in now}
            if changed:
                lines = _lines(changed, output, namespaces=query.namespace is None)
                click.echo("\n".join(lines))
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
