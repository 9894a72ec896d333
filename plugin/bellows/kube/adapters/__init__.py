"""One adapter per Kubeflow job kind (as Kueue's ``jobs/<kind>`` packages)."""

from __future__ import annotations

from bellows.kube.adapters.mpijob import MPIJobKind
from bellows.kube.adapters.pytorchjob import PyTorchJobKind
from bellows.kube.adapters.trainjob import TrainJobKind
from bellows.kube.kinds import KindAdapter

__all__ = [
    "ALL_KINDS",
    "KINDS",
    "TRAINJOB",
    "MPIJobKind",
    "PyTorchJobKind",
    "TrainJobKind",
    "kind_named",
]

KINDS: tuple[KindAdapter, ...] = (PyTorchJobKind(), MPIJobKind())
TRAINJOB = TrainJobKind()
# Every kind an adapter reads. TrainJob is apart from KINDS until the controller's watches
# and rebuild serve it (docs/kube.md, "TrainJob"): a server without the Trainer's CRD
# answers 404 to its list.
ALL_KINDS: tuple[KindAdapter, ...] = (*KINDS, TRAINJOB)


def kind_named(kind: str) -> KindAdapter:
    """The adapter of ``kind`` (``PyTorchJob``, ``MPIJob`` or ``TrainJob``)."""
    for adapter in ALL_KINDS:
        if adapter.kind == kind:
            return adapter
    raise KeyError(kind)
