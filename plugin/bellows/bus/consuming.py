"""The controller's side of the bus: a durable pull consumer that yields decoded events.

Each :class:`Delivery` carries its event and the handle to ack it. A message that does not
decode, or whose subject names another job than its payload (a forgery past the namespace
filter), is published to the dead-letter subject with its reason and then acked, so it never
stops the loop, never reaches the controller and never comes back. Acks are the caller's:
the controller acks only after the decisions an event led to have been applied
(at-least-once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import nats.errors
import nats.js.errors
import structlog
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from bellows.bus.codec import INVALID_EVENT, EventError, decode
from bellows.bus.events import Event
from bellows.bus.observers import BusObserver, NullObserver
from bellows.bus.publishing import MSG_ID_HEADER
from bellows.bus.settings import NatsSettings
from bellows.bus.streams import ensure_consumer
from bellows.bus.subjects import dead_letter_subject, subject_mismatch
from bellows.bus.transient import RIDE_OUT_S, ride_out

__all__ = [
    "CODE_HEADER",
    "REASON_HEADER",
    "Delivery",
    "EventConsumer",
]

REASON_HEADER = "Bellows-Dead-Letter-Reason"
CODE_HEADER = "Bellows-Dead-Letter-Code"
SUBJECT_HEADER = "Bellows-Original-Subject"
SEQUENCE_HEADER = "Bellows-Original-Sequence"
DELIVERIES_HEADER = "Bellows-Deliveries"

_log = structlog.get_logger("bellows.bus")


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(eq=False)
class Delivery:
    """One delivered event and its ack handle (mutable only in whether it was settled)."""

    event: Event
    subject: str
    stream_sequence: int
    num_delivered: int
    msg: Msg = field(repr=False)
    settled: bool = False

    async def ack(self) -> None:
        """Tell the server the event is handled; it will not be delivered again."""
        if not self.settled:
            self.settled = True
            await self.msg.ack()

    async def nak(self, delay_s: float | None = None) -> None:
        """Ask for redelivery (after ``delay_s``)."""
        if not self.settled:
            self.settled = True
            await self.msg.nak(delay=delay_s)

    async def in_progress(self) -> None:
        """Reset the server's ack timer: still held, waiting for its Δ window to close."""
        if not self.settled:
            await self.msg.in_progress()


class EventConsumer:
    """Fetches from the durable consumer, decodes, and dead-letters what does not decode."""

    def __init__(
        self,
        js: JetStreamContext,
        subscription: JetStreamContext.PullSubscription,
        settings: NatsSettings,
        *,
        observer: BusObserver | None = None,
        wall_clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self._js = js
        self._sub = subscription
        self._settings = settings
        self._observer: BusObserver = observer or NullObserver()
        self._wall_clock = wall_clock

    @classmethod
    async def open(
        cls,
        js: JetStreamContext,
        settings: NatsSettings,
        *,
        namespaces: tuple[str, ...] = (),
        observer: BusObserver | None = None,
        wall_clock: Callable[[], datetime] = _utcnow,
        retry_s: float = RIDE_OUT_S,
    ) -> EventConsumer:
        """Provision the durable consumer (if needed) and bind to it; a server that does not
        answer (restarting, JetStream recovering) is asked again every half second for up to
        ``retry_s`` (a controller that died of it would lose its lead for nothing)."""

        async def bind() -> JetStreamContext.PullSubscription:
            await ensure_consumer(js, settings, namespaces)
            return await js.pull_subscribe_bind(durable=settings.durable, stream=settings.stream)

        subscription = await ride_out(bind, what="consumer.open", retry_s=retry_s)
        return cls(js, subscription, settings, observer=observer, wall_clock=wall_clock)

    async def fetch(self, *, timeout_s: float = 1.0) -> list[Delivery]:
        """Up to ``fetch_batch`` decoded deliveries; ``[]`` when none came within the time.

        Connection trouble (a server restart) is logged and answered with ``[]``: the client
        reconnects by itself and the next call picks up where the consumer left off.
        """
        try:
            msgs = await self._sub.fetch(self._settings.fetch_batch, timeout=timeout_s)
        except TimeoutError:  # nats.errors.TimeoutError or a bare one, depending on the path
            return []
        except nats.errors.Error as exc:
            _log.warning("consumer.fetch_failed", error=str(exc), error_type=type(exc).__name__)
            await asyncio.sleep(min(timeout_s, 0.5))  # do not spin while disconnected
            return []
        out: list[Delivery] = []
        now = self._wall_clock()
        for msg in msgs:
            delivery = await self._decode(msg, now)
            if delivery is not None:
                out.append(delivery)
        return out

    async def _decode(self, msg: Msg, now: datetime) -> Delivery | None:
        meta = msg.metadata
        try:
            event = decode(msg.data)
        except EventError as exc:
            await self.dead_letter(msg, exc.code, exc.reason)
            return None
        except Exception as exc:  # a decoder bug must cost one message, never the batch
            _log.exception("event.decode_crashed", sequence=meta.sequence.stream)
            await self.dead_letter(msg, INVALID_EVENT, f"{type(exc).__name__}: {str(exc)[:200]}")
            return None
        # the stream's permissions and the consumer's namespace filter act on the subject,
        # the controller on the payload: both must name the same job
        mismatch = subject_mismatch(self._settings.subject_prefix, msg.subject, event)
        if mismatch is not None:
            await self.dead_letter(msg, INVALID_EVENT, mismatch)
            return None
        self._observer.consumed(event.type, lag_s=(now - event.time).total_seconds())
        return Delivery(event, msg.subject, meta.sequence.stream, meta.num_delivered, msg)

    async def dead_letter(self, msg: Msg, code: str, reason: str) -> bool:
        """Publish ``msg`` with its reason to the dead-letter subject, then ack it.

        Returns whether it was dead-lettered; on failure the message stays un-acked and
        comes back later (the loop goes on either way).
        """
        meta = msg.metadata
        sequence = meta.sequence.stream
        headers = {
            CODE_HEADER: code,
            REASON_HEADER: reason[:1024],
            SUBJECT_HEADER: msg.subject,
            SEQUENCE_HEADER: str(sequence),
            DELIVERIES_HEADER: str(meta.num_delivered),
            # The same stored message dead-lettered twice (crash before the ack) is one.
            MSG_ID_HEADER: f"{self._settings.stream}:{sequence}",
        }
        try:
            await self._js.publish(
                dead_letter_subject(self._settings.subject_prefix, code),
                msg.data,
                stream=self._settings.dead_letter_stream,
                headers=headers,
            )
            await msg.ack()
        except nats.errors.Error as exc:
            _log.error("event.dead_letter_failed", sequence=sequence, code=code, error=str(exc))
            return False
        self._observer.dead_lettered(code)
        _log.warning(
            "event.dead_lettered",
            code=code,
            reason=reason,
            subject=msg.subject,
            sequence=sequence,
        )
        return True

    async def reject(self, delivery: Delivery, code: str, reason: str) -> bool:
        """Dead-letter a decoded event the controller cannot handle (e.g. it keeps failing)."""
        if delivery.settled:
            return False
        done = await self.dead_letter(delivery.msg, code, reason)
        delivery.settled = done
        return done

    async def pending(self) -> int:
        """Events in the stream not yet delivered to this consumer (its backlog)."""
        info = await self._sub.consumer_info()
        return int(info.num_pending or 0)

    async def close(self) -> None:
        """Stop pulling; the durable consumer and its position stay on the server."""
        await self._sub.unsubscribe()
