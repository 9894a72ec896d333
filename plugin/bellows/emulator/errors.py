"""Errors the emulated API server answers with, as ``Status`` bodies, and its timestamps."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from bellows.emulator.schemas import FieldProblem

__all__ = ["ApiError", "rfc3339"]


def rfc3339(moment: datetime) -> str:
    """``moment`` as the API server writes timestamps (seconds, UTC, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """A request the server refuses; :meth:`status` is the ``Status`` body it answers with."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: Mapping[str, Any] | None = None,
        causes: Iterable[FieldProblem] = (),
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = dict(details or {})
        self.causes = list(causes)

    def status(self) -> dict[str, Any]:
        details = dict(self.details)
        if self.causes:
            details["causes"] = [
                {"reason": c.reason, "message": c.message(), "field": c.field} for c in self.causes
            ]
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        }
