"""Consumer throughput of the bus against a real nats-server (target: >= 5,000 events/s).

Starts nats-server (JetStream, temporary store), publishes N distinct arrival events with
their message ids, then consumes all of them R times, each time through a fresh durable
consumer, in three ways, and prints the median rate of each beside the target:

* ``fetch+decode+ack``: :class:`EventConsumer` alone, acking each delivery;
* ``pump``: :class:`EventPump`, every fetch one batch, acked when ``apply`` returns;
* ``pump, acks held``: the same, each batch's acks held until 0.25 s after its ``apply``
  (as while a round is due on the core's clock).

Usage: python benchmarks/bus_throughput.py [--events 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from datetime import UTC, datetime

from bellows.bus import (
    Batcher,
    EventConsumer,
    EventPump,
    JobArrived,
    JobKind,
    JobRef,
    NatsSettings,
    connect,
    encode,
    ensure_streams,
    message_id,
)
from bellows.bus.publishing import MSG_ID_HEADER
from bellows.bus.server import running_nats_server
from bellows.bus.subjects import event_subject
from bellows.service.config import LogFormat, LoggingSettings, LogLevel
from bellows.service.logging import configure_logging

TARGET = 5_000.0


def make_events(n: int) -> list[JobArrived]:
    t0 = datetime.now(UTC)
    return [
        JobArrived(JobRef(JobKind.PYTORCHJOB, f"team-{i % 7}", f"job-{i}", f"uid-{i}"), t0, str(i))
        for i in range(n)
    ]


async def publish_all(js, settings: NatsSettings, events) -> float:
    start = time.perf_counter()
    futures = []
    for event in events:
        futures.append(
            await js.publish_async(
                event_subject(settings.subject_prefix, event),
                encode(event),
                headers={MSG_ID_HEADER: message_id(event)},
            )
        )
    await asyncio.gather(*futures)
    return len(events) / (time.perf_counter() - start)


async def consume_plain(js, settings: NatsSettings, n: int) -> float:
    consumer = await EventConsumer.open(js, settings)
    start = time.perf_counter()
    got = 0
    while got < n:
        for delivery in await consumer.fetch(timeout_s=1.0):
            await delivery.ack()
            got += 1
    rate = n / (time.perf_counter() - start)
    await consumer.close()
    return rate


async def consume_pumped(js, settings: NatsSettings, n: int, held_s: float) -> float:
    consumer = await EventConsumer.open(js, settings)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    applied = 0

    async def apply(events):
        nonlocal applied
        applied += len(events)
        if not held_s:
            if applied >= n:
                done.set()
            return None
        due = loop.time() + held_s
        return lambda: loop.time() >= due

    pump = EventPump(
        consumer,
        Batcher(),
        apply,
        clock=loop.time,
        max_deliver=settings.max_deliver,
        ack_wait_s=settings.ack_wait_s,
        poll_s=0.05,
    )
    start = time.perf_counter()
    task = asyncio.create_task(pump.run(done))
    if held_s:  # until every batch's acks went out
        while applied < n or pump.awaiting:
            await asyncio.sleep(0.01)
        done.set()
    await task
    rate = n / (time.perf_counter() - start)
    await consumer.close()
    return rate


async def main(n: int, repeats: int) -> None:
    configure_logging(LoggingSettings(format=LogFormat.CONSOLE, level=LogLevel.WARNING))
    async with running_nats_server() as server:
        base = NatsSettings(servers=(server.url,), fetch_batch=512, max_ack_pending=n + 1)
        client = await connect(base)
        js = client.jetstream()
        await ensure_streams(js, base)
        publish_rate = await publish_all(js, base, make_events(n))
        results: dict[str, list[float]] = {
            "fetch+decode+ack": [],
            "pump": [],
            "pump, acks held": [],
        }
        for r in range(repeats):
            for i, (label, run) in enumerate(
                (
                    ("fetch+decode+ack", lambda s: consume_plain(js, s, n)),
                    ("pump", lambda s: consume_pumped(js, s, n, 0.0)),
                    ("pump, acks held", lambda s: consume_pumped(js, s, n, 0.25)),
                )
            ):
                # A fresh durable consumer each time: every run reads all n events.
                settings = dataclasses.replace(base, durable=f"bench-{i}-{r}")
                results[label].append(await run(settings))
        await client.close()
    print(f"nats-server at {server.url}; {n} events, {repeats} repeats (medians)")
    print(f"{'publish (async, msg ids)':<28} {publish_rate:>10,.0f} events/s")
    for label, rates in results.items():
        median = statistics.median(rates)
        print(
            f"{'consume ' + label:<28} {median:>10,.0f} events/s   "
            f"target {TARGET:,.0f}   ratio {median / TARGET:.1f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.events, args.repeats))
