"""The consume loop: fetch, batch per Δ, apply, and only then ack (at-least-once).

The one place where the bus meets the controller: ``apply`` receives the facts of a closed
window and returns once the decisions they led to are applied; the deliveries are acked
after it returns. If ``apply`` raises, the deliveries are nak'ed for redelivery (or, past
``max_deliver``, dead-lettered with the error) and the loop goes on. While events wait for
their window, their deliveries are kept alive with in-progress acks so that a Δ longer
than ``ack_wait`` does not trigger redeliveries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import structlog

from bellows.bus.batching import Batch, Batcher, Offered
from bellows.bus.consuming import Delivery, EventConsumer
from bellows.bus.events import Event, event_key
from bellows.bus.observers import BusObserver, NullObserver

__all__ = ["APPLY_FAILED", "Apply", "Early", "EventPump", "PartlyAppliedError"]

APPLY_FAILED = "apply_failed"

Apply = Callable[[tuple[Event, ...]], Awaitable[None]]
Early = Callable[[tuple[Event, ...]], bool]

_log = structlog.get_logger("bellows.bus")


class PartlyAppliedError(Exception):
    """``apply`` took every event of its batch but ``failed``; those alone come back.

    ``apply`` raises it (or a subclass) after the round the other events led to has been
    applied: their deliveries are acked, and each failed one is redelivered, or
    dead-lettered with its reason once it has been delivered ``max_deliver`` times.
    """

    def __init__(self, failed: Sequence[tuple[Event, str]]) -> None:
        self.failed = tuple(failed)
        listed = "; ".join(f"{e.job.name}: {reason}" for e, reason in self.failed[:5])
        super().__init__(f"{len(self.failed)} event(s) not taken ({listed})")


class EventPump:
    """Drives :class:`EventConsumer` → :class:`Batcher` → ``apply`` → acks.

    ``clock`` is monotonic seconds (``loop.time`` in the service, a fake in tests);
    ``heartbeat`` is called once per cycle (the liveness probe watches it). ``early``, given
    the facts of the open window after new ones came in, may close it before Δ (the paper's
    hybrid trigger); the grid of later windows does not move. ``immediate`` applies what each
    fetch brought at once, as one batch (Bellows mode: the core keeps the Δ grid itself).
    """

    def __init__(
        self,
        consumer: EventConsumer,
        batcher: Batcher[Delivery],
        apply: Apply,
        *,
        clock: Callable[[], float],
        max_deliver: int,
        ack_wait_s: float,
        poll_s: float = 1.0,
        nak_delay_s: float = 1.0,
        observer: BusObserver | None = None,
        heartbeat: Callable[[], None] | None = None,
        early: Early | None = None,
        immediate: bool = False,
    ) -> None:
        self._consumer = consumer
        self._batcher = batcher
        self._apply = apply
        self._clock = clock
        self._max_deliver = max_deliver
        self._keepalive_s = ack_wait_s / 3
        self._poll_s = poll_s
        self._nak_delay_s = nak_delay_s
        self._observer: BusObserver = observer or NullObserver()
        self._heartbeat = heartbeat
        self._early = early
        self._immediate = immediate
        self._last_keepalive = clock()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then hand held events back for redelivery."""
        while not stop.is_set():
            await self.cycle()
        for delivery in self._batcher.held():
            await delivery.nak()

    async def cycle(self) -> None:
        """One fetch, then every batch that is due."""
        deliveries = await self._consumer.fetch(timeout_s=self._fetch_timeout())
        news = False
        for delivery in deliveries:
            offered = self._batcher.offer(delivery.event, delivery)
            if offered is Offered.APPLIED:
                await delivery.ack()
            news = news or offered is Offered.QUEUED
        early = news and (self._immediate or self._closes_early())
        while (batch := self._batcher.poll(self._clock(), force=early)) is not None:
            early = False
            await self._apply_batch(batch)
        await self._keep_alive()
        if self._heartbeat is not None:
            self._heartbeat()

    def _closes_early(self) -> bool:
        if self._early is None or self._batcher.delta_s == 0:
            return False
        try:
            early = self._early(self._batcher.waiting())
        except Exception:  # a faulty trigger only loses the early close, never the loop
            _log.exception("batch.early_check_failed")
            return False
        if early:
            _log.info("batch.closed_early", events=self._batcher.pending)
        return early

    def _fetch_timeout(self) -> float:
        due = self._batcher.next_close()
        if due is None:
            return self._poll_s
        return min(self._poll_s, max(0.01, due - self._clock()))

    async def _apply_batch(self, batch: Batch[Delivery]) -> None:
        started = self._clock()
        failed: dict[object, str] = {}
        try:
            await self._apply(batch.events)
        except PartlyAppliedError as exc:  # the others were taken: ack them, keep these
            failed = {event_key(e): reason for e, reason in exc.failed}
            _log.warning("batch.partly_applied", events=len(batch.events), failed=len(failed))
            self._observer.apply_failed(len(failed))
        except Exception as exc:  # any failure of the wiring must not stop the loop
            _log.exception("batch.apply_failed", events=len(batch.events))
            self._observer.apply_failed(len(batch.events))
            failed = dict.fromkeys(batch.keys, f"{type(exc).__name__}: {exc}")
        for delivery in batch.handles:
            why = failed.get(event_key(delivery.event))
            if why is None:
                await delivery.ack()
            else:
                await self._hand_back(delivery, why)
        taken = tuple(e for e in batch.events if event_key(e) not in failed)
        if taken:
            self._batcher.commit(Batch(taken, (), batch.closed_at))
            self._observer.batch_applied(len(taken), seconds=self._clock() - started)

    async def _hand_back(self, delivery: Delivery, reason: str) -> None:
        if delivery.num_delivered >= self._max_deliver:
            # The server would silently stop redelivering; keep the event visible.
            await self._consumer.reject(delivery, APPLY_FAILED, reason)
        else:
            await delivery.nak(self._nak_delay_s)

    async def _keep_alive(self) -> None:
        now = self._clock()
        if now - self._last_keepalive < self._keepalive_s:
            return
        self._last_keepalive = now
        for delivery in self._batcher.held():
            await delivery.in_progress()
