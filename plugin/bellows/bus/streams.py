"""Provisioning: the events stream, the dead-letter stream, the durable consumer, the KV bucket.

Idempotent: each call creates what is missing and updates what differs, so every process
(bridge, controller, pipeline helper) may call it at start and the order does not matter.
An existing stream keeps whatever Bellows does not set (replicas, placement, an admin's
own tuning); only the fields below are brought in line, and an up-to-date stream is not
written at all, so a NATS user allowed only to read stream info can start too.

Every stream is bounded (age, bytes, messages, message size), so that a flood of events
fills at most what the configuration allows, never the server's disk.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Final

import structlog
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
    SubjectTransform,
)
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from bellows.bus.codec import MAX_EVENT_BYTES
from bellows.bus.progress import MAX_PROGRESS_BYTES, PROGRESS_PARTITIONS, progress_wildcard
from bellows.bus.settings import NatsSettings
from bellows.bus.subjects import dead_letter_wildcard, events_wildcard, namespace_filter

__all__ = [
    "DEAD_LETTER_MAX_MSG_BYTES",
    "KV_MAX_BYTES",
    "KV_MAX_VALUE_BYTES",
    "LEARNED_MAX_BYTES",
    "LEARNED_MAX_VALUE_BYTES",
    "PROGRESS_MAX_AGE_S",
    "PROGRESS_MAX_BYTES",
    "PROGRESS_PER_JOB",
    "PROGRESS_PER_NAMESPACE",
    "PROGRESS_PER_PARTITION",
    "consumer_config",
    "dead_letter_stream_config",
    "ensure_consumer",
    "ensure_kv",
    "ensure_learned_kv",
    "ensure_progress_stream",
    "ensure_streams",
    "events_stream_config",
    "progress_stream_config",
    "progress_stream_name",
    "stream_differences",
]

_log = structlog.get_logger("bellows.bus")

# A dead letter is the refused event (at most MAX_EVENT_BYTES, what the events stream takes)
# plus the headers that say why (the reason is cut at 1 KiB).
DEAD_LETTER_MAX_MSG_BYTES: Final = MAX_EVENT_BYTES + 16 * 1024
# The bridge keeps one short resourceVersion per watch: a few keys of a few bytes.
KV_MAX_BYTES: Final = 16 << 20
KV_MAX_VALUE_BYTES: Final = 1024
# The controller keeps one record of a few KiB per job it learned of (at most 256 KiB each);
# the chart counts these bytes in the bundled server's file store (_helpers.tpl).
LEARNED_MAX_BYTES: Final = 64 << 20
LEARNED_MAX_VALUE_BYTES: Final = 256 * 1024


def events_stream_config(settings: NatsSettings) -> StreamConfig:
    """The events stream: file-backed, bounded, repeats dropped by message id."""
    return StreamConfig(
        name=settings.stream,
        description="Bellows job arrival and completion events",
        subjects=[events_wildcard(settings.subject_prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=settings.max_age_s,
        max_bytes=settings.max_bytes,
        max_msgs=settings.max_messages,
        # The decoder refuses anything larger; the server need not store it first.
        max_msg_size=MAX_EVENT_BYTES,
        # Past a limit the oldest events go (long consumed in normal operation; a controller
        # that was down that long rebuilds its state from the API anyway), and publishing
        # never stops.
        discard=DiscardPolicy.OLD,
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
        max_bytes=settings.dead_letter_max_bytes,
        max_msgs=settings.dead_letter_max_messages,
        max_msg_size=DEAD_LETTER_MAX_MSG_BYTES,
        discard=DiscardPolicy.OLD,
        # Dead-lettering the same delivery twice (a crash between publish and ack) is
        # dropped by message id, like the events themselves.
        duplicate_window=settings.duplicate_window_s,
    )


PROGRESS_MAX_AGE_S: Final = 3600.0
PROGRESS_PER_PARTITION: Final = 8  # newest reports kept per namespace partition
PROGRESS_PER_JOB: Final = PROGRESS_PER_PARTITION  # a job alone in its partition keeps as many
PROGRESS_PER_NAMESPACE: Final = PROGRESS_PARTITIONS * PROGRESS_PER_PARTITION  # 256 reports
PROGRESS_MAX_BYTES: Final = 16 << 20  # in memory: 16 namespaces full of 4 KiB reports


def progress_stream_name(settings: NatsSettings) -> str:
    """``<stream>_PROGRESS``: the progress stream beside the events stream."""
    return f"{settings.stream}_PROGRESS"


def progress_stream_config(settings: NatsSettings) -> StreamConfig:
    """The progress stream: in memory, an hour deep, the newest reports of each namespace.

    Progress reports are hints superseded by the next one, so a lost one costs little. The
    stream maps each subject ``<namespace>.<job>`` to ``<namespace>.<partition>``
    (:data:`PROGRESS_PARTITIONS` by NATS' ``partition`` of the job) and keeps
    :data:`PROGRESS_PER_PARTITION` reports per subject: one namespace, under any number of
    made-up job names, holds at most :data:`PROGRESS_PER_NAMESPACE` reports (1 MiB), and
    can push out only its own. :data:`PROGRESS_MAX_BYTES` holds 16 namespaces at that worst.
    """
    return StreamConfig(
        name=progress_stream_name(settings),
        description="Bellows progress reports of running training jobs",
        subjects=[progress_wildcard(settings.subject_prefix)],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY,
        max_age=PROGRESS_MAX_AGE_S,
        max_bytes=PROGRESS_MAX_BYTES,
        max_msgs_per_subject=PROGRESS_PER_PARTITION,
        subject_transform=SubjectTransform(
            src=progress_wildcard(settings.subject_prefix),
            dest=f"{settings.subject_prefix}.progress.v1.{{{{wildcard(1)}}}}."
            f"{{{{partition({PROGRESS_PARTITIONS},2)}}}}",
        ),
        max_msg_size=MAX_PROGRESS_BYTES,
        discard=DiscardPolicy.OLD,
    )


async def ensure_progress_stream(js: JetStreamContext, settings: NatsSettings) -> None:
    """Create or update the progress stream (what a controller learning online calls)."""
    await _ensure_stream(js, progress_stream_config(settings))


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


def _same(have: Any, want: Any) -> bool:
    if isinstance(have, float | int) and isinstance(want, float | int):
        # durations travel as nanoseconds and come back as float seconds
        return math.isclose(have, want, rel_tol=1e-9, abs_tol=1e-6)
    return bool(have == want)


def stream_differences(existing: StreamConfig, desired: StreamConfig) -> list[str]:
    """The fields Bellows sets (those not ``None`` in ``desired``) that ``existing`` lacks."""
    return [
        f.name
        for f in dataclasses.fields(desired)
        if (want := getattr(desired, f.name)) is not None
        and not _same(getattr(existing, f.name), want)
    ]


async def _ensure_stream(js: JetStreamContext, config: StreamConfig) -> None:
    assert config.name is not None
    try:
        info = await js.stream_info(config.name)
    except NotFoundError:
        await js.add_stream(config)
        _log.info("stream.created", stream=config.name)
        return
    changed = stream_differences(info.config, config)
    if changed:
        # What Bellows does not set (replicas, placement...) stays as the admin left it.
        wanted = {name: getattr(config, name) for name in changed}
        await js.update_stream(dataclasses.replace(info.config, **wanted))
        _log.info("stream.updated", stream=config.name, fields=changed)


async def ensure_streams(js: JetStreamContext, settings: NatsSettings) -> None:
    """Create or update the events and dead-letter streams (with their limits)."""
    await _ensure_stream(js, events_stream_config(settings))
    await _ensure_stream(js, dead_letter_stream_config(settings))


async def ensure_consumer(
    js: JetStreamContext, settings: NatsSettings, namespaces: tuple[str, ...] = ()
) -> None:
    """Create or update the durable consumer (its position survives restarts)."""
    await js.add_consumer(settings.stream, consumer_config(settings, namespaces))


async def ensure_kv(js: JetStreamContext, settings: NatsSettings) -> KeyValue:
    """The bridge's key-value bucket (created if missing, bounded), one revision per key."""
    description = "Bellows bridge: last resourceVersion seen per watch"
    return await _bucket(js, settings.kv_bucket, description, KV_MAX_BYTES, KV_MAX_VALUE_BYTES)


async def ensure_learned_kv(js: JetStreamContext, settings: NatsSettings) -> KeyValue:
    """The controller's key-value bucket of learned state (created if missing, bounded),
    one revision per job (:mod:`bellows.service.memory`)."""
    description = "Bellows controller: what it learned of each job, for the next leader"
    name = settings.learned_bucket
    return await _bucket(js, name, description, LEARNED_MAX_BYTES, LEARNED_MAX_VALUE_BYTES)


async def _bucket(
    js: JetStreamContext, name: str, description: str, max_bytes: int, max_value: int
) -> KeyValue:
    """Bucket ``name``, created file-backed with one revision per key if missing."""
    try:
        return await js.key_value(name)
    except NotFoundError:
        return await js.create_key_value(
            bucket=name,
            description=description,
            history=1,
            max_bytes=max_bytes,
            max_value_size=max_value,
            storage=StorageType.FILE,
        )
