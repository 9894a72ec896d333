"""What the parts of one controller share: the API, the job reader and the actuator, the
roster of its jobs beside the core, the reports of the jobs it leaves alone, and its observer.

:class:`~bellows.service.controller.Controller` makes one :class:`Parts` and hands it to
each of its parts (intake, scope, rebuild, settling), which are :class:`Part`\\ s.
"""

from __future__ import annotations

from dataclasses import dataclass

from bellows.kube import Actuator, JobReader, KubeApi
from bellows.service.memory import Memory
from bellows.service.observing import ControllerObserver
from bellows.service.reports import Reports
from bellows.service.roster import Roster

__all__ = ["Part", "Parts"]


@dataclass(frozen=True)
class Parts:
    """One controller's collaborators, shared by its parts."""

    api: KubeApi
    reader: JobReader
    actuator: Actuator
    roster: Roster
    reports: Reports
    observer: ControllerObserver
    memory: Memory | None = None  # what an earlier leader learned (the rebuild recalls it)


class Part:
    """A part of a controller: it works on the shared :class:`Parts`."""

    def __init__(self, parts: Parts) -> None:
        self._api = parts.api
        self._reader = parts.reader
        self._actuator = parts.actuator
        self._roster = parts.roster
        self._auto = parts.roster.core  # the core (an Autoscaler)
        self._reports = parts.reports
        self._observer = parts.observer
        self._memory = parts.memory
