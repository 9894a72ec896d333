"""Publish and consume through a real nats-server: dedupe, dead letters, redelivery, restarts."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.js.api import ConsumerConfig

from bellows.bus import EventConsumer, EventPublisher, JobArrived, JobRef, connect
from bellows.bus.codec import encode
from bellows.bus.consuming import CODE_HEADER, REASON_HEADER, SUBJECT_HEADER, Delivery
from bellows.bus.subjects import dead_letter_wildcard

from .conftest import arrived, completed


async def collect(consumer: EventConsumer, count: int, *, within_s: float = 10.0):
    """Fetch until ``count`` deliveries came (a bounded wait on a condition, not a sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    got: list[Delivery] = []
    while len(got) < count and loop.time() < deadline:
        got += await consumer.fetch(timeout_s=max(0.05, min(1.0, deadline - loop.time())))
    return got


async def dead_letters(js, settings, count: int):
    sub = await js.pull_subscribe(
        dead_letter_wildcard(settings.subject_prefix),
        stream=settings.dead_letter_stream,
        config=ConsumerConfig(),
    )
    msgs = await sub.fetch(count, timeout=5)
    await sub.unsubscribe()
    return msgs


def publisher_for(client, settings) -> EventPublisher:
    return EventPublisher(
        client.jetstream(), prefix=settings.subject_prefix, stream=settings.stream
    )


async def test_round_trip_delivers_events_in_order(client, settings):
    publisher = publisher_for(client, settings)
    sent = [arrived("a"), arrived("b.c"), completed("a")]
    for event in sent:
        result = await publisher.publish(event)
        assert not result.duplicate
    consumer = await EventConsumer.open(client.jetstream(), settings)
    got = await collect(consumer, 3)
    assert [d.event for d in got] == sent
    assert got[1].subject == "bellows.events.v1.team-a.pytorchjob.b_c.arrived"
    assert [d.num_delivered for d in got] == [1, 1, 1]
    for delivery in got:
        await delivery.ack()
    assert await consumer.fetch(timeout_s=0.2) == []
    await consumer.close()


async def test_a_repeated_message_id_within_the_window_is_dropped_by_the_server(client, settings):
    publisher = publisher_for(client, settings)
    first = await publisher.publish(arrived("a", resource_version="5"))
    again = await publisher.publish(arrived("a", source="pipeline/run-1"))
    assert not first.duplicate
    assert again.duplicate
    assert again.sequence == first.sequence
    info = await client.jetstream().stream_info(settings.stream)
    assert info.state.messages == 1


async def test_bad_messages_are_dead_lettered_with_the_reason_and_the_loop_goes_on(
    client, settings
):
    js = client.jetstream()
    base = "bellows.events.v1.team-a.pytorchjob.x"
    await js.publish(f"{base}.arrived", b"{nope")
    await js.publish(f"{base}.paused", b'{"version": 1, "type": "job.paused"}')
    await js.publish("bellows.events.v2.team-a.pytorchjob.x.arrived", b'{"version": 2}')
    await publisher_for(client, settings).publish(arrived("after"))
    consumer = await EventConsumer.open(js, settings)
    got = await collect(consumer, 1)
    assert [d.event.job.name for d in got] == ["after"]
    await got[0].ack()

    letters = await dead_letters(js, settings, 3)
    codes = [m.headers[CODE_HEADER] for m in letters]
    assert codes == ["malformed_json", "unknown_type", "unknown_version"]
    assert [m.subject for m in letters] == [
        "bellows.deadletter.malformed_json",
        "bellows.deadletter.unknown_type",
        "bellows.deadletter.unknown_version",
    ]
    assert "type='job.paused'" in letters[1].headers[REASON_HEADER]
    assert letters[2].headers[SUBJECT_HEADER].startswith("bellows.events.v2.")
    assert letters[0].data == b"{nope"
    # The refused messages were acked: nothing comes back.
    assert await consumer.fetch(timeout_s=1.2) == []
    assert await consumer.pending() == 0


async def test_unacked_events_are_redelivered_to_a_restarted_consumer(settings, client):
    publisher = publisher_for(client, settings)
    await publisher.publish(arrived("a"))
    await publisher.publish(arrived("b"))

    first_client = await connect(settings)
    first = await EventConsumer.open(first_client.jetstream(), settings)
    taken = await collect(first, 2)
    assert [d.num_delivered for d in taken] == [1, 1]
    await first_client.close()  # crash: nothing acked

    second = await EventConsumer.open(client.jetstream(), settings)
    again = await collect(second, 2)  # after ack_wait (1 s in these tests)
    # each delivery's ack_wait runs on its own, so redeliveries may come in any order
    assert sorted(d.stream_sequence for d in again) == sorted(d.stream_sequence for d in taken)
    assert [d.num_delivered for d in again] == [2, 2]


async def test_a_server_restart_keeps_the_stream_and_the_durable_consumer(
    nats_server, settings, client
):
    publisher = publisher_for(client, settings)
    await publisher.publish(arrived("a"))
    await publisher.publish(arrived("b"))
    consumer = await EventConsumer.open(client.jetstream(), settings)
    got = await collect(consumer, 1)
    await got[0].msg.ack_sync()

    await nats_server.restart()

    js = client.jetstream()  # the same client reconnects by itself
    deadline = asyncio.get_running_loop().time() + 10
    while not client.is_connected and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    info = await js.stream_info(settings.stream)
    assert info.state.messages == 2
    durable = await js.consumer_info(settings.stream, settings.durable)
    assert durable.config.ack_wait == settings.ack_wait_s
    reopened = await EventConsumer.open(js, settings)
    rest = await collect(reopened, 1)
    # "a" was acked before the restart; "b" (fetched but not acked) comes again.
    assert [d.event.job.name for d in rest] == ["b"]
    await rest[0].msg.ack_sync()
    assert await reopened.fetch(timeout_s=1.5) == []  # longer than ack_wait
    # Publishing after the restart still dedupes against what was stored before it.
    assert (await publisher.publish(arrived("a"))).duplicate


async def test_an_event_whose_subject_names_another_job_is_dead_lettered(client, settings):
    """A payload for team-b on a team-a subject would pass a filter meant to keep it out."""
    js = client.jetstream()
    real = arrived("x")
    forged = JobArrived(JobRef(real.job.kind, "team-b", "x", "uid-x"), real.time)
    await js.publish("bellows.events.v1.team-a.pytorchjob.x.arrived", encode(forged))
    # the right namespace, but another name, kind, event type or version
    await js.publish("bellows.events.v1.team-a.pytorchjob.y.arrived", encode(arrived("x")))
    await js.publish("bellows.events.v1.team-a.mpijob.x.arrived", encode(arrived("x", uid="u2")))
    await js.publish("bellows.events.v1.team-a.pytorchjob.x.completed", encode(arrived("x", "u3")))
    await js.publish("bellows.events.v2.team-a.pytorchjob.x.arrived", encode(arrived("x", "u4")))
    await publisher_for(client, settings).publish(arrived("after"))
    consumer = await EventConsumer.open(js, settings)
    got = await collect(consumer, 1)
    assert [d.event.job.name for d in got] == ["after"]
    await got[0].ack()

    letters = await dead_letters(js, settings, 5)
    assert [m.headers[CODE_HEADER] for m in letters] == ["invalid_event"] * 5
    reasons = [m.headers[REASON_HEADER] for m in letters]
    assert reasons[0] == (
        "subject and payload name different jobs: "
        "namespace 'team-a' in the subject but 'team-b' in the payload"
    )
    assert "name 'y' in the subject but 'x' in the payload" in reasons[1]
    assert "kind 'mpijob' in the subject but 'pytorchjob' in the payload" in reasons[2]
    assert "event 'completed' in the subject but 'arrived' in the payload" in reasons[3]
    assert "version 'v2' in the subject but 'v1' in the payload" in reasons[4]
    assert letters[0].headers[SUBJECT_HEADER] == "bellows.events.v1.team-a.pytorchjob.x.arrived"
    assert await consumer.fetch(timeout_s=1.2) == []
    assert await consumer.pending() == 0


async def test_opening_rides_out_a_server_restart(client, settings, nats_server):
    """The consumer is opened while the server is down: the open waits for it, as a
    controller that took its lead during a nats-server restart must (it died of the timeout
    before)."""
    await nats_server.stop(graceful=False)

    async def back() -> None:
        await asyncio.sleep(1.5)
        await nats_server.start()

    restarting = asyncio.create_task(back())
    consumer = await EventConsumer.open(client.jetstream(), settings, retry_s=60.0)
    await restarting
    publisher = publisher_for(client, settings)
    await publisher.publish(arrived("after-restart"))
    got = await collect(consumer, 1)
    assert [d.event.job.name for d in got] == ["after-restart"]


async def test_opening_gives_up_after_its_retry_time(client, settings, nats_server):
    await nats_server.stop(graceful=False)
    try:
        with pytest.raises(nats.errors.Error):
            await EventConsumer.open(client.jetstream(), settings, retry_s=0.0)
    finally:
        await nats_server.start()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20.0
        while not client.is_connected:  # reconnected before the fixture closes it
            assert loop.time() < deadline, "the client did not reconnect"
            await asyncio.sleep(0.05)
