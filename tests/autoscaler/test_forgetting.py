"""The core forgets a job once it finished or was rejected (issue 35, item 9).

What the core keeps by a job's name (its spec, its row, its progress, its moves, its charge)
must go when the job goes, or a controller that runs for months grows with every job it
ever saw. Each test runs one job of a template through the core after a first job of that
template (so that every cache by template is warm), and checks that every container the
core holds is back to the size it had before the second job arrived, and that nothing
reachable from the core names the job any more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Reject, Start, core, rows
from bellows.jobs import Allocation, JobSpec
from bellows.scaling import EfficiencyProfile, default_cluster
from tests.strategies import make_job

CLUSTER = default_cluster()
SCAN_DEPTH = 6  # levels of attributes and containers looked into from the core


def _owned(value: object) -> bool:
    """Objects of this project (or plain containers) are looked into; others (NumPy arrays,
    locks, thread pools, functions) are leaves."""
    if isinstance(value, dict | list | tuple | set | frozenset):
        return True
    return type(value).__module__.startswith("bellows.") and (
        hasattr(value, "__dict__") or dataclasses.is_dataclass(value)
    )


def _children(value: object) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield f"[{key!r}]", key
            yield f"[{key!r}]", item
    elif isinstance(value, list | tuple | set | frozenset):
        for i, item in enumerate(value):
            yield f"[{i}]", item
    else:
        attrs = vars(value) if hasattr(value, "__dict__") else {}
        if dataclasses.is_dataclass(value) and not attrs:
            attrs = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        for name, item in attrs.items():
            yield f".{name}", item


def _walk(auto: Autoscaler) -> Iterator[tuple[str, object]]:
    """Every object reachable from ``auto`` through attributes and containers, with its
    path (each object once)."""
    seen: set[int] = set()
    todo: list[tuple[str, object, int]] = [("auto", auto, 0)]
    while todo:
        path, value, depth = todo.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        yield path, value
        if depth < SCAN_DEPTH and _owned(value):
            todo.extend((path + step, item, depth + 1) for step, item in _children(value))


def sizes(auto: Autoscaler) -> dict[str, int]:
    """The length of every container the core holds, by its path (the core's own dicts,
    sets and lists, its state's, its clock's, its engines')."""
    return {
        path: len(value)
        for path, value in _walk(auto)
        if isinstance(value, dict | list | set) and "[" not in path
    }


def mentions(auto: Autoscaler, name: str) -> list[str]:
    """The paths of everything reachable from the core that names job ``name``: the name
    itself, or a spec, a decision or a note of that job."""
    out = []
    for path, value in _walk(auto):
        if isinstance(value, np.ndarray):
            continue
        if (
            value == name
            if isinstance(value, str)
            else name in (getattr(value, "name", None), getattr(value, "job", None))
        ):
            out.append(path)
    return out


def check_forgotten(
    auto: Autoscaler, run: Callable[[str, float], float], start: float = 0.0
) -> None:
    """``run(name, t)`` takes a job through the core from ``t`` (arrival) until it is gone,
    and returns the time it ends at; run twice, the second job leaves no trace."""
    t = run("first", start)
    before = sizes(auto)
    assert {"auto._s.jobs", "auto._s.rows", "auto._tables.row_cache"} <= before.keys()
    t = run("second", t + 1.0)
    after = sizes(auto)
    assert {p: (before.get(p), n) for p, n in after.items() if before.get(p) != n} == {}
    assert mentions(auto, "second") == []


def job(name: str, **fields: object) -> JobSpec:
    return make_job(name, **{"work": 50_000.0, **fields})  # type: ignore[arg-type]


def test_a_finished_job_leaves_nothing_behind() -> None:
    auto = Autoscaler(AutoscalerConfig(delta_s=60.0), capacity=8, cluster=CLUSTER)
    auto.note_keeps = True

    def run(name: str, t: float) -> float:
        assert auto.arrive(job(name), now=t)
        assert [type(d) for d in auto.step(t)] == [Start]  # a fill: free GPUs
        tick = auto.next_round_at()
        assert tick is not None
        auto.step(tick)  # a round with it running
        assert auto.finish(name, now=tick + 1.0)
        after = auto.next_round_at()
        assert after is not None
        auto.step(after)  # the round after it
        return after

    check_forgotten(auto, run, start=1.0)  # off the Δ grid: a fill, then a round


def test_a_job_revised_preempted_and_resumed_then_finished_leaves_nothing_behind() -> None:
    """Its own row (a revision is not cached by template), its progress carried over a
    preemption, its moves and its restart start time all go."""
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0, restart_growth=1.0), capacity=8,
                      cluster=CLUSTER)  # fmt: skip

    def run(name: str, t: float) -> float:
        spec = job(name)
        auto.arrive(spec, now=t)
        auto.step(t)
        refit = dataclasses.replace(spec, weights=spec.weights + 1, restart_s=5.0)
        assert auto.revise(refit, now=t + 1.0, done=100.0)
        auto.set_capacity(0, now=t + 2.0)
        auto.step(t + 2.0)  # preempted: its progress is carried
        assert auto.queued == (name,)
        auto.set_capacity(8, now=t + 3.0)
        auto.step(t + 3.0)
        assert name in auto.allocations
        assert auto.finish(name, now=t + 4.0)
        auto.step(t + 4.0)
        return t + 4.0

    check_forgotten(auto, run)


