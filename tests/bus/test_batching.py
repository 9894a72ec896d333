"""The pump's deliveries: each new fact once per batch, repeats settled (no I/O, no clock)."""

from __future__ import annotations

import pytest

from bellows.bus import Batcher, Offered
from bellows.jobs import SpecError

from .conftest import arrived, completed


def test_every_waiting_fact_comes_out_in_one_batch_in_arrival_order():
    batcher: Batcher[str] = Batcher()
    assert batcher.poll(0.0) is None
    assert batcher.offer(arrived("a"), "h1") is Offered.QUEUED
    batcher.offer(arrived("b"), "h2")
    assert batcher.waiting() == (arrived("a"), arrived("b"))
    batch = batcher.poll(3.5)
    assert batch is not None
    assert [e.job.name for e in batch.events] == ["a", "b"]
    assert batch.handles == ("h1", "h2")
    assert batch.closed_at == 3.5
    assert batcher.pending == 0
    assert batcher.poll(4.0) is None  # nothing waits: no empty batch


def test_a_repeat_in_a_batch_is_applied_once_and_settled_with_the_first():
    batcher: Batcher[str] = Batcher()
    batcher.offer(arrived("a"), "first")
    assert batcher.offer(arrived("a", source="pipeline/x"), "again") is Offered.REPEAT
    batcher.offer(completed("a"), "done")
    assert batcher.pending == 2
    assert sorted(batcher.held()) == ["again", "done", "first"]
    batch = batcher.poll(10.0)
    assert batch is not None
    assert [e.type.value for e in batch.events] == ["job.arrived", "job.completed"]
    assert batch.handles == ("first", "again", "done")


def test_facts_applied_in_an_earlier_batch_are_settled_at_once():
    batcher: Batcher[str] = Batcher()
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
    batcher: Batcher[str] = Batcher(remember=2)
    for name in "abc":
        batcher.offer(arrived(name), name)
        batch = batcher.poll(0.0)
        assert batch is not None
        batcher.commit(batch)
    assert batcher.offer(arrived("a"), "x") is Offered.QUEUED
    assert batcher.offer(arrived("c"), "y") is Offered.APPLIED


def test_bad_settings_are_refused_with_the_field():
    with pytest.raises(SpecError, match="remember"):
        Batcher(remember=0)
