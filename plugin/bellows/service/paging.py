"""Listing jobs a page at a time, so that a controller rebuilding its state from 10 000 jobs
never holds them all (raw) at once.

:meth:`bellows.kube.KubeApi.list_jobs` reads a whole collection in one response; at 10 000
jobs that is tens of megabytes of JSON and several times that in Python objects, most of
which the process keeps as heap it cannot return. Here the API server's ``limit`` and
``continue`` hand them over in pages, each dropped once examined.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from kubernetes import client as k8s

from bellows.kube import JobKind, KubeApi

__all__ = ["PAGE", "job_pages"]

PAGE = 500  # jobs per request: about 1.5 MB of JSON


async def job_pages(
    api: KubeApi, kind: JobKind, namespace: str | None, *, limit: int = PAGE
) -> AsyncIterator[list[dict[str, Any]]]:
    """The jobs of ``kind`` in ``namespace`` (``None``: all), ``limit`` per page."""
    custom = k8s.CustomObjectsApi(api.api_client)
    token: str | None = None
    while True:
        options: dict[str, Any] = {"limit": limit}
        if token:
            options["_continue"] = token
        if namespace is None:
            listed = await asyncio.to_thread(
                custom.list_cluster_custom_object, kind.group, kind.version, kind.plural, **options
            )
        else:
            listed = await asyncio.to_thread(
                custom.list_namespaced_custom_object,
                kind.group, kind.version, namespace, kind.plural, **options,
            )  # fmt: skip
        yield list(listed.get("items") or [])
        token = (listed.get("metadata") or {}).get("continue")
        if not token:
            return
