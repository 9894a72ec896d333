"""The errors of a Kubernetes API call that callers act on, apart from any client library.

:mod:`bellows.kube.client` (the official ``kubernetes`` client, the controller's and
``bellows status``') raises these three in place of the client's ``ApiException``, so that
code reading the cluster (and the fakes tests give it) need not know the client library.
"""

from __future__ import annotations

__all__ = ["ConflictError", "ExpiredError", "NotFoundError"]


class NotFoundError(Exception):
    """The object (or its namespace) does not exist."""


class ConflictError(Exception):
    """The object changed since the ``resourceVersion`` a write was computed from."""


class ExpiredError(Exception):
    """A watch asked for a ``resourceVersion`` the server no longer keeps: list again."""
