"""Every kind of decision the core makes says why, in words (``bellows status`` shows it).

The kinds: a start into free GPUs (a fill, or a round), a start on GPUs a round took from
running jobs, a resume after a preemption, a scale-down to start a job, to give GPUs to a
scaled-up one, to fit a smaller cluster, or because the job runs faster on fewer GPUs, a
scale-up into free GPUs or onto GPUs taken from others, a batch change on the same GPUs, a
rejection, a preemption, and a running job a round kept: where more GPUs would not pay for
the restart, where another batch would not, and where its minimum runtime held it while jobs
wait. First each sentence from :func:`reasoned` on hand-made steps, then the core emitting
them, each keep beside the same round without its cause, which moves the job.
"""

from __future__ import annotations

import pytest

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Keep, Preempt, Reject, Rescale, Start
from bellows.autoscaler.reasons import listed, reasoned
from bellows.jobs import Allocation
from bellows.scaling import default_cluster
from tests.strategies import make_job

CLUSTER = default_cluster()


def _why(downs=(), ups=(), starts=(), *, resumed=(), faster=(), capacity=16):
    out = reasoned(
        list(downs),
        list(ups),
        list(starts),
        resumed=frozenset(resumed),
        faster_alone=frozenset(faster),
        capacity=capacity,
    )
    return {d.job: d.reason for d in out}


CASES = [
    ("start, free GPUs", _why(starts=[Start("s", 4, 64)]), {"s": "started into free GPUs"}),
    (
        "resume after a preemption",
        _why(starts=[Start("s", 4, 64)], resumed=["s"]),
        {"s": "resumed after a preemption into free GPUs"},
    ),
    (
        "scale-down to start a job, the start on its GPUs",
        _why(downs=[Rescale("d", 8, 128, 4, 64)], starts=[Start("team-a/bert", 4, 64)]),
        {
            "d": "scaled 8→4 to start team-a/bert",
            "team-a/bert": "started on GPUs the round took from d",
        },
    ),
    (
        "scale-down for a scale-up, the scale-up on its GPUs",
        _why(downs=[Rescale("d", 8, 128, 4, 64)], ups=[Rescale("u", 2, 64, 6, 192)]),
        {
            "d": "scaled 8→4 to give GPUs to u",
            "u": "scaled 2→6 on GPUs taken from d: it finishes sooner, its restart included",
        },
    ),
    (
        "scale-up into free GPUs",
        _why(ups=[Rescale("u", 2, 64, 4, 128)]),
        {"u": "scaled 2→4 into free GPUs: it finishes sooner, its restart included"},
    ),
    (
        "scale-down to fit a smaller cluster",
        _why(downs=[Rescale("d", 8, 128, 4, 64)], capacity=4),
        {"d": "scaled 8→4 to fit the cluster's 4 GPUs"},
    ),
    (
        "scale-down of a job faster on fewer GPUs",
        _why(downs=[Rescale("d", 8, 128, 4, 64)], starts=[Start("s", 4, 64)], faster=["d"]),
        {
            "d": "scaled 8→4: it runs faster on fewer GPUs",
            "s": "started on GPUs the round took from d",
        },
    ),
    (
        "batch change on the same GPUs",
        _why(ups=[Rescale("b", 4, 64, 4, 128)]),
        {"b": "batch 64→128 on its 4 GPUs: it finishes sooner, its restart included"},
    ),
]


@pytest.mark.parametrize(("case", "got", "want"), CASES, ids=[c[0] for c in CASES])
def test_each_kind_of_step_has_its_sentence(case, got, want) -> None:
    assert got == want


def test_sentences_name_two_jobs_then_count_the_rest() -> None:
    assert listed(["a"]) == "a"
    assert listed(["a", "b"]) == "a and b"
    assert listed(["a", "b", "c", "d"]) == "a, b and 2 more"
    starts = [Start(f"s{i}", 1, 32) for i in range(4)]
    got = _why(downs=[Rescale("d", 8, 128, 4, 64)], starts=starts)
    assert got["d"] == "scaled 8→4 to start s0, s1 and 2 more"


def test_a_reason_takes_no_part_in_equality() -> None:
    assert Start("a", 4, 64, "started into free GPUs") == Start("a", 4, 64)
    assert Rescale("a", 8, 128, 4, 64, reason="x") == Rescale("a", 8, 128, 4, 64)


def _bellows(capacity: int, **options: object) -> Autoscaler:
    auto = Autoscaler(AutoscalerConfig(**options), capacity=capacity, cluster=CLUSTER)
    auto.note_keeps = True
    return auto


