"""Injected API failures: chosen requests answered with 409, 429, 500, 503 or 504, n times.

Fault tests add :class:`FaultRule` s to the cluster's :class:`Faults`; the server asks
:meth:`Faults.take` before serving each request and answers the first matching rule that
still has failures left with the ``Status`` body the real API server sends for that code.
A rule fails the request before it touches the store, or — ``after_commit`` — after the
write landed, as an API server whose etcd write succeeded but whose answer was lost does:
the client sees an error for a change that did happen (the ambiguous failure that
idempotent retries must survive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bellows.emulator.errors import ApiError
from bellows.jobs import SpecError

__all__ = ["FaultRule", "Faults", "Injected"]

_REASONS: dict[int, tuple[str, str]] = {
    409: (
        "Conflict",
        "Operation cannot be fulfilled: the object has been modified; please apply your "
        "changes to the latest version and try again (injected)",
    ),
    429: ("TooManyRequests", "the server has received too many requests (injected)"),
    500: ("InternalError", "Internal error occurred: etcdserver: request timed out (injected)"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request (injected)"),
    504: ("Timeout", "the server was unable to return a response in the time allotted (injected)"),
}
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "*"})
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class FaultRule:
    """Fail the next ``count`` requests whose method is ``method`` (``*``: any) and whose
    URL path matches the regular expression ``path`` (searched, not anchored)."""

    method: str
    path: str
    status: int
    count: int = 1
    after_commit: bool = False
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise SpecError("method", self.method, f"one of {sorted(_METHODS)}")
        try:
            pattern = re.compile(self.path)
        except re.error as err:
            raise SpecError("path", self.path, f"a regular expression ({err})") from None
        object.__setattr__(self, "_pattern", pattern)
        if self.status not in _REASONS:
            raise SpecError("status", self.status, f"one of {sorted(_REASONS)}")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise SpecError("count", self.count, "an integer >= 1")
        if self.after_commit and self.method not in _WRITES:
            valid = f"False unless method is one of {sorted(_WRITES)}"
            raise SpecError("after_commit", self.after_commit, valid)

    def matches(self, method: str, path: str) -> bool:
        return self.method in ("*", method) and self._pattern.search(path) is not None

    def error(self) -> ApiError:
        """The error the server answers with."""
        reason, message = _REASONS[self.status]
        return ApiError(self.status, reason, message)


@dataclass(frozen=True)
class Injected:
    """One request that was failed on purpose."""

    method: str
    path: str
    status: int
    after_commit: bool


class Faults:
    """The rules in force and a record of every failure injected (in order)."""

    def __init__(self) -> None:
        self._rules: list[tuple[FaultRule, list[int]]] = []  # rule, [failures left]
        self.injected: list[Injected] = []

    def add(self, rule: FaultRule) -> FaultRule:
        self._rules.append((rule, [rule.count]))
        return rule

    def inject(
        self, method: str, path: str, status: int, *, count: int = 1, after_commit: bool = False
    ) -> FaultRule:
        """Add ``FaultRule(method, path, status, count, after_commit)``."""
        return self.add(FaultRule(method, path, status, count, after_commit))

    def clear(self) -> None:
        """Drop every rule (the record of injected failures stays)."""
        self._rules.clear()

    @property
    def pending(self) -> int:
        """Failures still to inject, over all rules."""
        return sum(left[0] for _, left in self._rules)

    def take(self, method: str, path: str) -> FaultRule | None:
        """The rule that fails this request (its count is spent by one), or ``None``."""
        for rule, left in self._rules:
            if left[0] > 0 and rule.matches(method, path):
                left[0] -= 1
                self.injected.append(Injected(method, path, rule.status, rule.after_commit))
                return rule
        return None
