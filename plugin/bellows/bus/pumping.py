"""The consume loop: fetch, apply, and only then ack (at-least-once).

The one place where the bus meets the controller: ``apply`` receives the new facts of each
fetch at once and returns once the decisions they led to are applied; the deliveries are
acked after it returns. The bus does not decide when a round is due, the core's clock does:
when ``apply`` returns a :data:`Settled` check (the facts wait for a round the core has
due), the deliveries stay un-acked until the check says that round has run. If ``apply``
raises, the deliveries are nak'ed for redelivery (or, past ``max_deliver``,
dead-lettered with the error) and the loop goes on. While deliveries wait, they are kept
alive with in-progress acks so that a Δ longer than ``ack_wait`` does not trigger
redeliveries.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import structlog

from bellows.bus.batching import Batch, Batcher, Offered
from bellows.bus.consuming import Delivery, EventConsumer
from bellows.bus.events import Event, event_key
from bellows.bus.observers import BusObserver, NullObserver

__all__ = ["APPLY_FAILED", "Apply", "EventPump", "PartlyAppliedError", "Settled"]

APPLY_FAILED = "apply_failed"

# Whether the round the applied facts wait for has run (their deliveries may be acked).
Settled = Callable[[], bool]
Apply = Callable[[tuple[Event, ...]], Awaitable[Settled | None]]

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
    ``heartbeat`` is called once per cycle (the liveness probe watches it). What each fetch
    brought is applied at once, as one batch; when ``apply`` returns a :data:`Settled`
    check, its deliveries are acked once the check holds (asked every cycle, at least every
    ``poll_s``).
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
        self._last_keepalive = clock()
        # applied deliveries waiting for the round their facts wait for, with its check
        self._awaiting: list[tuple[Settled, list[Delivery]]] = []

    @property
    def awaiting(self) -> int:
        """Deliveries applied but not acked yet: their facts wait for a round."""
        return sum(len(held) for _, held in self._awaiting)

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; then hand held events back for redelivery."""
        while not stop.is_set():
            await self.cycle()
        for delivery in self._held():
            await delivery.nak()
        self._awaiting.clear()

    async def cycle(self) -> None:
        """One fetch, then its batch; then the acks whose round has run."""
        deliveries = await self._consumer.fetch(timeout_s=self._poll_s)
        for delivery in deliveries:
            if self._batcher.offer(delivery.event, delivery) is Offered.APPLIED:
                await delivery.ack()
        batch = self._batcher.poll(self._clock())
        if batch is not None:
            await self._apply_batch(batch)
        await self._ack_settled()
        await self._keep_alive()
        if self._heartbeat is not None:
            self._heartbeat()

    def _held(self) -> list[Delivery]:
        return [*self._batcher.held(), *(d for _, held in self._awaiting for d in held)]

    async def _ack_settled(self) -> None:
        waiting: list[tuple[Settled, list[Delivery]]] = []
        for settled, held in self._awaiting:
            try:
                done = settled()
            except Exception:  # a faulty check only delays its acks to the stop, never the loop
                _log.exception("batch.settle_check_failed")
                done = False
            if not done:
                waiting.append((settled, held))
                continue
            for delivery in held:
                await delivery.ack()
        self._awaiting = waiting

    async def _apply_batch(self, batch: Batch[Delivery]) -> None:
        started = self._clock()
        failed: dict[object, str] = {}
        settled: Settled | None = None
        try:
            settled = await self._apply(batch.events)
        except PartlyAppliedError as exc:  # the others were taken: ack them, keep these
            failed = {event_key(e): reason for e, reason in exc.failed}
            _log.warning("batch.partly_applied", events=len(batch.events), failed=len(failed))
            self._observer.apply_failed(len(failed))
        except Exception as exc:  # any failure of the wiring must not stop the loop
            _log.exception("batch.apply_failed", events=len(batch.events))
            self._observer.apply_failed(len(batch.events))
            failed = dict.fromkeys(batch.keys, f"{type(exc).__name__}: {exc}")
        taken: list[Delivery] = []
        for delivery in batch.handles:
            why = failed.get(event_key(delivery.event))
            if why is not None:
                await self._hand_back(delivery, why)
            elif settled is None:
                await delivery.ack()
            else:
                taken.append(delivery)
        if taken:
            assert settled is not None
            self._awaiting.append((settled, taken))
        events = tuple(e for e in batch.events if event_key(e) not in failed)
        if events:
            self._batcher.commit(Batch(events, (), batch.closed_at))
            self._observer.batch_applied(len(events), seconds=self._clock() - started)

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
        for delivery in self._held():
            await delivery.in_progress()
