"""Bellows on Kubernetes: PyTorchJob and MPIJob adapters, the reader and the actuator.

* :class:`JobReader` turns opted-in jobs into validated ``JobSpec`` observations;
* :class:`Actuator` applies the autoscaler's decisions (suspend, patch, resume) with a
  journal on each job, so that an interrupted rescale is finished by whoever comes next;
  a job in a Kueue queue is halted and let in through its Workload instead
  (:mod:`bellows.kube.kueue_journal`; ``kueue=True`` on both, else such jobs are refused).

Only what talks to a real API server lives here; the emulated cluster of the tests and
``bellows demo`` is :mod:`bellows.emulator`, which this package never imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bellows.lazy import lazy_names

if TYPE_CHECKING:
    from bellows.kube.actuating import ActuationError, Actuator, Outcome
    from bellows.kube.adapters import KINDS, MPIJobKind, PyTorchJobKind, kind_named
    from bellows.kube.client import ConflictError, ExpiredError, KubeApi, NotFoundError
    from bellows.kube.kinds import JobView, KindAdapter
    from bellows.kube.reading import (
        Arrived,
        Deleted,
        Finished,
        Invalid,
        JobReader,
        Observation,
        Skipped,
    )
    from bellows.refs import JobKind, JobRef

# each name imported from its module when first used (bellows.lazy)
__getattr__ = lazy_names(
    __name__,
    {
        "ActuationError": "bellows.kube.actuating",
        "Actuator": "bellows.kube.actuating",
        "Outcome": "bellows.kube.actuating",
        "KINDS": "bellows.kube.adapters",
        "MPIJobKind": "bellows.kube.adapters",
        "PyTorchJobKind": "bellows.kube.adapters",
        "kind_named": "bellows.kube.adapters",
        "ConflictError": "bellows.kube.client",
        "ExpiredError": "bellows.kube.client",
        "KubeApi": "bellows.kube.client",
        "NotFoundError": "bellows.kube.client",
        "JobView": "bellows.kube.kinds",
        "KindAdapter": "bellows.kube.kinds",
        "JobKind": "bellows.refs",
        "JobRef": "bellows.refs",
        "Arrived": "bellows.kube.reading",
        "Deleted": "bellows.kube.reading",
        "Finished": "bellows.kube.reading",
        "Invalid": "bellows.kube.reading",
        "JobReader": "bellows.kube.reading",
        "Observation": "bellows.kube.reading",
        "Skipped": "bellows.kube.reading",
    },
)

__all__ = [
    "KINDS",
    "ActuationError",
    "Actuator",
    "Arrived",
    "ConflictError",
    "Deleted",
    "ExpiredError",
    "Finished",
    "Invalid",
    "JobKind",
    "JobReader",
    "JobRef",
    "JobView",
    "KindAdapter",
    "KubeApi",
    "MPIJobKind",
    "NotFoundError",
    "Observation",
    "Outcome",
    "PyTorchJobKind",
    "Skipped",
    "kind_named",
]