def test_a_rejected_job_leaves_nothing_behind() -> None:
    """Without a queue a job that does not fit is rejected: the core drops it at once."""
    auto = Autoscaler(AutoscalerConfig.paper(delta_s=60.0), capacity=4, cluster=CLUSTER)
    auto.arrive(job("big", elastic=False, gpus=4, batch_size=128), now=0.0)
    auto.step(60.0)

    def run(name: str, t: float) -> float:
        auto.arrive(job(name, elastic=False, gpus=4, batch_size=128), now=t)
        tick = auto.next_round_at()
        assert tick is not None
        assert [type(d) for d in auto.step(tick)] == [Reject]
        assert not auto.revise(job(name), now=tick)
        assert not auto.finish(name, now=tick)
        return tick

    check_forgotten(auto, run, start=60.0)


def test_a_job_decided_by_goodput_and_adopted_leaves_nothing_behind() -> None:
    """A charged job (goodput rows, its profile) adopted running, then finished."""
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=8, cluster=CLUSTER)
    profile = EfficiencyProfile(32, 200.0, 0.0)

    def run(name: str, t: float) -> float:
        auto.charge(name, profile)
        assert auto.adopt(job(name), Allocation(2, 64), now=t, done=0.0)
        auto.step(t)
        assert auto.charged(name) is profile
        assert auto.finish(name, now=t + 1.0)
        auto.step(t + 1.0)
        return t + 1.0

    check_forgotten(auto, run)


def test_a_finished_name_may_come_again_as_a_new_job() -> None:
    """Forgotten, a finished job's name is free: a job resubmitted under it arrives like
    any new job (it was refused as already known)."""
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=8, cluster=CLUSTER)
    assert auto.arrive(job("a"), now=0.0)
    auto.step(0.0)
    assert not auto.arrive(job("a"), now=1.0)  # still running: the same job
    assert auto.finish("a", now=2.0)
    assert auto.arrive(job("a", work=80_000.0), now=3.0)
    assert auto.job("a").work == 80_000.0
    assert [type(d) for d in auto.step(3.0)] == [Start]


def test_a_fork_forgets_on_its_own() -> None:
    """A job finished in a fork (the controller's rehearsal) is still known to the core it
    was forked from."""
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=8, cluster=CLUSTER)
    auto.arrive(job("a"), now=0.0)
    auto.step(0.0)
    twin = auto.fork()
    assert twin.finish("a", now=1.0)
    assert mentions(twin, "a") == []
    assert auto.job("a").name == "a"
    assert "a" in auto.allocations


def test_goodput_rows_of_revised_jobs_gone_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each revision of a job decided by goodput makes goodput rows of its own (its refitted
    spec is a template of its own): the rows of jobs gone are dropped past a bound, those of
    the jobs still running are kept, and the rows are the same as computed afresh."""
    monkeypatch.setattr(rows, "GOODPUT_ROWS_KEPT", 8)
    auto = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=8, cluster=CLUSTER)
    profile = EfficiencyProfile(32, 200.0, 0.5)
    stays = job("stays")
    auto.charge("stays", profile)
    auto.arrive(stays, now=0.0)
    auto.step(0.0)
    t, sizes_seen = 1.0, []
    for i in range(80):
        name = f"job-{i}"
        auto.charge(name, profile)
        auto.arrive(job(name), now=t)
        auto.step(t)
        refit = dataclasses.replace(job(name), weights=1_000_000 + i)
        assert auto.revise(refit, now=t + 1.0, done=1000.0)
        auto.step(t + 1.0)  # a round: the refitted spec gets its goodput row
        assert auto.finish(name, now=t + 2.0)
        auto.step(t + 2.0)
        sizes_seen.append(len(auto._tables.goodput_cache))
        t += 3.0
    assert max(sizes_seen) <= 2 * 8 + 2 * core.GOODPUT_STEPS  # not one row per job revised
    key = (*auto._tables.kind(stays), profile)
    assert any(k[:-1] == key for k in auto._tables.goodput_cache)  # the running job's rows stay
    fresh = Autoscaler(AutoscalerConfig(delta_s=0.0), capacity=8, cluster=CLUSTER)
    fresh.charge("stays", profile)
    fresh.arrive(stays, now=0.0)
    fresh.step(0.0)
    for k, row in auto._tables.goodput_cache.items():
        if k in fresh._tables.goodput_cache:
            np.testing.assert_array_equal(row.values, fresh._tables.goodput_cache[k].values)
            np.testing.assert_array_equal(row.rate, fresh._tables.goodput_cache[k].rate)
