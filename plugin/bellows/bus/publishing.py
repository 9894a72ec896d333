"""Publishing events to JetStream with a message id, so repeats are dropped by the server."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from nats.js import JetStreamContext

from bellows.bus.codec import encode, message_id
from bellows.bus.connection import connect
from bellows.bus.events import Event
from bellows.bus.observers import BusObserver, NullObserver
from bellows.bus.settings import NatsSettings
from bellows.bus.streams import ensure_streams
from bellows.bus.subjects import event_subject

__all__ = ["MSG_ID_HEADER", "EventPublisher", "Published", "publish_events"]

MSG_ID_HEADER = "Nats-Msg-Id"

_log = structlog.get_logger("bellows.bus")


@dataclass(frozen=True)
class Published:
    """The stream's answer: where the event was stored, or that it was a repeat."""

    subject: str
    msg_id: str
    sequence: int
    duplicate: bool


class EventPublisher:
    """Publishes events on their subjects and waits for the stream to store them.

    ``stream`` makes the server refuse a subject that is not captured by that stream
    (a mis-set prefix fails loudly instead of publishing into the void).
    """

    def __init__(
        self,
        js: JetStreamContext,
        *,
        prefix: str,
        stream: str,
        timeout_s: float = 5.0,
        observer: BusObserver | None = None,
    ) -> None:
        self._js = js
        self._prefix = prefix
        self._stream = stream
        self._timeout_s = timeout_s
        self._observer: BusObserver = observer or NullObserver()

    async def publish(self, event: Event) -> Published:
        """Store ``event`` once; a second call with the same fact reports ``duplicate``."""
        subject = event_subject(self._prefix, event)
        msg_id = message_id(event)
        ack = await self._js.publish(
            subject,
            encode(event),
            timeout=self._timeout_s,
            stream=self._stream,
            headers={MSG_ID_HEADER: msg_id},
        )
        duplicate = bool(ack.duplicate)
        self._observer.published(event.type, duplicate=duplicate)
        _log.debug(
            "event.published",
            subject=subject,
            msg_id=msg_id,
            sequence=ack.seq,
            duplicate=duplicate,
        )
        return Published(subject, msg_id, ack.seq, duplicate)


async def publish_events(
    settings: NatsSettings, events: Sequence[Event], *, observer: BusObserver | None = None
) -> list[Published]:
    """Connect, make sure the streams exist, publish ``events`` in order, disconnect.

    For producers outside the bridge (a Kubeflow pipeline step that creates a job and
    announces it): the message ids make their events and the bridge's the same facts.
    """
    client = await connect(settings)
    try:
        js = client.jetstream()
        await ensure_streams(js, settings)
        publisher = EventPublisher(
            js, prefix=settings.subject_prefix, stream=settings.stream, observer=observer
        )
        return [await publisher.publish(event) for event in events]
    finally:
        await client.drain()