def test_the_core_says_why_for_each_decision_it_emits() -> None:
    """Through the core: fill start, round scale-down to start a job and the start on those
    GPUs, scale-up into freed GPUs, rejection, preemption and the resume after it."""
    auto = _bellows(8, restart_s=0.0, delta_s=120.0)
    auto.arrive(make_job("a", work=1e9), now=0.0)
    (start,) = auto.step(0.0)
    assert start == Start("a", 8, start.batch)
    assert start.reason == "started into free GPUs"
    auto.arrive(make_job("b", work=1e9), now=10.0)
    assert auto.step(10.0) == []  # no GPU free: b waits for the round
    decisions = auto.step(auto.next_round_at())
    down, started = decisions[0], decisions[-1]
    assert isinstance(down, Rescale)
    assert isinstance(started, Start)
    assert down.reason == f"scaled 8→{down.gpus} to start b"
    assert started.reason == "started on GPUs the round took from a"
    auto.finish("b", now=300.0)
    up = next(d for d in auto.step(auto.next_round_at()) if isinstance(d, Rescale))
    assert (
        up.reason
        == f"scaled {up.gpus_from}→8 into free GPUs: it finishes sooner, its restart included"
    )
    auto.set_capacity(0, now=500.0)
    (preempt,) = auto.step(500.0)
    assert preempt == Preempt("a", "cluster capacity fell to 0 GPUs")
    auto.set_capacity(8, now=600.0)
    (resume,) = auto.step(600.0)
    assert isinstance(resume, Start)
    assert resume.reason == "resumed after a preemption into free GPUs"

    paper = Autoscaler(
        AutoscalerConfig.paper(delta_s=0.0, queue=False), capacity=2, cluster=CLUSTER
    )
    rigid = [make_job(f"r{i}", elastic=False, gpus=2, batch_size=64) for i in range(2)]
    for job in rigid:
        paper.arrive(job, now=0.0)
    rejected = [d for d in paper.step(0.0) if isinstance(d, Reject)]
    assert rejected == [Reject("r1", "did not fit in 2 GPUs")]


def test_a_round_notes_the_jobs_it_kept_because_a_move_would_not_pay() -> None:
    """A job nearly done on 2 GPUs, 6 GPUs free: more GPUs would run it faster, but its
    60 s restart costs more than it would save; the round keeps it and says so. Without a
    restart cost the same round moves it."""
    for restart, kept in ((600.0, True), (0.0, False)):
        auto = _bellows(8, restart_s=restart, delta_s=120.0)
        auto.adopt(make_job("a", work=2e4), Allocation(2, 64), now=0.0)
        decisions = auto.step(auto.next_round_at())
        if kept:
            assert decisions == []
            (keep,) = auto.keeps
            assert keep == Keep("a", 2, 64, keep.better, keep.reason)
            assert keep.better > 2
            assert keep.reason == (
                f"kept on 2 GPUs: {keep.better} would run it faster but not pay for its restart"
            )
        else:
            assert [type(d) for d in decisions] == [Rescale]
            assert auto.keeps == ()


def test_the_simulator_asks_for_no_keep_notes() -> None:
    auto = Autoscaler(AutoscalerConfig(restart_s=600.0), capacity=8, cluster=CLUSTER)
    auto.adopt(make_job("a", work=2e4), Allocation(2, 64), now=0.0)
    auto.step(auto.next_round_at())
    assert auto.keeps == ()


def test_a_round_notes_a_batch_change_that_would_not_pay() -> None:
    """A job found running at batch 64 on 2 GPUs, nearly done; the optimizer's row for 2 GPUs
    has another batch, but restarting for it costs more than it saves: kept, and said so.
    Without a restart cost the same round changes its batch."""
    for restart, kept in ((600.0, True), (0.0, False)):
        auto = _bellows(2, restart_s=restart, delta_s=120.0)
        auto.adopt(make_job("a", work=2e4), Allocation(2, 64), now=0.0)
        decisions = auto.step(auto.next_round_at())
        if kept:
            assert decisions == []
            (keep,) = auto.keeps
            assert (keep.job, keep.gpus, keep.batch, keep.better) == ("a", 2, 64, 2)
            other = int(keep.reason.split("batch ")[2].split()[0])
            assert other != 64
            assert keep.reason == (
                f"kept batch 64 on its 2 GPUs: batch {other} would not pay for its restart"
            )
        else:
            (change,) = decisions
            assert isinstance(change, Rescale)
            assert (change.gpus_from, change.gpus, change.batch_from) == (2, 2, 64)
            assert auto.keeps == ()


def test_a_round_notes_a_job_its_minimum_runtime_kept_while_others_wait() -> None:
    """a runs on all 8 GPUs; b arrives. The round at 120 s may not shrink a within its 600 s
    minimum runtime: a is kept, and says why, while b waits; the round after it ends shrinks
    a to start b, and notes nothing. With no minimum runtime the first round does so."""
    for least, kept in ((600.0, True), (0.0, False)):
        auto = _bellows(8, restart_s=0.0, delta_s=120.0, min_runtime_s=least)
        auto.arrive(make_job("a", work=1e9), now=0.0)
        assert [type(d) for d in auto.step(0.0)] == [Start]
        auto.arrive(make_job("b", work=1e9), now=10.0)
        assert auto.step(10.0) == []
        decisions = auto.step(auto.next_round_at())
        if kept:
            assert decisions == []
            (keep,) = auto.keeps
            assert (keep.job, keep.gpus, keep.better) == ("a", 8, 8)
            assert keep.reason == (
                "kept on 8 GPUs: a round may not shrink it within its minimum runtime "
                "(600 s since it last started)"
            )
            later = auto.next_round_at()  # the round the protection held back
            assert later is not None
            assert {type(d) for d in auto.step(max(later, 600.0))} == {Rescale, Start}
            assert auto.keeps == ()  # nothing waits now
        else:
            assert {type(d) for d in decisions} == {Rescale, Start}
            assert auto.keeps == ()
