"""Leader election over a Lease, against the strict emulated API server, in real (short) time.

Durations are 1.0 s lease, 0.6 s renew deadline, 0.2 s retry period, so every takeover
happens within about a second. A ledger records every lead term of every replica and fails
the test if two ever overlap.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.emulator import EmulatedCluster
from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.client import KubeApi
from bellows.kube.statuses import controller_mode
from bellows.service.config import LeaderElectionSettings
from bellows.service.leader import LeaderElector

NS = "bellows-system"
LEASE = "bellows-controller"
L, D, R = 1.0, 0.6, 0.2  # lease duration, renew deadline, retry period (seconds)
SLACK = 0.25  # request latency and scheduling on a loaded 2-core machine
# What a stopping leader may still do once its work has returned or its grace has run out:
# finish a renewal in flight and release the Lease, each bounded by the renew deadline.
# (A bound of SLACK alone there failed on a loaded CI machine: 2.25 s for a 2 s drain.)
WIND_DOWN = 2 * D


@dataclass
class Term:
    start: float
    lost: asyncio.Event
    end: float | None = None
    finished: bool = False  # the lead returned by itself (was not cancelled)


@dataclass
class Ledger:
    """Who leads now; every overlap of two terms is a failure."""

    current: str | None = None
    overlaps: list[tuple[str, str]] = field(default_factory=list)

    def enter(self, who: str) -> None:
        if self.current is not None:
            self.overlaps.append((self.current, who))
        self.current = who

    def leave(self, who: str) -> None:
        if self.current == who:
            self.current = None


@dataclass
class Replica:
    name: str
    elector: LeaderElector
    client: k8s.ApiClient
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    terms: list[Term] = field(default_factory=list)
    changes: list[bool] = field(default_factory=list)


class Harness:
    def __init__(self, cluster: EmulatedCluster) -> None:
        self.cluster = cluster
        self.ledger = Ledger()
        self.replicas: list[Replica] = []
        self.admin = k8s.CoordinationV1Api(cluster.api_client())

    def replica(
        self,
        name: str,
        clock: Callable[[], datetime] | None = None,
        annotations: dict[str, str] | None = None,
        **timing: float,
    ) -> Replica:
        client = self.cluster.api_client()
        changes: list[bool] = []
        elector = LeaderElector(
            client,
            namespace=NS,
            name=LEASE,
            identity=name,
            lease_duration_s=timing.get("lease", L),
            renew_deadline_s=timing.get("deadline", D),
            retry_period_s=timing.get("retry", R),
            stop_grace_s=timing.get("grace", 10.0),
            on_change=changes.append,
            clock=clock or (lambda: datetime.now(UTC)),
            annotations=annotations,
        )
        replica = Replica(name, elector, client, changes=changes)
        self.replicas.append(replica)
        return replica

    def start(self, replica: Replica, lead: Callable[[asyncio.Event], Any] | None = None) -> None:
        replica.task = asyncio.create_task(
            replica.elector.run(lead or self.working(replica), replica.stop)
        )

    async def leader_and_standby(
        self, *, wait: float = 2 * R, grace: float = 10.0, **work: Any
    ) -> tuple[Replica, Replica]:
        """``a`` leading (doing ``working(a, **work)``, stop grace ``grace``), then ``b``
        campaigning too for ``wait`` seconds."""
        a, b = self.replica("a", grace=grace), self.replica("b")
        self.start(a, self.working(a, **work))
        await until(lambda: a.elector.is_leader, R + SLACK)
        self.start(b)
        await asyncio.sleep(wait)
        return a, b

    def working(
        self, replica: Replica, *, drain_s: float = 0.0, obey: bool = True
    ) -> Callable[[asyncio.Event], Any]:
        """A lead that works until its term ends (``lost``), then takes ``drain_s`` to finish
        the work in hand and returns; with ``obey=False`` it works until cancelled."""

        async def lead(lost: asyncio.Event) -> None:
            term = Term(time.monotonic(), lost)
            replica.terms.append(term)
            self.ledger.enter(replica.name)
            try:
                await (lost.wait() if obey else asyncio.Event().wait())
                await asyncio.sleep(drain_s)  # the batch in hand
                term.finished = True
            finally:
                term.end = time.monotonic()
                self.ledger.leave(replica.name)

        return lead

    async def lease(self) -> Any:
        return await asyncio.to_thread(self.admin.read_namespaced_lease, LEASE, NS)

    async def lease_when_present(self, timeout_s: float) -> Any:
        """The Lease, once some candidate has created it (fails after ``timeout_s``)."""
        t0 = time.monotonic()
        while True:
            try:
                return await self.lease()
            except ApiException as err:
                if err.status != 404 or time.monotonic() - t0 > timeout_s:
                    raise
            await asyncio.sleep(0.01)

    def leaders(self) -> list[str]:
        return [r.name for r in self.replicas if r.elector.is_leader]

    async def close(self) -> None:
        for r in self.replicas:
            if r.task is not None:
                r.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RuntimeError):
                    await r.task  # a RuntimeError: the failing-lead test's, already checked
        for c in [r.client for r in self.replicas] + [self.admin.api_client]:
            await asyncio.to_thread(c.close)
        assert not self.ledger.overlaps, f"two leaders at once: {self.ledger.overlaps}"


async def until(predicate: Callable[[], bool], timeout_s: float) -> float:
    """Seconds until ``predicate`` holds (fails after ``timeout_s``)."""
    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout_s:
            raise AssertionError(f"not within {timeout_s} s")
        await asyncio.sleep(0.005)
    return time.monotonic() - t0


@pytest.fixture
async def harness(shared_data: Path) -> AsyncIterator[Harness]:
    crds = sorted((shared_data / "crds").glob("*.yaml"))
    async with EmulatedCluster(crds=crds, operator=False, namespaces=("default", NS)) as cluster:
        h = Harness(cluster)
        try:
            async with asyncio.timeout(15):
                yield h
        finally:
            await h.close()


async def test_of_two_replicas_exactly_one_leads_and_keeps_renewing(harness: Harness) -> None:
    a, b = harness.replica("a"), harness.replica("b")
    harness.start(a)
    harness.start(b)
    await until(lambda: len(harness.leaders()) == 1, 2 * R + SLACK)
    first = await harness.lease()
    for _ in range(30):  # 1.5 s: several lease durations' worth of renewals
        await asyncio.sleep(0.05)
        assert len(harness.leaders()) == 1
    leader = harness.leaders()[0]
    lease = await harness.lease()
    assert lease.spec.holder_identity == leader
    assert lease.spec.lease_duration_seconds == 1
    assert lease.spec.lease_transitions == 0
    assert lease.spec.acquire_time == first.spec.acquire_time
    assert lease.spec.renew_time > first.spec.renew_time  # renewed, never expired
    follower = b if leader == "a" else a
    assert follower.elector.holder == leader
    assert follower.terms == []
    # Labels others put on the Lease survive renewals (the writes keep the metadata read).
    patch = {"metadata": {"labels": {"team": "ml"}}}
    await asyncio.to_thread(harness.admin.patch_namespaced_lease, LEASE, NS, patch)
    await asyncio.sleep(3 * R)
    lease = await harness.lease()
    assert lease.metadata.labels == {"team": "ml"}
    assert lease.spec.holder_identity == leader
    assert harness.leaders() == [leader]
    # A candidate that is told to stop just stops: nothing to release.
    follower.stop.set()
    assert follower.task is not None
    await asyncio.wait_for(follower.task, R + SLACK)
    assert (await harness.lease()).spec.holder_identity == leader


async def test_a_graceful_stop_hands_over_within_a_retry_period(harness: Harness) -> None:
    # b has seen a's lease; out of phase with its polls
    a, b = await harness.leader_and_standby(wait=2.5 * R)
    assert harness.leaders() == ["a"]
    a.stop.set()
    t0 = time.monotonic()
    assert a.task is not None
    # its work returns, it releases (a read and a write, each within the renew deadline)
    await asyncio.wait_for(a.task, WIND_DOWN + SLACK)
    released = time.monotonic() - t0
    assert a.terms[0].lost.is_set()
    assert a.terms[0].finished
    assert a.changes == [True, False]
    # from the release, b takes over at its next try: within one retry period
    after = await until(lambda: b.elector.is_leader, R + SLACK)
    takeover = time.monotonic() - t0
    print(f"graceful: a released after {released:.3f} s, b led after {takeover:.3f} s (R = {R} s)")
    assert after < R + SLACK
    lease = await harness.lease()
    assert lease.spec.holder_identity == "b"
    assert lease.spec.lease_transitions == 1  # a release is no transition; b's acquire is


async def _stop_a_leader(
    harness: Harness, *, grace: float, limit_s: float, **work: Any
) -> tuple[Replica, Replica, float]:
    """``a`` leads (doing ``working(a, **work)``), ``b`` stands by; ``a`` is told to stop.
    Returns both and how long ``a`` took to end (failing past ``limit_s``)."""
    a, b = await harness.leader_and_standby(grace=grace, **work)
    a.stop.set()
    t0 = time.monotonic()
    assert a.task is not None
    await asyncio.wait_for(a.task, limit_s)
    return a, b, time.monotonic() - t0


async def test_a_stopping_leader_finishes_its_work_and_keeps_the_lease_meanwhile(
    harness: Harness,
) -> None:
    drain = 2 * L  # longer than a lease: only renewals during the drain keep b out
    a, b, ended = await _stop_a_leader(
        harness, grace=5 * L, limit_s=drain + WIND_DOWN + SLACK, drain_s=drain
    )
    assert ended >= drain
    assert a.terms[0].finished  # not cancelled mid-work
    assert harness.ledger.overlaps == []  # b did not lead while a drained
    await until(lambda: bool(b.terms), R + SLACK)  # b's lead task has started
    assert b.terms[0].start >= (a.terms[0].end or math.inf)


async def test_a_leader_that_does_not_finish_within_the_grace_is_cancelled(
    harness: Harness,
) -> None:
    grace = 2 * R
    a, b, ended = await _stop_a_leader(
        harness, grace=grace, limit_s=grace + WIND_DOWN + SLACK, obey=False
    )
    assert ended >= grace - 0.05
    assert not a.terms[0].finished  # cancelled
    await until(lambda: b.elector.is_leader, R + SLACK)
    assert harness.ledger.overlaps == []


async def test_a_dead_leader_is_replaced_within_lease_duration_plus_retry(
    harness: Harness,
) -> None:
    a, b = await harness.leader_and_standby(wait=3 * R)
    assert a.task is not None
    a.task.cancel()  # a crash: no release
    with contextlib.suppress(asyncio.CancelledError):
        await a.task
    assert (await harness.lease()).spec.holder_identity == "a"  # still held by the dead one
    takeover = await until(lambda: b.elector.is_leader, L + R + SLACK)
    print(f"takeover after a crash: {takeover:.3f} s (bound L + R = {L + R} s)")
    # Not before the lease could have expired: a renewed at most one retry period before.
    assert L - R - SLACK <= takeover <= L + R + SLACK
    lease = await harness.lease()
    assert lease.spec.holder_identity == "b"
    assert lease.spec.lease_transitions == 1


async def test_a_leader_whose_work_fills_the_default_thread_pool_keeps_its_lease(
    harness: Harness,
) -> None:
    """A leader busy with many blocking API calls at once (a first round's patches of
    hundreds of jobs, each in ``asyncio.to_thread``) still renews: its Lease's requests
    have a thread of their own. In the loop's default pool (6 threads on 2 cores) a renewal
    queued behind them past the renew deadline, and the leader lost its Lease and rebuilt
    again, four times in a row at 10 000 jobs (benchmarks/takeover.py)."""
    a = harness.replica("a")
    busy_s = 4 * L  # several lease durations

    async def lead(lost: asyncio.Event) -> None:
        a.terms.append(Term(time.monotonic(), lost))
        until_s = time.monotonic() + busy_s
        while time.monotonic() < until_s and not lost.is_set():
            # 40 calls of 0.3 s each in flight: the default pool is 2 s deep (> D)
            await asyncio.gather(*(asyncio.to_thread(time.sleep, 0.3) for _ in range(40)))
        await lost.wait()

    harness.start(a, lead)
    await until(lambda: a.elector.is_leader, R + SLACK)
    await asyncio.sleep(busy_s + 2 * R)
    assert len(a.terms) == 1, "the busy leader lost its Lease"
    assert not a.terms[0].lost.is_set()
    assert a.elector.is_leader
    assert (await harness.lease()).spec.holder_identity == "a"


@pytest.mark.parametrize("before", ["released", "absent"])
async def test_two_candidates_racing_for_the_lease_leave_one_leader(
    harness: Harness, before: str
) -> None:
    if before == "released":
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now},
        }
        await asyncio.to_thread(harness.admin.create_namespaced_lease, NS, body)
    a, b = harness.replica("a"), harness.replica("b")
    # Both read before either writes: the two writes carry the same resourceVersion (or
    # both create), so the server must refuse one with 409.
    both_read = threading.Barrier(2, timeout=5)
    conflicts: list[int] = []
    for r in (a, b):
        api: Any = r.elector._api
        read, replace, create = (
            api.read_namespaced_lease,
            api.replace_namespaced_lease,
            api.create_namespaced_lease,
        )

        def first_read(*args: Any, _read: Any = read, **kwargs: Any) -> Any:
            try:
                return _read(*args, **kwargs)
            finally:
                with contextlib.suppress(threading.BrokenBarrierError):
                    both_read.wait()

        def counted(fn: Any) -> Any:
            def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return fn(*args, **kwargs)
                except ApiException as err:
                    conflicts.append(err.status)
                    raise

            return call

        api.read_namespaced_lease = first_read
        api.replace_namespaced_lease = counted(replace)
        api.create_namespaced_lease = counted(create)
    harness.start(a)
    harness.start(b)
    await until(lambda: len(harness.leaders()) == 1, R + SLACK)
    both_read.abort()  # later reads need not pair up
    await asyncio.sleep(3 * R)
    assert conflicts == [409]
    leaders = harness.leaders()
    assert len(leaders) == 1
    lease = await harness.lease()
    assert lease.spec.holder_identity == leaders[0]
    assert lease.spec.lease_transitions == (1 if before == "released" else 0)


async def test_a_leader_whose_lease_is_taken_steps_down_at_once(harness: Harness) -> None:
    a = harness.replica("a")
    harness.start(a)
    await until(lambda: a.elector.is_leader, R + SLACK)
    lease = await harness.lease()
    lease.spec.holder_identity = "intruder"
    lease.spec.renew_time = datetime.now(UTC)
    await asyncio.to_thread(harness.admin.replace_namespaced_lease, LEASE, NS, lease)
    await until(lambda: not a.elector.is_leader, R + SLACK)
    assert a.terms[0].lost.is_set()
    assert a.terms[0].end is not None
    assert a.changes == [True, False]
    assert a.elector.holder == "intruder"
    # The intruder's lease is valid for a full duration from when a saw it; it never renews.
    retaken = await until(lambda: len(a.terms) == 2, L + R + SLACK)
    assert retaken >= L - SLACK
    assert not a.terms[1].lost.is_set()


async def test_a_leader_whose_lease_is_deleted_steps_down_and_a_new_election_runs(
    harness: Harness,
) -> None:
    a, _ = await harness.leader_and_standby()
    await asyncio.to_thread(harness.admin.delete_namespaced_lease, LEASE, NS)
    await until(a.terms[0].lost.is_set, R + SLACK)
    await until(lambda: a.terms[0].end is not None, SLACK)  # its work is cancelled after
    # the old leader may still count itself leader while its term is torn down; wait for
    # the new Lease to exist, then for exactly one leader, the one the Lease names
    lease = await harness.lease_when_present(2 * R + SLACK)
    await until(lambda: len(harness.leaders()) == 1, 2 * R + SLACK)
    lease = await harness.lease()
    assert lease.spec.holder_identity == harness.leaders()[0]
    assert lease.spec.lease_transitions == 0  # a new Lease
    # Deleting the Lease by hand removes the lock itself: a candidate may create a new one
    # before the old leader's next renewal (at most one retry period) tells it to stop, as
    # with client-go. The overlap that allows is bounded by that, and is the only one.
    assert set(harness.ledger.overlaps) <= {("a", "b"), ("b", "a")}
    assert len(harness.ledger.overlaps) <= 1
    harness.ledger.overlaps.clear()


async def test_a_leader_cut_off_from_the_api_stops_before_another_takes_over(
    harness: Harness,
) -> None:
    a, b = await harness.leader_and_standby()
    with socket.socket() as s:  # a port where nothing listens: connection refused
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    a.client.configuration.host = dead
    stepped_down = await until(lambda: not a.elector.is_leader, D + SLACK)
    takeover = await until(lambda: bool(b.terms), L + R + SLACK) + stepped_down
    print(
        f"cut-off leader stepped down after {stepped_down:.3f} s, "
        f"b took over after {takeover:.3f} s"
    )
    assert D - R - SLACK <= stepped_down <= D + SLACK  # at its renew deadline
    assert a.terms[0].lost.is_set()
    assert (a.terms[0].end or math.inf) <= (b.terms[0].start)  # never two leaders
    assert takeover <= L + R + SLACK


async def test_a_failing_lead_releases_the_lease_and_raises(harness: Harness) -> None:
    a = harness.replica("a")

    async def crash(lost: asyncio.Event) -> None:
        await asyncio.sleep(0.05)
        raise RuntimeError("controller failed")

    harness.start(a, crash)
    assert a.task is not None
    with pytest.raises(RuntimeError, match="controller failed"):
        await asyncio.wait_for(a.task, 1.0)
    lease = await harness.lease()
    assert lease.spec.holder_identity == ""
    assert lease.spec.lease_duration_seconds == 1
    assert not a.elector.is_leader
    assert a.changes == [True, False]


async def test_a_lead_that_finishes_releases_and_returns(harness: Harness) -> None:
    stamp = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    a = harness.replica("a", clock=lambda: stamp)  # the Lease's times come from the clock
    done: list[bool] = []

    async def finish(lost: asyncio.Event) -> None:
        done.append(lost.is_set())

    harness.start(a, finish)
    assert a.task is not None
    await asyncio.wait_for(a.task, 1.0)
    assert done == [False]
    lease = await harness.lease()
    assert lease.spec.holder_identity == ""
    assert lease.spec.renew_time == stamp
    assert lease.spec.acquire_time == stamp


async def test_the_leader_publishes_its_mode_on_the_lease_for_bellows_status(
    harness: Harness,
) -> None:
    """``bellows status`` reads the mode from the Lease (through ``KubeApi``, as it does):
    the leader's while it renews, ``unknown`` once it has handed the Lease on."""
    a = harness.replica("a", annotations={keys.MODE: "paper"})
    harness.start(a)
    await until(lambda: a.elector.is_leader, R + SLACK)
    client = harness.cluster.api_client()
    api = KubeApi(client)
    try:
        found = await api.get_lease(NS, LEASE)
        assert found is not None
        assert found["metadata"]["annotations"][keys.MODE] == "paper"
        assert controller_mode(found, now=datetime.now(UTC)) == "paper"
        # others' annotations survive the renewals
        patch = {"metadata": {"annotations": {"team": "ml"}}}
        await asyncio.to_thread(harness.admin.patch_namespaced_lease, LEASE, NS, patch)
        await asyncio.sleep(3 * R)
        found = await api.get_lease(NS, LEASE)
        assert found is not None
        assert found["metadata"]["annotations"] == {"team": "ml", keys.MODE: "paper"}
        # not renewed within its duration: no controller runs, whatever the Lease says
        later = datetime.now(UTC) + timedelta(seconds=L + 1)
        assert controller_mode(found, now=later) == "unknown"
        a.stop.set()
        assert a.task is not None
        await asyncio.wait_for(a.task, 2.0)
        released = await api.get_lease(NS, LEASE)
        assert controller_mode(released, now=datetime.now(UTC)) == "unknown"
        assert await api.get_lease(NS, "no-such-lease") is None
    finally:
        client.close()


