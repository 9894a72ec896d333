"""Kubernetes Events about the jobs Bellows acts on (or refuses), as ``kubectl describe`` shows.

Events are best effort, as everywhere in Kubernetes: a failure to record one is logged and
never stops an actuation. The lasting record is the ``bellows.io/status`` annotation the
actuator writes with each step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from bellows.kube.client import KubeApi
from bellows.kube.keys import COMPONENT

__all__ = ["COMPONENT", "Recorder"]

_log = structlog.get_logger(__name__)


class Recorder:
    """Creates core/v1 Events whose ``involvedObject`` is a job."""

    def __init__(
        self,
        api: KubeApi,
        *,
        instance: str = "",
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._api = api
        self._instance = instance
        self._now = now

    async def record(
        self, obj: Mapping[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        meta = obj["metadata"]
        stamp = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": obj["apiVersion"],
                "kind": obj["kind"],
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self._instance,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            await self._api.create_event(meta["namespace"], event)
        except Exception as err:
            _log.warning("event not recorded", job=meta["name"], reason=reason, error=str(err))
