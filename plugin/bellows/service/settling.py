"""A controller's rounds: step the core, then drive the cluster to its decisions.

Faults: a decision the cluster does not take (an API error, a halt that times out) is kept
and retried, at the next round or sooner (:meth:`Settler.settle` with no new decisions). The
:class:`~bellows.service.roster.Roster` keeps an upper bound of the GPUs each job may hold
on the cluster; a start or scale-up whose GPUs are not yet free there (a scale-down before
it failed) waits instead of over-committing the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from bellows.autoscaler import Decision, Preempt, Reject, Rescale, Start, TypedAutoscaler
from bellows.autoscaler.straddle import FreeNodes
from bellows.inputs import DATA_ERRORS, brief
from bellows.service.parts import Part, Parts

__all__ = ["FAILURES_TOLD", "RETRY_BACKOFF_S", "Settler"]

RETRY_BACKOFF_S = (1.0, 60.0)  # a failed decision's first and longest wait before a retry
FAILURES_TOLD = 3  # failures in a row after which the job's owner is told (an Event)

_log = structlog.get_logger("bellows.controller")


class Settler(Part):
    """Runs one controller's rounds and applies their decisions, frees before claims."""

    def __init__(
        self, parts: Parts, *, now: Callable[[], float], timer: Callable[[], float]
    ) -> None:
        super().__init__(parts)
        self._now = now
        self._timer = timer
        self.rounds = 0  # the core's rounds run (not fills): the pump acks after them

    async def round(self, now: float) -> float:
        """Step the core and drive its decisions; returns the seconds of the step."""
        started = self._timer()
        before = self._auto.last_round
        auto = self._auto
        if isinstance(auto, TypedAutoscaler):
            self._relocate(auto, now)
            auto.see_nodes(self._typed_nodes_seen())
        else:
            auto.see_nodes(self._nodes_seen())
        decisions = auto.step(now)
        seconds = self._timer() - started
        ran = self._auto.last_round
        if ran is not before and ran is not None and ran.kind == "round":
            self.rounds += 1
        await self.settle(decisions, now, seconds=seconds)
        await self._note_keeps(decisions)
        return seconds

    def _nodes_seen(self) -> FreeNodes | None:
        """Where the GPUs sit (a node view: ``controller.placement: nodes``), as the
        simulator tells the core on nodes; ``None`` (no view, or a view the core cannot
        take: logged) prices every count on the fewest nodes."""
        try:
            return self._actuator.free_nodes()
        except DATA_ERRORS as err:  # a state no check foresaw: this round without nodes
            _log.warning("round.nodes_unseen", error=brief(err))
            return None

    def _relocate(self, auto: TypedAutoscaler, now: float) -> None:
        """Beside Kueue (types ``assigned``), each running job whose pods run on another
        GPU type than its core expected (Kueue admitted it to another flavor) is moved in
        the core to the type it runs on, at its allocation (no restart: it did not move)."""
        if not auto.assigned:
            return
        for job in list(auto.allocations):
            found = self._actuator.pods_type(job)
            if found is not None and found in auto.cluster.names and found != auto.gpu_type(job):
                _log.info("job.relocated", job=job, was=auto.gpu_type(job), gpu_type=found)
                auto.relocate(job, found, now)

    def _typed_nodes_seen(self) -> dict[str, FreeNodes] | None:
        """:meth:`_nodes_seen` per GPU type, for a core of several types."""
        try:
            return self._actuator.free_nodes_by_type()
        except DATA_ERRORS as err:
            _log.warning("round.nodes_unseen", error=brief(err))
            return None

    async def _note_keeps(self, decisions: Sequence[Decision]) -> None:
        """Write on each job the round kept why (once per reason: the roster remembers
        what was written); a job a decision touched says that decision's reason instead."""
        kept = self._roster.kept
        for decision in decisions:
            kept.pop(decision.job, None)
        keeps = [k for k in self._auto.keeps if kept.get(k.job) != k.reason]
        self._auto.keeps = ()
        noted = await asyncio.gather(
            *(self._actuator.note_kept(k) for k in keeps), return_exceptions=True
        )
        for keep, outcome in zip(keeps, noted, strict=True):
            if isinstance(outcome, BaseException):  # best effort, as an Event
                _log.warning("job.note_failed", job=keep.job, error=brief(outcome))
            else:
                kept[keep.job] = keep.reason

    async def settle(self, decisions: Sequence[Decision], now: float, *, seconds: float) -> None:
        """Drive ``decisions`` and the retried ones: frees first, then what fits of the claims."""
        retry, failed, clock = self._roster.retry, self._roster.failed, self._timer()
        # a decision the cluster did not take yet is retried, unless a newer one replaces it;
        # one that failed waits out its backoff (a job the cluster keeps refusing costs a
        # call every minute at most, never a busy loop)
        merged = {**retry, **{d.job: d for d in decisions}}
        retry.clear()
        pending: list[Decision] = []
        for job, decision in merged.items():
            if failed.get(job, (0, clock))[1] > clock:
                retry[job] = decision  # its backoff is not over: kept, the newest
            else:
                pending.append(decision)
        # a job a typed round moved to another GPU type is halted, then started there: its
        # halt frees its GPUs with the others' (a start alone could find it at its size)
        moved = _moved(decisions, pending)
        # halts and scale-downs free GPUs before scale-ups and starts claim them
        frees = [*moved, *(d for d in pending if _frees(d))]
        await asyncio.gather(*(self.drive(d, now) for d in frees))
        claims = self._admissible([d for d in pending if not _frees(d)])
        # with a node view, placed all at once before any of them halts or resumes
        sized = [d for d in claims if isinstance(d, Start | Rescale)]
        self._actuator.place_round(
            [(d.job, d.gpus) for d in sized], {d.job: d.gpu_type for d in sized if d.gpu_type}
        )
        await asyncio.gather(*(self.drive(d, now) for d in claims))
        allocations = self._auto.allocations
        self._observer.round_done(
            seconds,
            decisions,
            running=len(allocations),
            queued=len(self._auto.queued),
            gpus_allocated=sum(a.gpus for a in allocations.values()),
            capacity=self._auto.capacity,
        )

    def _admissible(self, claims: Sequence[Decision]) -> list[Decision]:
        """The claims whose GPUs are free on the cluster now; the others wait for a retry.

        The core's allocations always fit; the cluster's may not yet, when a scale-down or
        halt before them failed. Each admitted claim reserves its GPUs at once.
        """
        held = self._roster.held
        out: list[Decision] = []
        in_use = sum(held.values())
        for claim in claims:
            assert isinstance(claim, Start | Rescale)
            more = claim.gpus - held.get(claim.job, 0)
            if more > 0 and in_use + more > self._auto.capacity:
                _log.info("decision.deferred", job=claim.job, gpus=claim.gpus, in_use=in_use)
                self._roster.retry[claim.job] = claim
                continue
            if more > 0:
                in_use += more
                held[claim.job] = claim.gpus
            out.append(claim)
        return out

    async def drive(self, decision: Decision, now: float) -> None:
        """Apply one decision; one the cluster did not take is kept for a retry."""
        roster = self._roster
        try:
            done = (
                self._auto.estimated_done(decision.job, now)
                if isinstance(decision, Start | Rescale) and decision.job in self._auto.allocations
                else None
            )
            outcome = await self._actuator.apply(decision, done=done)
        except Exception as err:  # one job must not stop the loop: retry it, backing off
            await self._failed(decision, err)
            return
        roster.failed.pop(decision.job, None)
        self._observer.applied(decision, outcome)
        _log.info(
            "decision.applied", job=decision.job, result=outcome.result, detail=outcome.detail
        )
        if outcome.result == "dropped":
            roster.finish(decision.job, now, now)
            return
        if outcome.result == "pending":
            roster.retry[decision.job] = decision
            return
        if isinstance(decision, Start | Rescale):
            roster.held[decision.job] = decision.gpus
        else:
            roster.held.pop(decision.job, None)
            if isinstance(decision, Reject):
                roster.active.discard(decision.job)
                roster.uids.pop(decision.job, None)
        # GPUs are held from when the pods run again, not from when the round decided
        self._observer.took_effect(decision, max(now, self._now()))

    async def _failed(self, decision: Decision, err: Exception) -> None:
        """Keep ``decision`` for a retry after a backoff that doubles with each failure in a
        row (``RETRY_BACKOFF_S``); the job's owner is told once, at the ``FAILURES_TOLD``-th
        (a Warning Event, ``DecisionFailed``), and each failure is counted."""
        roster, job = self._roster, decision.job
        count = roster.failed.get(job, (0, 0.0))[0] + 1
        first, longest = RETRY_BACKOFF_S
        roster.failed[job] = (count, self._timer() + min(longest, first * 2 ** (count - 1)))
        roster.retry[job] = decision
        _log.warning("decision.failed", job=job, error=brief(err), failures=count)
        self._observer.decision_failed(decision)
        if count == FAILURES_TOLD:
            message = (
                f"Bellows could not apply its decision ({type(decision).__name__.lower()}) "
                f"{count} times in a row ({brief(err)}); it retries, backing off to once "
                f"every {longest:.0f} s"
            )
            await self._reports.notify(job, "DecisionFailed", message)


def _moved(decisions: Sequence[Decision], pending: Sequence[Decision]) -> list[Preempt]:
    """The halts of the jobs that ``decisions`` halt and then start (a move to another GPU
    type) and whose start is driven now (``pending``)."""
    starts = {d.job for d in pending if isinstance(d, Start)}
    return [d for d in decisions if isinstance(d, Preempt) and d.job in starts]


def _frees(decision: Decision) -> bool:
    if isinstance(decision, Rescale):
        return decision.gpus < decision.gpus_from
    return isinstance(decision, Preempt | Reject)
