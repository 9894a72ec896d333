"""One adapter per Kubeflow job kind (as Kueue's ``jobs/<kind>`` packages)."""

from __future__ import annotations

from bellows.kube.adapters.mpijob import MPIJobKind
from bellows.kube.adapters.pytorchjob import PyTorchJobKind
from bellows.kube.kinds import JobKind

__all__ = ["KINDS", "MPIJobKind", "PyTorchJobKind", "kind_named"]

KINDS: tuple[JobKind, ...] = (PyTorchJobKind(), MPIJobKind())


def kind_named(kind: str) -> JobKind:
    """The adapter of ``kind`` (``PyTorchJob`` or ``MPIJob``)."""
    for adapter in KINDS:
        if adapter.kind == kind:
            return adapter
    raise KeyError(kind)
