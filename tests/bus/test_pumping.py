"""The consume loop: apply each fetch, ack only after apply (or after the round it waits
for), hand back on failure."""

from __future__ import annotations

import asyncio
import time

from bellows.bus import Batcher, EventConsumer, EventPublisher, EventPump
from bellows.bus.consuming import CODE_HEADER, REASON_HEADER

from .conftest import arrived, completed, with_changes
from .test_consuming import dead_letters


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def publish(client, settings, *events):
    publisher = EventPublisher(
        client.jetstream(), prefix=settings.subject_prefix, stream=settings.stream
    )
    for event in events:
        await publisher.publish(event)


async def pump_for(client, settings, apply, *, clock, **kw):
    consumer = await EventConsumer.open(client.jetstream(), settings)
    batcher = Batcher()
    pump = EventPump(
        consumer,
        batcher,
        apply,
        clock=clock,
        max_deliver=settings.max_deliver,
        ack_wait_s=settings.ack_wait_s,
        poll_s=0.2,
        nak_delay_s=0.01,
        **kw,
    )
    return consumer, pump


async def ack_pending(client, settings) -> int:
    info = await client.jetstream().consumer_info(settings.stream, settings.durable)
    return int(info.num_ack_pending)


async def all_acked(client, settings, *, within_s: float = 10.0) -> bool:
    """True once the server has processed every ack: it does so after the client's flush,
    on its own schedule, so a loaded machine may show a short lag."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while await ack_pending(client, settings) != 0:
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_events_are_acked_only_after_their_fetch_is_applied(client, settings):
    clock = FakeClock()
    applied: list[tuple[str, ...]] = []
    pending_during_apply: list[int] = []

    async def apply(events):
        pending_during_apply.append(await ack_pending(client, settings))
        applied.append(tuple(f"{e.job.name}:{e.type.value}" for e in events))

    await publish(client, settings, arrived("a"), arrived("b"), completed("a"))
    _, pump = await pump_for(client, settings, apply, clock=clock)
    beats = []
    pump._heartbeat = lambda: beats.append(clock())
    await pump.cycle()
    assert applied == [("a:job.arrived", "b:job.arrived", "a:job.completed")]
    assert pending_during_apply == [3]
    await client.flush()
    assert await all_acked(client, settings)
    assert beats == [0.0]


async def test_deliveries_wait_for_the_round_apply_says_their_facts_wait_for(client, settings):
    # the core has a round due (the paper's Δ, say): the acks wait until it has run
    clock = FakeClock()
    rounds = {"run": 0}
    applied: list[int] = []

    async def apply(events):
        applied.append(len(events))
        mark = rounds["run"]
        return lambda: rounds["run"] > mark

    await publish(client, settings, arrived("a"), completed("b"))
    _, pump = await pump_for(client, settings, apply, clock=clock)
    await pump.cycle()
    assert applied == [2]
    await client.flush()
    assert not await all_acked(client, settings, within_s=0.5)
    assert (await ack_pending(client, settings), pump.awaiting) == (2, 2)
    await pump.cycle()  # the round has not run: still held
    assert pump.awaiting == 2
    rounds["run"] += 1
    await pump.cycle()
    assert pump.awaiting == 0
    await client.flush()
    assert await all_acked(client, settings)
    # a repeat of a fact applied meanwhile is acked at once, not applied again
    await publish(client, settings, arrived("a", source="pipeline/again"))
    await pump.cycle()
    assert applied == [2]


async def test_a_failed_apply_is_redelivered_and_applied_once_it_succeeds(client, settings):
    clock = FakeClock()
    calls: list[str] = []

    async def apply(events):
        calls.append(events[0].job.name)
        if len(calls) == 1:
            raise RuntimeError("api server unavailable")

    await publish(client, settings, arrived("a"))
    _, pump = await pump_for(client, settings, apply, clock=clock)
    deadline = time.monotonic() + 15.0  # the redelivery comes after nak_delay_s, ~0.01 s
    while len(calls) < 2 and time.monotonic() < deadline:
        await pump.cycle()
    assert calls == ["a", "a"]
    await client.flush()
    assert await all_acked(client, settings)


async def test_an_event_that_keeps_failing_is_dead_lettered_after_max_deliver(client, settings):
    settings = with_changes(settings, max_deliver=2)
    clock = FakeClock()

    async def apply(events):
        raise ValueError(f"cannot place {events[0].job.name}")

    await publish(client, settings, arrived("doomed"))
    consumer, pump = await pump_for(client, settings, apply, clock=clock)
    for _ in range(20):
        await pump.cycle()
        if await consumer.pending() == 0 and await ack_pending(client, settings) == 0:
            break
    letters = await dead_letters(client.jetstream(), settings, 1)
    assert letters[0].headers[CODE_HEADER] == "apply_failed"
    assert letters[0].headers[REASON_HEADER] == "ValueError: cannot place doomed"


async def test_held_events_stay_un_redelivered_past_ack_wait(client, settings):
    # a round due 2.5 s after the apply, longer than ack_wait (1 s): in-progress acks keep
    # the deliveries alive until it has run
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    deliveries: list = []

    async def apply(events):
        seen.append(len(events))
        due = loop.time() + 2.5
        return lambda: loop.time() >= due

    await publish(client, settings, arrived("a"), arrived("b"))
    consumer, pump = await pump_for(client, settings, apply, clock=loop.time)
    original_fetch = consumer.fetch

    async def spying_fetch(**kw):
        got = await original_fetch(**kw)
        deliveries.extend(got)
        return got

    consumer.fetch = spying_fetch  # type: ignore[method-assign]
    deadline = loop.time() + 10
    await pump.cycle()
    while pump.awaiting and loop.time() < deadline:
        await pump.cycle()
    assert seen == [2]
    assert pump.awaiting == 0
    assert [d.num_delivered for d in deliveries] == [1, 1]
    await client.flush()
    assert await all_acked(client, settings)


async def test_stopping_hands_held_events_back_at_once(client, settings):
    clock = FakeClock()

    async def apply(events):
        return lambda: False  # the round they wait for never runs in this test

    await publish(client, settings, arrived("a"))
    _, pump = await pump_for(client, settings, apply, clock=clock)
    stop = asyncio.Event()
    task = asyncio.create_task(pump.run(stop))
    deadline = asyncio.get_running_loop().time() + 5
    while pump.awaiting == 0:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.02)
    stop.set()
    await asyncio.wait_for(task, 5)
    # Nak'ed, so a successor gets it long before ack_wait would have passed.
    successor = await EventConsumer.open(client.jetstream(), with_changes(settings))
    got = await successor.fetch(timeout_s=0.5)
    assert [d.num_delivered for d in got] == [2]


async def test_a_failing_settle_check_holds_its_acks_and_not_the_loop(client, settings):
    clock = FakeClock()
    applied: list[int] = []

    async def apply(events):
        applied.append(len(events))
        if len(applied) == 1:

            def broken() -> bool:
                raise RuntimeError("bug in a check")

            return broken
        return None

    _, pump = await pump_for(client, settings, apply, clock=clock)
    await publish(client, settings, completed("a"))
    await pump.cycle()
    await publish(client, settings, completed("b"))
    await pump.cycle()
    assert applied == [1, 1]
    assert pump.awaiting == 1  # the first still held; the second acked
