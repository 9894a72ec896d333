"""What a DELETE the API server accepted did: the object is gone, or it is terminating.

A delete of an object whose ``metadata.finalizers`` is not empty deletes nothing: the server
sets ``metadata.deletionTimestamp``, answers 200 with the object as it now is, and keeps it
until the controllers named by its finalizers remove them (a tenant may add one to its own
objects, or a controller may be slow or gone). Each further DELETE answers the same object
and changes nothing. So "the server said 200" is not "it is gone": a caller that deletes
again until the object is gone loops without end.

:class:`Terminating` is what :class:`bellows.kube.client.KubeApi`'s delete calls return then
(``True`` when the server deleted the object, ``False`` when it was gone or not that one).
It is truthy, so a caller that only asks "was the delete accepted" reads it as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Terminating", "deletion_of"]


@dataclass(frozen=True)
class Terminating:
    """A delete accepted on an object that stays, being deleted, until its finalizers go:
    ``obj`` as the server answered it (``deletionTimestamp`` set)."""

    obj: Mapping[str, Any]

    @property
    def finalizers(self) -> tuple[str, ...]:
        """The finalizers that hold the object (as the server listed them)."""
        names = (self.obj.get("metadata") or {}).get("finalizers") or []
        return tuple(str(name) for name in names if isinstance(name, str))

    @property
    def uid(self) -> str:
        return str((self.obj.get("metadata") or {}).get("uid") or "")

    def __bool__(self) -> bool:
        return True  # the delete was accepted: what a caller that asks only that reads


def deletion_of(answer: object) -> bool | Terminating:
    """What a 2xx answer to a DELETE says: a ``Status`` (or an object no longer marked) is
    the object gone (``True``); an object whose ``metadata.deletionTimestamp`` is set is
    :class:`Terminating`, still there."""
    if not isinstance(answer, Mapping) or answer.get("kind") == "Status":
        return True
    meta = answer.get("metadata")
    if isinstance(meta, Mapping) and meta.get("deletionTimestamp"):
        return Terminating(answer)
    return True
