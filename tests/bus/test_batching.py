"""The Δ-window batcher, driven by an injected clock with no I/O (as h11's tests do)."""

from __future__ import annotations

import pytest

from bellows.bus import Batcher, Offered
from bellows.jobs import SpecError

from .conftest import arrived, completed


def test_events_wait_for_the_window_on_a_fixed_grid():
    batcher: Batcher[str] = Batcher(delta_s=10.0, start=100.0)
    assert batcher.next_close() is None
    assert batcher.offer(arrived("a"), "h1") is Offered.QUEUED
    assert batcher.next_close() == 110.0
    assert batcher.poll(109.99) is None
    batcher.offer(arrived("b"), "h2")
    batch = batcher.poll(110.0)
    assert batch is not None
    assert [e.job.name for e in batch.events] == ["a", "b"]
    assert batch.handles == ("h1", "h2")
    assert batch.closed_at == 110.0
    # A late poll lands on the grid: the next window closes at 130, not 10 s after 125.
    batcher.offer(arrived("c"), "h3")
    assert batcher.poll(125.0) is not None  # the window that closed at 120 (late poll)
    batcher.offer(arrived("d"), "h4")
    assert batcher.next_close() == 130.0


def test_an_empty_window_yields_nothing_but_moves_the_grid():
    batcher: Batcher[str] = Batcher(delta_s=5.0, start=0.0)
    assert batcher.poll(12.0) is None
    batcher.offer(arrived("a"), "h")
    assert batcher.next_close() == 15.0


def test_delta_zero_makes_every_event_its_own_batch():
    batcher: Batcher[str] = Batcher(delta_s=0.0, start=0.0)
    for i, name in enumerate("abc"):
        batcher.offer(arrived(name), f"h{i}")
    assert batcher.next_close() == 0.0
    batches = [batcher.poll(1.0) for _ in range(4)]
    assert [b.events[0].job.name if b else None for b in batches] == ["a", "b", "c", None]
    assert all(b is None or len(b.events) == 1 for b in batches)


def test_a_repeat_in_the_window_is_applied_once_and_settled_with_the_first():
    batcher: Batcher[str] = Batcher(delta_s=10.0, start=0.0)
    batcher.offer(arrived("a"), "first")
    assert batcher.offer(arrived("a", source="pipeline/x"), "again") is Offered.REPEAT
    batcher.offer(completed("a"), "done")
    assert batcher.pending == 2
    assert sorted(batcher.held()) == ["again", "done", "first"]
    batch = batcher.poll(10.0)
    assert batch is not None
    assert [e.type.value for e in batch.events] == ["job.arrived", "job.completed"]
    assert batch.handles == ("first", "again", "done")


def test_facts_applied_in_an_earlier_window_are_settled_at_once():
    batcher: Batcher[str] = Batcher(delta_s=10.0, start=0.0)
    batcher.offer(arrived("a"), "h1")
    batch = batcher.poll(10.0)
    assert batch is not None
    # Not committed yet (apply failed, say): a redelivery is a new fact to apply.
    assert batcher.offer(arrived("a"), "h2") is Offered.QUEUED
    batch = batcher.poll(20.0)
    assert batch is not None
    batcher.commit(batch)
    assert batcher.offer(arrived("a"), "h3") is Offered.APPLIED
    assert batcher.pending == 0


def test_applied_facts_are_forgotten_oldest_first():
    batcher: Batcher[str] = Batcher(delta_s=0.0, start=0.0, remember=2)
    for name in "abc":
        batcher.offer(arrived(name), name)
        batch = batcher.poll(0.0)
        assert batch is not None
        batcher.commit(batch)
    assert batcher.offer(arrived("a"), "x") is Offered.QUEUED
    assert batcher.offer(arrived("c"), "y") is Offered.APPLIED


def test_force_closes_the_window_early_without_moving_the_grid():
    batcher: Batcher[str] = Batcher(delta_s=10.0, start=0.0)
    batcher.offer(arrived("a"), "h1")
    assert batcher.poll(3.0) is None
    batch = batcher.poll(3.0, force=True)
    assert batch is not None
    assert batch.handles == ("h1",)
    batcher.offer(arrived("b"), "h2")
    assert batcher.next_close() == 10.0


def test_bad_settings_are_refused_with_the_field():
    with pytest.raises(SpecError, match="delta_s"):
        Batcher(delta_s=-1.0, start=0.0)
    with pytest.raises(SpecError, match="remember"):
        Batcher(delta_s=1.0, start=0.0, remember=0)
