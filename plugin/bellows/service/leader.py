"""Leader election over a ``coordination.k8s.io/v1`` Lease: one active replica per component.

Follows client-go's ``leaderelection`` package. Every candidate reads the Lease each
``retry_period_s``; a candidate takes it when nobody holds it (``holderIdentity`` empty:
released) or when its record has not changed for the lease duration, and writes it with the
``resourceVersion`` it read, so of two candidates racing only one write lands (the other gets
409 Conflict). The holder renews ``renewTime`` every ``retry_period_s``; if it cannot renew
for ``renew_deadline_s`` it stops leading. Since ``renew_deadline_s < lease_duration_s``, the
old leader has stopped before any other candidate may take over.

Expiry is judged from when *this* process saw the record change (a monotonic clock), not
from ``renewTime``: the replicas' wall clocks need not agree (client-go does the same). The
cost is that a candidate that first sees a lease waits a whole lease duration before taking
it, even when ``renewTime`` is old. The wall clock only stamps ``acquireTime``/``renewTime``
for people reading the Lease.

The synchronous ``kubernetes`` client is called in a worker thread, each request bounded by
the time left before the renew deadline, so no call outlives the term it belongs to.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import math
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
import urllib3
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.jobs import SpecError
from bellows.service.config import LeaderElectionSettings

__all__ = ["LeaderElector", "LeaseRecord", "default_identity"]

_log = structlog.get_logger("bellows.leader")

Lead = Callable[[asyncio.Event], Awaitable[None]]

# What a failed request may raise: an HTTP error status, or no answer at all.
_REQUEST_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


def default_identity() -> str:
    """``<hostname>_<random>``: the pod name (a pod's hostname) plus a per-process suffix.

    The suffix keeps a restarted container from mistaking its predecessor's lease for its own.
    """
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


async def _await(work: Awaitable[None]) -> None:
    await work


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _micro_time(when: datetime) -> str:
    """A ``MicroTime`` as the API server writes it (RFC 3339, microseconds, UTC)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class LeaseRecord:
    """The election fields of a Lease's ``spec`` (``holder`` is ``""`` when nobody holds it)."""

    holder: str
    duration_s: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int

    @classmethod
    def of(cls, lease: Any) -> LeaseRecord:
        """The record of a ``V1Lease`` (missing fields read as zero/empty)."""
        spec = lease.spec
        if spec is None:
            return cls("", 0, None, None, 0)
        return cls(
            holder=spec.holder_identity or "",
            duration_s=int(spec.lease_duration_seconds or 0),
            acquire_time=spec.acquire_time,
            renew_time=spec.renew_time,
            transitions=int(spec.lease_transitions or 0),
        )

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            out["acquireTime"] = _micro_time(self.acquire_time)
        if self.renew_time is not None:
            out["renewTime"] = _micro_time(self.renew_time)
        return out


class _Outcome(enum.Enum):
    HELD = "held"  # the lease is ours (acquired or renewed)
    TAKEN = "taken"  # another holder's lease is valid, or ours was deleted/handed on
    FAILED = "failed"  # no answer, an error, or a conflicting write: try again


class LeaderElector:
    """Campaigns for one Lease and runs ``lead`` while holding it (see :meth:`run`).

    ``clock`` stamps the Lease's times; ``monotonic`` measures durations (both injectable
    for tests). ``on_change(True)`` is called once leadership is won, ``on_change(False)``
    once the lead task of a term has ended. ``annotations`` are written on the Lease with
    each acquire and renewal (the controller's ``bellows.io/mode``, which ``bellows status``
    reads with the holder: a mode on a Lease nobody renews is no controller's).
    """

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration_s: float,
        renew_deadline_s: float,
        retry_period_s: float,
        stop_grace_s: float = 10.0,
        clock: Callable[[], datetime] = _utcnow,
        monotonic: Callable[[], float] = time.monotonic,
        on_change: Callable[[bool], None] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        for key, value in (
            ("lease_duration_s", lease_duration_s),
            ("renew_deadline_s", renew_deadline_s),
            ("retry_period_s", retry_period_s),
        ):
            if not (math.isfinite(value) and value > 0):
                raise SpecError(key, value, "a finite number of seconds > 0")
        if renew_deadline_s >= lease_duration_s:
            raise SpecError(
                "renew_deadline_s", renew_deadline_s, f"< lease_duration_s ({lease_duration_s})"
            )
        if not (math.isfinite(stop_grace_s) and stop_grace_s >= 0):
            raise SpecError("stop_grace_s", stop_grace_s, "a finite number of seconds >= 0")
        if retry_period_s >= renew_deadline_s:
            raise SpecError(
                "retry_period_s", retry_period_s, f"< renew_deadline_s ({renew_deadline_s})"
            )
        for key, text in (("namespace", namespace), ("name", name), ("identity", identity)):
            if not text:
                raise SpecError(key, text, "a non-empty string")
        self._api = k8s.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.stop_grace_s = stop_grace_s
        self._clock = clock
        self._monotonic = monotonic
        self._on_change = on_change
        self.annotations = dict(annotations or {})
        self._leading = False
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic time the observed record was first seen
        self._renewed_at = 0.0  # monotonic time our last successful write was sent
        self._thread: ThreadPoolExecutor | None = None  # the Lease's requests, apart

    @classmethod
    def from_settings(
        cls,
        api_client: k8s.ApiClient,
        settings: LeaderElectionSettings,
        *,
        lease: str,
        identity: str | None = None,
        on_change: Callable[[bool], None] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> LeaderElector:
        """An elector for ``lease`` (``settings.controller_lease`` or ``bridge_lease``)."""
        return cls(
            api_client,
            namespace=settings.namespace,
            name=lease,
            identity=identity or default_identity(),
            lease_duration_s=settings.lease_duration_s,
            renew_deadline_s=settings.renew_deadline_s,
            retry_period_s=settings.retry_period_s,
            stop_grace_s=settings.stop_grace_s,
            on_change=on_change,
            annotations=annotations,
        )

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now (its lead task is running)."""
        return self._leading

    @property
    def holder(self) -> str | None:
        """The holder last seen in the Lease (``""``: released; ``None``: not read yet)."""
        return None if self._observed is None else self._observed.holder

    async def run(self, lead: Lead, stop: asyncio.Event) -> None:
        """Campaign until ``stop`` is set, running ``lead(lost)`` as a task in each term won.

        A term ends when renewal fails for ``renew_deadline_s`` or the Lease is found held
        by someone else or deleted: ``lost`` is set, the task cancelled and awaited, and the
        campaign starts again. When ``stop`` is set, ``lost`` is set too and the task gets
        ``stop_grace_s`` to finish what it is doing and return (the Lease is still renewed
        meanwhile, so no other replica acts yet); it is cancelled after that, or at once if
        the Lease is lost while it drains. Then the Lease is released, so another replica
        takes over within one ``retry_period_s``. If ``lead``
        returns the Lease is released and ``run`` returns; if it raises, the Lease is released
        and the error propagates. Cancelling ``run`` is a crash: the lead task is cancelled
        but the Lease is not released (it expires after ``lease_duration_s``).
        """
        try:
            await self._campaign(lead, stop)
        finally:
            if self._thread is not None:  # its last request has returned: nothing waits
                self._thread.shutdown(wait=False)
                self._thread = None

    async def _campaign(self, lead: Lead, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if not await self._acquire(stop):
                return
            lost = asyncio.Event()
            task = asyncio.create_task(_await(lead(lost)), name=f"lead-{self.name}")
            self._set_leading(True)
            try:
                ended_by = await self._hold(task, stop, lost)
            finally:
                if not task.done():
                    lost.set()
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                self._set_leading(False)
            if ended_by == "lost":
                continue
            await self._release()
            if task.done() and not task.cancelled():
                task.result()  # re-raises what the lead task raised
            return

    # ----- the campaign ----------------------------------------------------------------------

    async def _acquire(self, stop: asyncio.Event) -> bool:
        """True once the Lease is ours; False when ``stop`` was set first."""
        _log.debug("campaigning", lease=self.name, identity=self.identity)
        standby = False
        while not stop.is_set():
            deadline = self._monotonic() + self.renew_deadline_s
            outcome = await self._try_acquire_or_renew(deadline)
            if outcome is _Outcome.TAKEN and not standby:
                standby = True
                _log.info("leader.standby", lease=self.name, holder=self.holder)
            if outcome is _Outcome.HELD:
                # when the takeover's clock starts (benchmarks/takeover.py)
                _log.info(
                    "leader.acquired", lease=self.name, identity=self.identity,
                    monotonic=round(self._monotonic(), 3),
                )  # fmt: skip
                return True
            # Wake at the observed lease's expiry rather than up to a retry period after it.
            wait = self.retry_period_s
            if self._observed is not None and self._observed.holder:
                expires_in = self._expiry(self._observed) - self._monotonic()
                wait = min(wait, max(expires_in, 0.0) + 0.001)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
        return False

    async def _hold(
        self, task: asyncio.Task[None], stop: asyncio.Event, ending: asyncio.Event
    ) -> str:
        """Renew every retry period until the term ends: ``"lost"``, ``"stop"`` or ``"done"``.

        Once ``stop`` is set, ``ending`` is set and renewal goes on until the task returns
        (``"stop"``) or ``stop_grace_s`` has passed (``"stop"``: the caller cancels it).
        """
        stopping = asyncio.create_task(stop.wait(), name=f"stop-{self.name}")
        drain_until: float | None = None
        try:
            while True:
                deadline = self._renewed_at + self.renew_deadline_s
                wait = min(self.retry_period_s, deadline - self._monotonic())
                if drain_until is not None:
                    wait = min(wait, drain_until - self._monotonic())
                if wait > 0:
                    waits = {task} if drain_until is not None else {task, stopping}
                    await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
                if stopping.done() and drain_until is None:
                    drain_until = self._monotonic() + self.stop_grace_s
                    ending.set()  # finish up: the task sees its term end and returns
                    _log.info("draining", lease=self.name, grace_s=self.stop_grace_s)
                    continue
                if drain_until is not None and (task.done() or self._monotonic() >= drain_until):
                    return "stop"
                if task.done():
                    return "done"
                if self._monotonic() >= deadline:
                    _log.warning("renew deadline passed", lease=self.name, identity=self.identity)
                    return "lost"
                outcome = await self._try_acquire_or_renew(deadline)
                if outcome is _Outcome.TAKEN:
                    _log.warning(
                        "lease taken", lease=self.name, identity=self.identity, holder=self.holder
                    )
                    return "lost"
        finally:
            stopping.cancel()

    async def _try_acquire_or_renew(self, deadline: float) -> _Outcome:
        """One read and (when allowed) one write of the Lease, both ending by ``deadline``."""
        sent = self._monotonic()
        now = self._clock()
        try:
            lease = await self._call(self._api.read_namespaced_lease, self.name, deadline)
        except ApiException as err:
            if err.status != 404:
                return self._failed("read", err)
            if self._leading:
                return _Outcome.TAKEN  # deleted under us: someone is forcing a new election
            return await self._create(now, sent, deadline)
        except _REQUEST_ERRORS as err:
            return self._failed("read", err)
        record = LeaseRecord.of(lease)
        self._observe(record, self._monotonic())
        if record.holder != self.identity:
            if self._leading:
                return _Outcome.TAKEN
            if record.holder and self._monotonic() < self._expiry(record):
                return _Outcome.TAKEN
        ours = record.holder == self.identity
        new = LeaseRecord(
            holder=self.identity,
            duration_s=math.ceil(self.lease_duration_s),
            acquire_time=record.acquire_time if ours and record.acquire_time else now,
            renew_time=now,
            transitions=record.transitions if ours else record.transitions + 1,
        )
        body = self._body(new, lease)
        try:
            await self._call(self._api.replace_namespaced_lease, self.name, deadline, body)
        except _REQUEST_ERRORS as err:
            return self._failed("update", err)
        self._observe(new, sent)
        self._renewed_at = sent
        return _Outcome.HELD

    async def _create(self, now: datetime, sent: float, deadline: float) -> _Outcome:
        new = LeaseRecord(self.identity, math.ceil(self.lease_duration_s), now, now, 0)
        try:
            await self._call(self._api.create_namespaced_lease, None, deadline, self._body(new))
        except _REQUEST_ERRORS as err:
            return self._failed("create", err)  # 409 AlreadyExists: another candidate won
        self._observe(new, sent)
        self._renewed_at = sent
        return _Outcome.HELD

    async def _release(self) -> None:
        """Hand the Lease on: empty holder, so any candidate may take it at its next try."""
        deadline = self._monotonic() + self.renew_deadline_s
        try:
            lease = await self._call(self._api.read_namespaced_lease, self.name, deadline)
            record = LeaseRecord.of(lease)
            if record.holder != self.identity:
                return  # no longer ours: nothing to hand on
            now = self._clock()
            # A 1-second duration, as client-go writes, tells older readers it is over.
            released = LeaseRecord("", 1, now, now, record.transitions)
            body = self._body(released, lease)
            await self._call(self._api.replace_namespaced_lease, self.name, deadline, body)
        except _REQUEST_ERRORS as err:
            # The Lease then simply expires: the other replica waits a lease duration.
            self._failed("release", err)
            return
        self._observe(released, self._monotonic())
        _log.info("released lease", lease=self.name, identity=self.identity)

    # ----- helpers ---------------------------------------------------------------------------

    async def _call(
        self, method: Callable[..., Any], name: str | None, deadline: float, *body: Any
    ) -> Any:
        """``method`` in a worker thread, its request timed out at ``deadline`` (monotonic)."""
        timeout_s = deadline - self._monotonic()
        if timeout_s <= 0:
            raise TimeoutError(f"no time left for a request on Lease {self.name}")
        args = (self.namespace, *body) if name is None else (name, self.namespace, *body)
        # The request's own timeout ends the worker thread too (a wait_for would leave it
        # running, and its write could land after the term it belonged to). Its thread is
        # the elector's own: in the loop's default pool a renewal waited behind the lead's
        # calls (a first round's hundreds of patches), past the renew deadline, and a busy
        # leader lost its Lease and rebuilt again (benchmarks/takeover.py).
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"lease-{self.name}")
        call = functools.partial(method, *args, _request_timeout=timeout_s)
        return await asyncio.get_running_loop().run_in_executor(self._thread, call)

    def _body(self, record: LeaseRecord, read: Any = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if read is not None:
            # Keep labels/annotations others set; the resourceVersion makes the write conditional.
            meta = self._api.api_client.sanitize_for_serialization(read.metadata)
        if self.annotations:
            meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": record.spec(),
        }

    def _observe(self, record: LeaseRecord, at: float) -> None:
        if record != self._observed:
            self._observed, self._observed_at = record, at

    def _expiry(self, record: LeaseRecord) -> float:
        """Monotonic time after which ``record`` (if unchanged) may be taken over."""
        # Respect a longer duration the holder declared (a replica with other settings).
        return self._observed_at + max(self.lease_duration_s, record.duration_s)

    def _failed(self, what: str, err: BaseException) -> _Outcome:
        status = getattr(err, "status", None)
        # A conflict is the normal end of a lost race; anything else deserves attention.
        log = _log.debug if status == 409 else _log.warning
        log("lease request failed", lease=self.name, request=what, status=status, error=str(err))
        return _Outcome.FAILED

    def _set_leading(self, leading: bool) -> None:
        self._leading = leading
        if self._on_change is not None:
            self._on_change(leading)
