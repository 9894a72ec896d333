"""Which job: the kind of a Kubeflow job and the reference that names one.

One :class:`JobKind` and one :class:`JobRef` for every layer that names a Kubernetes job:
the bus's events carry a ref (with the object's uid), the kube adapters read one from each
object, and the controller passes the one it was given on. Pure, no I/O; the layer just
below its users (``bus`` and ``kube``, which never import each other).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from bellows.jobs import SpecError

__all__ = ["JobKind", "JobRef", "job_key"]

# Kubernetes object names (DNS-1123 subdomain) and namespaces (DNS-1123 label) are at most
# 253 and 63 characters; a longer value cannot name a real object.
MAX_NAME = 253
MAX_NAMESPACE = 63

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class JobKind(StrEnum):
    """The Kubeflow resource kinds Bellows manages (the value is the object's ``kind``)."""

    PYTORCHJOB = "PyTorchJob"
    MPIJOB = "MPIJob"
    TRAINJOB = "TrainJob"  # Kubeflow Trainer v2


def require_text(name: str, value: object, *, limit: int) -> str:
    """``value`` as a non-empty string of at most ``limit`` characters without whitespace."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise SpecError(name, value, f"a non-empty string of at most {limit} characters")
    if any(c.isspace() for c in value):
        raise SpecError(name, value, "a string without whitespace")
    return value


def _require_dns(name: str, value: object, pattern: re.Pattern[str], *, limit: int) -> str:
    text = require_text(name, value, limit=limit)
    if not pattern.fullmatch(text):
        kind = "label" if pattern is _DNS_LABEL else "subdomain"
        raise SpecError(name, value, f"a DNS-1123 {kind} (lower-case letters, digits, '-')")
    return text


def job_key(kind: str, namespace: str, name: str) -> str:
    """:attr:`JobRef.key` of the job, from fields not (yet) validated: the name under which
    a job whose metadata is wrong is reported all the same."""
    return f"{kind.lower()}/{namespace}/{name}"


@dataclass(frozen=True, order=True)
class JobRef:
    """Which job: its ``kind``, namespace and name, and, where one object is meant (an
    event's), its ``uid`` (``""``: whichever object has that name now).

    Validated on construction (a kind Bellows manages, a DNS-1123 namespace and name): a
    forged event or a malformed object names no job. :attr:`key`
    (``pytorchjob/<namespace>/<name>``) is the job's name in the autoscaler core: readable
    in logs and decisions, and unique across kinds, which ``<namespace>/<name>`` alone is
    not (a PyTorchJob and an MPIJob may share a name).
    """

    kind: JobKind
    namespace: str
    name: str
    uid: str = ""

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", JobKind(self.kind))
        except ValueError:
            valid = " or ".join(repr(k.value) for k in JobKind)
            raise SpecError("job.kind", self.kind, valid) from None
        _require_dns("job.namespace", self.namespace, _DNS_LABEL, limit=MAX_NAMESPACE)
        _require_dns("job.name", self.name, _DNS_SUBDOMAIN, limit=MAX_NAME)
        if self.uid != "":
            require_text("job.uid", self.uid, limit=MAX_NAME)

    @property
    def key(self) -> str:
        return job_key(self.kind, self.namespace, self.name)

    @property
    def qualified_name(self) -> str:
        """``namespace/name``, the form Kubernetes tools print."""
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, key: str, kinds: Iterable[JobKind] = tuple(JobKind)) -> JobRef:
        """The ref of ``key`` (:attr:`key`'s form) whose kind is one of ``kinds``."""
        by_token = {kind.lower(): kind for kind in kinds}
        parts = key.split("/")
        if len(parts) != 3 or parts[0] not in by_token or not parts[1] or not parts[2]:
            valid = f"'<kind>/<namespace>/<name>' with kind in {sorted(by_token)}"
            raise SpecError("job", key, valid)
        return cls(by_token[parts[0]], parts[1], parts[2])
