"""The event bus: job arrival/completion events on NATS JetStream.

Pure parts (no I/O): :mod:`~bellows.bus.events` (the facts), :mod:`~bellows.bus.codec`
(versioned JSON), :mod:`~bellows.bus.subjects` (subject layout), :mod:`~bellows.bus.batching`
(the Δ-window batcher). I/O parts: :mod:`~bellows.bus.publishing`,
:mod:`~bellows.bus.consuming`, :mod:`~bellows.bus.pumping` (consume → apply → ack),
:mod:`~bellows.bus.bridging` (watch → publish, with a resume point),
:mod:`~bellows.bus.streams` (provisioning) and :mod:`~bellows.bus.server` (a local
``nats-server``). Layout and schema: ``docs/events.md``.
"""

from bellows.bus.batching import Batch, Batcher, Offered
from bellows.bus.bridging import (
    Bookmark,
    Bridge,
    JobObserved,
    KvResumeStore,
    Observation,
    ResumeStore,
    WatchSource,
    events_for,
    watch_key,
)
from bellows.bus.codec import SCHEMA_VERSION, EventError, decode, encode, message_id
from bellows.bus.connection import connect
from bellows.bus.consuming import Delivery, EventConsumer
from bellows.bus.events import (
    Event,
    EventKey,
    EventType,
    JobArrived,
    JobCompleted,
    JobKind,
    JobRef,
    Outcome,
    event_key,
)
from bellows.bus.observers import BusObserver, NullObserver
from bellows.bus.publishing import EventPublisher, Published, publish_events
from bellows.bus.pumping import Apply, EventPump, PartlyAppliedError
from bellows.bus.settings import NatsSettings, Secret, TlsSettings
from bellows.bus.streams import ensure_consumer, ensure_kv, ensure_streams

__all__ = [
    "SCHEMA_VERSION",
    "Apply",
    "Batch",
    "Batcher",
    "Bookmark",
    "Bridge",
    "BusObserver",
    "Delivery",
    "Event",
    "EventConsumer",
    "EventError",
    "EventKey",
    "EventPublisher",
    "EventPump",
    "EventType",
    "JobArrived",
    "JobCompleted",
    "JobKind",
    "JobObserved",
    "JobRef",
    "KvResumeStore",
    "NatsSettings",
    "NullObserver",
    "Observation",
    "Offered",
    "Outcome",
    "PartlyAppliedError",
    "Published",
    "ResumeStore",
    "Secret",
    "TlsSettings",
    "WatchSource",
    "connect",
    "decode",
    "encode",
    "ensure_consumer",
    "ensure_kv",
    "ensure_streams",
    "event_key",
    "events_for",
    "message_id",
    "publish_events",
    "watch_key",
]