@pytest.mark.parametrize(
    ("timing", "key"),
    [
        ((1.0, 1.0, 0.2), "renew_deadline_s"),
        ((1.0, 1.5, 0.2), "renew_deadline_s"),
        ((1.0, 0.6, 0.6), "retry_period_s"),
        ((0.0, 0.6, 0.2), "lease_duration_s"),
        ((math.nan, 0.6, 0.2), "lease_duration_s"),
        ((1.0, 0.6, -0.1), "retry_period_s"),
        ((1.0, 0.6, 0.2, -1.0), "stop_grace_s"),
        ((1.0, 0.6, 0.2, math.inf), "stop_grace_s"),
    ],
)
def test_bad_timing_names_the_key(timing: tuple[float, ...], key: str) -> None:
    lease, deadline, retry, *grace = timing
    with pytest.raises(SpecError) as caught:
        LeaderElector(
            k8s.ApiClient(k8s.Configuration()),
            namespace=NS,
            name=LEASE,
            identity="a",
            lease_duration_s=lease,
            renew_deadline_s=deadline,
            retry_period_s=retry,
            stop_grace_s=grace[0] if grace else 10.0,
        )
    assert caught.value.field == key
    assert key in str(caught.value)


def test_an_empty_identity_is_refused_and_settings_build_an_elector() -> None:
    with pytest.raises(SpecError, match="identity"):
        LeaderElector(
            k8s.ApiClient(k8s.Configuration()),
            namespace=NS,
            name=LEASE,
            identity="",
            lease_duration_s=L,
            renew_deadline_s=D,
            retry_period_s=R,
        )
    settings = LeaderElectionSettings()
    elector = LeaderElector.from_settings(
        k8s.ApiClient(k8s.Configuration()), settings, lease=settings.bridge_lease
    )
    assert (elector.namespace, elector.name) == ("bellows-system", "bellows-bridge")
    assert (elector.lease_duration_s, elector.renew_deadline_s, elector.retry_period_s) == (
        15.0,
        10.0,
        2.0,
    )
    assert elector.identity.startswith(socket.gethostname() + "_")
    assert not elector.is_leader
    assert elector.holder is None
