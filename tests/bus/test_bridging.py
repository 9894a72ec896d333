"""The bridge's publishing side with an injected watch source and a real KV resume point."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bellows.bus import (
    Bookmark,
    Bridge,
    EventConsumer,
    EventPublisher,
    JobKind,
    JobObserved,
    KvResumeStore,
    Outcome,
    ensure_kv,
    events_for,
    watch_key,
)

from .conftest import T0, arrived
from .test_consuming import collect


def seen(name: str, rv: int, *, finished: Outcome | None = None) -> JobObserved:
    return JobObserved(
        job=arrived(name).job,
        resource_version=str(rv),
        created=T0,
        finished=finished,
        finished_at=T0 + timedelta(minutes=30) if finished else None,
        spec={"bellows.dev/max-gpus": "4"},
    )


class ScriptedWatch:
    """A watch source that replays a script after the given resourceVersion."""

    def __init__(self, script) -> None:
        self.script = script
        self.started_from: list[str | None] = []

    async def __call__(self, resume_from):
        self.started_from.append(resume_from)
        after = int(resume_from or 0)
        for observation in self.script:
            if int(observation.resource_version) > after:
                yield observation


def test_a_job_first_seen_finished_yields_its_arrival_then_its_completion():
    events = events_for(seen("a", 7, finished=Outcome.FAILED), source="bridge")
    assert [e.type.value for e in events] == ["job.arrived", "job.completed"]
    assert events[1].time == T0 + timedelta(minutes=30)
    assert events[0].spec == {"bellows.dev/max-gpus": "4"}
    assert {e.resource_version for e in events} == {"7"}


async def test_the_bridge_publishes_once_and_resumes_after_the_last_version(client, settings):
    js = client.jetstream()
    store = KvResumeStore(await ensure_kv(js, settings))
    publisher = EventPublisher(js, prefix=settings.subject_prefix, stream=settings.stream)
    key = watch_key(JobKind.PYTORCHJOB, "team-a")
    script = [
        seen("a", 10),
        seen("a", 11),  # a MODIFIED event: the arrival is not published again
        seen("b", 12),
        Bookmark("13"),
        seen("a", 14, finished=Outcome.SUCCEEDED),
    ]
    first = ScriptedWatch(script)
    bridge = Bridge(publisher=publisher, store=store, source=first, key=key)
    await bridge.run(asyncio.Event())
    assert first.started_from == [None]
    assert await store.load(key) == "14"
    assert (await js.stream_info(settings.stream)).state.messages == 3

    # A restarted bridge (empty memory) starts from "14"; the watch expired and re-lists
    # everything: the repeats are dropped by message id, only the new completion is stored.
    relist = ScriptedWatch([*script, seen("b", 20, finished=Outcome.FAILED)])
    relisted = Bridge(publisher=publisher, store=store, source=lambda rv: relist(None), key=key)
    await relisted.run(asyncio.Event())
    assert await store.load(key) == "20"
    assert (await js.stream_info(settings.stream)).state.messages == 4

    consumer = await EventConsumer.open(js, settings)
    got = await collect(consumer, 4)
    assert [(d.event.job.name, d.event.type.value) for d in got] == [
        ("a", "job.arrived"),
        ("b", "job.arrived"),
        ("a", "job.completed"),
        ("b", "job.completed"),
    ]

    resumed = ScriptedWatch(script)
    await Bridge(publisher=publisher, store=store, source=resumed, key=key).run(asyncio.Event())
    assert resumed.started_from == ["20"]


async def test_stop_ends_a_watch_waiting_for_its_next_change(client, settings):
    """A watch with nothing new blocks on its next change; ``stop`` ends the bridge at once,
    not when (if ever) that change comes (the demo waited 10 s at its end for this)."""
    js = client.jetstream()
    store = KvResumeStore(await ensure_kv(js, settings))
    publisher = EventPublisher(js, prefix=settings.subject_prefix, stream=settings.stream)
    key = watch_key(JobKind.PYTORCHJOB, "team-a")
    handled = asyncio.Event()

    async def quiet(resume_from):
        yield seen("a", 10)
        handled.set()
        await asyncio.Event().wait()  # no further change, ever
        yield seen("a", 11)  # pragma: no cover

    stop = asyncio.Event()
    run = asyncio.create_task(
        Bridge(publisher=publisher, store=store, source=quiet, key=key).run(stop)
    )
    await asyncio.wait_for(handled.wait(), timeout=30)
    stop.set()
    await asyncio.wait_for(run, timeout=5)  # was: never, until the next change
    assert await store.load(key) == "10"
