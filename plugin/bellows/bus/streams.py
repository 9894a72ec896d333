"""Provisioning: the events stream, the dead-letter stream, the durable consumer, the KV bucket.

Idempotent: each call creates what is missing and updates what differs, so every process
(bridge, controller, pipeline helper) may call it at start and the order does not matter.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from bellows.bus.settings import NatsSettings
from bellows.bus.subjects import dead_letter_wildcard, events_wildcard, namespace_filter

__all__ = [
    "consumer_config",
    "dead_letter_stream_config",
    "ensure_consumer",
    "ensure_kv",
    "ensure_streams",
    "events_stream_config",
]


def events_stream_config(settings: NatsSettings) -> StreamConfig:
    """The events stream: file-backed, kept ``max_age_s``, repeats dropped by message id."""
    return StreamConfig(
        name=settings.stream,
        description="Bellows job arrival and completion events",
        subjects=[events_wildcard(settings.subject_prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=settings.max_age_s,
        duplicate_window=settings.duplicate_window_s,
    )


def dead_letter_stream_config(settings: NatsSettings) -> StreamConfig:
    """The dead-letter stream: refused messages with their reason, for people to read."""
    return StreamConfig(
        name=settings.dead_letter_stream,
        description="Bellows events the controller refused, with the reason in headers",
        subjects=[dead_letter_wildcard(settings.subject_prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=settings.max_age_s,
        # Dead-lettering the same delivery twice (a crash between publish and ack) is
        # dropped by message id, like the events themselves.
        duplicate_window=settings.duplicate_window_s,
    )


def consumer_config(settings: NatsSettings, namespaces: tuple[str, ...] = ()) -> ConsumerConfig:
    """The controller's durable pull consumer (explicit acks, bounded redelivery).

    ``namespaces`` narrows the consumer to those namespaces' events (empty: all).
    """
    filters = [namespace_filter(settings.subject_prefix, ns) for ns in namespaces]
    return ConsumerConfig(
        durable_name=settings.durable,
        name=settings.durable,
        description="Bellows controller",
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        max_ack_pending=settings.max_ack_pending,
        filter_subject=None if filters else events_wildcard(settings.subject_prefix),
        filter_subjects=filters or None,
    )


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
    else:
        await js.update_stream(config)


async def ensure_streams(js: JetStreamContext, settings: NatsSettings) -> None:
    """Create or update the events and dead-letter streams."""
    await _ensure_stream(js, events_stream_config(settings))
    await _ensure_stream(js, dead_letter_stream_config(settings))


async def ensure_consumer(
    js: JetStreamContext, settings: NatsSettings, namespaces: tuple[str, ...] = ()
) -> None:
    """Create or update the durable consumer (its position survives restarts)."""
    await js.add_consumer(settings.stream, consumer_config(settings, namespaces))


async def ensure_kv(js: JetStreamContext, settings: NatsSettings) -> KeyValue:
    """The bridge's key-value bucket (created if missing), one revision kept per key."""
    try:
        return await js.key_value(settings.kv_bucket)
    except NotFoundError:
        return await js.create_key_value(
            bucket=settings.kv_bucket,
            description="Bellows bridge: last resourceVersion seen per watch",
            history=1,
        )
