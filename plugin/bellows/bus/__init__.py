"""The event bus: job arrival/completion events on NATS JetStream.

Pure parts (no I/O): :mod:`~bellows.bus.events` (the facts), :mod:`~bellows.bus.codec`
(versioned JSON), :mod:`~bellows.bus.subjects` (subject layout), :mod:`~bellows.bus.batching`
(each new fact once, per fetch). I/O parts: :mod:`~bellows.bus.publishing`,
:mod:`~bellows.bus.consuming`, :mod:`~bellows.bus.pumping` (consume → apply → ack),
:mod:`~bellows.bus.bridging` (watch → publish, with a resume point),
:mod:`~bellows.bus.streams` (provisioning) and :mod:`~bellows.bus.server` (a local
``nats-server``). Layout and schema: ``docs/events.md``.
"""

from typing import TYPE_CHECKING

from bellows.lazy import lazy_names

if TYPE_CHECKING:
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
        Outcome,
        event_key,
    )
    from bellows.bus.observers import BusObserver, NullObserver
    from bellows.bus.publishing import EventPublisher, Published, publish_events
    from bellows.bus.pumping import Apply, EventPump, PartlyAppliedError, Settled
    from bellows.bus.settings import NatsSettings, Secret, TlsSettings
    from bellows.bus.streams import ensure_consumer, ensure_kv, ensure_streams
    from bellows.refs import JobKind, JobRef

# each name imported from its module when first used (bellows.lazy)
__getattr__ = lazy_names(
    __name__,
    {
        "Batch": "bellows.bus.batching",
        "Batcher": "bellows.bus.batching",
        "Offered": "bellows.bus.batching",
        "Bookmark": "bellows.bus.bridging",
        "Bridge": "bellows.bus.bridging",
        "JobObserved": "bellows.bus.bridging",
        "KvResumeStore": "bellows.bus.bridging",
        "Observation": "bellows.bus.bridging",
        "ResumeStore": "bellows.bus.bridging",
        "WatchSource": "bellows.bus.bridging",
        "events_for": "bellows.bus.bridging",
        "watch_key": "bellows.bus.bridging",
        "SCHEMA_VERSION": "bellows.bus.codec",
        "EventError": "bellows.bus.codec",
        "decode": "bellows.bus.codec",
        "encode": "bellows.bus.codec",
        "message_id": "bellows.bus.codec",
        "connect": "bellows.bus.connection",
        "Delivery": "bellows.bus.consuming",
        "EventConsumer": "bellows.bus.consuming",
        "Event": "bellows.bus.events",
        "EventKey": "bellows.bus.events",
        "EventType": "bellows.bus.events",
        "JobArrived": "bellows.bus.events",
        "JobCompleted": "bellows.bus.events",
        "JobKind": "bellows.refs",
        "JobRef": "bellows.refs",
        "Outcome": "bellows.bus.events",
        "event_key": "bellows.bus.events",
        "BusObserver": "bellows.bus.observers",
        "NullObserver": "bellows.bus.observers",
        "EventPublisher": "bellows.bus.publishing",
        "Published": "bellows.bus.publishing",
        "publish_events": "bellows.bus.publishing",
        "Apply": "bellows.bus.pumping",
        "EventPump": "bellows.bus.pumping",
        "PartlyAppliedError": "bellows.bus.pumping",
        "Settled": "bellows.bus.pumping",
        "NatsSettings": "bellows.bus.settings",
        "Secret": "bellows.bus.settings",
        "TlsSettings": "bellows.bus.settings",
        "ensure_consumer": "bellows.bus.streams",
        "ensure_kv": "bellows.bus.streams",
        "ensure_streams": "bellows.bus.streams",
    },
)

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
    "Settled",
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
