"""No flapping (issue 36 item 3): a cluster whose jobs and capacity do not change rescales
nothing, however often a round comes.

On Sia's simulator, which asks the policy every 60 s, an imagenet job changed its GPU count
130 times: the objective's weights moved with the cluster from one step to the next, so the
same job's best count flipped. Here the jobs arrive, the core decides, and then only their
progress moves: every running job reports what it has done (a revision with the same spec,
as the live controller's progress loop makes one), each report a fact that brings a round.
Uncharged, no such round may halt, rescale, start or reject anything: nothing a decision
depends on has changed. Charged statistical efficiency, a job's goodput does change with its
progress (its gradient noise grows, so its best batch and count grow), and a round may
follow it; but no job ever goes back to a GPU count it left.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Rescale
from bellows.jobs import JobSpec
from bellows.scaling import MODEL_EFFICIENCY, default_cluster
from tests.strategies import job_specs, steady_configs

CLUSTER = default_cluster()
ROUNDS = 8


@st.composite
def steady(draw: st.DrawFn) -> tuple[AutoscalerConfig, int, list[JobSpec], bool, float]:
    config = draw(steady_configs())
    capacity = draw(st.integers(1, 24))
    # long jobs (a day or more of work on one GPU): every round finds them all still running
    jobs = [replace(draw(job_specs(f"job{i}")), work=1e11) for i in range(draw(st.integers(1, 8)))]
    charged = draw(st.booleans())
    every = draw(st.sampled_from([60.0, 300.0]))
    return config, capacity, jobs, charged, every


def _settle(auto: Autoscaler, until: float) -> list[object]:
    decisions: list[object] = []
    while (due := auto.next_round_at()) is not None and due <= until:
        decisions.extend(auto.step(due))
    return decisions


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steady())
def test_a_cluster_whose_jobs_and_capacity_do_not_change_rescales_nothing(
    case: tuple[AutoscalerConfig, int, list[JobSpec], bool, float],
) -> None:
    config, capacity, jobs, charged, every = case
    auto = Autoscaler(config, capacity=capacity, cluster=CLUSTER)
    profile = MODEL_EFFICIENCY["cifar10"]
    for job in jobs:
        if charged:
            auto.charge(job.name, profile)
        auto.arrive(job, now=0.0)
    _settle(auto, 0.0)
    now = 0.0
    left: dict[str, set[int]] = {name: set() for name in auto.allocations}
    for _ in range(ROUNDS):
        now += every
        running = dict(auto.allocations)
        for name in running:
            done = auto.estimated_done(name, now)
            assert done < auto.job(name).work, "a job finished: the jobs changed"
            auto.revise(auto.job(name), now, done=done)
        moved = _settle(auto, now)
        if not charged:
            assert moved == [], f"t={now}: {moved} with nothing changed"
            continue
        assert not [d for d in moved if not isinstance(d, Rescale)], moved
        for name, before in running.items():
            after = auto.allocations[name].gpus
            if after != before.gpus:
                assert after not in left[name], f"{name} back to {after} GPUs at t={now}"
                left[name].add(before.gpus)
