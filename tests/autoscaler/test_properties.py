"""Properties of the autoscaler core over random event sequences (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.autoscaler import (
    Autoscaler,
    AutoscalerConfig,
    Decision,
    Mode,
    Objective,
    Policy,
    Preempt,
    Reject,
    Rescale,
    Start,
)
from bellows.jobs import Allocation, JobSpec, is_feasible
from bellows.scaling import default_cluster, tsf_tables
from tests.strategies import job_specs

CLUSTER = default_cluster()


@dataclass(frozen=True)
class Scenario:
    config: AutoscalerConfig
    capacity: int
    # ("arrive", t, job) | ("finish", t, running index) | ("capacity", t, gpus)
    events: list[tuple[str, float, object]]


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    config = AutoscalerConfig(
        mode=draw(st.sampled_from(list(Mode))),
        policy=draw(st.sampled_from(list(Policy))),
        queue=draw(st.booleans()),
        delta_s=draw(st.sampled_from([0.0, 60.0, 600.0])),
        early_share=draw(st.sampled_from([None, 0.5])),
        restart_s=draw(st.sampled_from([0.0, 30.0])),
        hysteresis=draw(st.sampled_from([0.0, 1.5])),
        backfill=draw(st.booleans()),
        objective=draw(st.sampled_from(list(Objective))),
        restart_growth=draw(st.sampled_from([0.0, 1.0])),
    )
    capacity = draw(st.integers(0, 24))
    events: list[tuple[str, float, object]] = []
    t = 0.0
    for i in range(draw(st.integers(1, 14))):
        t += draw(st.sampled_from([0.0, 5.0, 61.0, 400.0]))
        kind = draw(st.sampled_from(["arrive", "arrive", "finish", "capacity"]))
        if kind == "arrive":
            events.append(("arrive", t, draw(job_specs(f"job{i}"))))
        elif kind == "finish":
            events.append(("finish", t, draw(st.integers(0, 20))))
        else:
            events.append(("capacity", t, draw(st.integers(0, 24))))
    return Scenario(config, capacity, events)


@dataclass
class Round:
    at: float
    queued_before: tuple[str, ...]
    running_before: dict[str, Allocation]
    decisions: list[Decision]
    running_after: dict[str, Allocation]
    capacity: int
    admitted: int | None  # what the step's optimizer admitted, and the objective
    objective: float | None


class Unabridged(Autoscaler):
    """The core without its shortcuts: every candidate offered goes to the full optimizer."""

    shortcuts = False


def drive(
    s: Scenario, core: type[Autoscaler] = Autoscaler
) -> tuple[list[Round], dict[str, JobSpec]]:
    """Feed the events and run every due round, recording what each round saw and did."""
    auto = core(s.config, capacity=s.capacity, cluster=CLUSTER)
    jobs: dict[str, JobSpec] = {}
    rounds: list[Round] = []

    last = 0.0

    def run_rounds(until: float) -> None:
        # step when the core says, as the simulator does: the core raises ClockError if
        # that is before a fact it was given (a round in the past)
        nonlocal last
        while (due := auto.next_round_at()) is not None and due <= until:
            assert due >= last, f"a step due at {due}, before the last fact at {last}"
            queued, before = auto.queued, dict(auto.allocations)
            decisions = auto.step(due)
            last = due
            stats = auto.last_round if auto.last_round and auto.last_round.at == due else None
            rounds.append(
                Round(
                    due, queued, before, decisions, dict(auto.allocations), auto.capacity,
                    None if stats is None else stats.admitted,
                    None if stats is None else stats.objective,
                )
            )  # fmt: skip
            assert auto.next_round_at() is None or auto.next_round_at() > due

    for kind, t, payload in s.events:
        run_rounds(t)
        last = t
        if kind == "arrive":
            assert isinstance(payload, JobSpec)
            jobs[payload.name] = payload
            auto.arrive(payload, now=t)
        elif kind == "finish":
            running = list(auto.allocations)
            if running:
                assert isinstance(payload, int)
                auto.finish(running[payload % len(running)], now=t)
        else:
            assert isinstance(payload, int)
            auto.set_capacity(payload, now=t)
    run_rounds(1e12)
    return rounds, jobs


def _least(job: JobSpec, fixed: bool) -> int:
    """The fewest GPUs ``job`` can run on under the policy (k_max + 1: none)."""
    row = tsf_tables([job], CLUSTER, fixed_batch=fixed, width=job.k_max).values[0]
    finite = [k for k in range(1, row.shape[0]) if row[k] > float("-inf")]
    return finite[0] if finite else job.k_max + 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_round_invariants(s: Scenario) -> None:
    rounds, jobs = drive(s)
    fixed = s.config.policy is Policy.BASELINE
    for r in rounds:
        running = dict(r.running_before)
        preempted: list[str] = []
        started: list[str] = []
        for d in r.decisions:
            if isinstance(d, Start):
                assert d.job not in running
                running[d.job] = Allocation(d.gpus, d.batch)
                started.append(d.job)
            elif isinstance(d, Rescale):
                assert running[d.job] == Allocation(d.gpus_from, d.batch_from)
                assert jobs[d.job].elastic, "a rigid job was rescaled"
                running[d.job] = Allocation(d.gpus, d.batch)
            elif isinstance(d, Reject):
                assert d.job not in r.running_before, "a running job was rejected"
                assert not s.config.queue, "a job was rejected in queue mode"
            else:
                assert isinstance(d, Preempt)
                running.pop(d.job)
                preempted.append(d.job)
        # the decisions replayed give exactly the core's new state
        assert running == r.running_after
        # GPUs never over-committed
        assert sum(a.gpus for a in running.values()) <= r.capacity
        # every allocation is in the job's feasible set (rigid: its one allocation)
        for name, alloc in running.items():
            assert is_feasible(jobs[name], alloc, fixed_batch=fixed), (name, alloc)
        # FIFO: without backfill, the jobs started are a prefix of the queue (passing over
        # jobs that could not run even on the whole cluster: they must not block it)
        if not s.config.backfill:
            queue = list(reversed(preempted)) + list(r.queued_before)
            queue = [n for n in queue if _least(jobs[n], fixed) <= r.capacity]
            assert started == queue[: len(started)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_inputs_give_the_same_decisions(s: Scenario) -> None:
    first, _ = drive(s)
    again, _ = drive(s)
    assert [(r.at, r.decisions) for r in first] == [(r.at, r.decisions) for r in again]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_the_shortcuts_decide_as_the_full_optimizer(s: Scenario) -> None:
    """Rows only for the candidates admission takes, a lone candidate placed without the
    DP, grid rows computed once: the same decisions, admissions and objectives as
    offering every candidate to the optimizer, bit for bit."""
    fast, _ = drive(s)
    full, _ = drive(s, Unabridged)
    assert fast == full
