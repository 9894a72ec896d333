"""``Autoscaler.fork``: a what-if core that shares the immutable values and nothing else."""

from __future__ import annotations

import copy

import numpy as np

from bellows.autoscaler import Autoscaler, AutoscalerConfig
from bellows.autoscaler.decisions import Decision
from bellows.scaling import default_cluster
from bellows.sim.workloads.generating import WorkloadSpec, generate


def _busy() -> tuple[Autoscaler, list[str]]:
    cluster = default_cluster()
    spec = WorkloadSpec(pattern="high", minutes=60, categories=(1, 2, 3, 4), gpus=32)
    trace = generate(spec, np.random.default_rng(7), cluster=cluster)
    auto = Autoscaler(AutoscalerConfig(), capacity=32, cluster=cluster)
    for job in trace[:60]:
        auto.arrive(job.spec, job.arrival_s)
    auto.step(auto.next_round_at() or 0.0)
    return auto, [job.spec.name for job in trace[60:80]]


def _view(auto: Autoscaler) -> tuple[object, ...]:
    return (dict(auto.allocations), auto.queued, auto.next_round_at(), auto.in_use)


def _play(auto: Autoscaler, later: list[str], specs: dict[str, object]) -> list[Decision]:
    """The same facts, in the same order, to any core: finish two, arrive some, step."""
    decisions: list[Decision] = []
    now = 4000.0
    for name in list(auto.allocations)[:2]:
        auto.finish(name, now)
    for name in later:
        auto.arrive(specs[name], now)  # type: ignore[arg-type]
    decisions += auto.step(now)
    return decisions


def test_a_fork_decides_as_a_deep_copy_and_leaves_the_original_alone() -> None:
    auto, later = _busy()
    cluster = default_cluster()
    spec = WorkloadSpec(pattern="high", minutes=60, categories=(1, 2, 3, 4), gpus=32)
    specs = {j.spec.name: j.spec for j in generate(spec, np.random.default_rng(7), cluster=cluster)}
    before = _view(auto)
    fork, deep = auto.fork(), copy.deepcopy(auto)
    assert _play(fork, later, specs) == _play(deep, later, specs)
    assert _view(fork) == _view(deep)
    assert _view(auto) == before  # nothing the fork was told or decided reached it
    assert _view(fork) != before
    # and the other way round: the original goes on as if the fork never was
    again = copy.deepcopy(auto)
    assert _play(auto, later, specs) == _play(again, later, specs)
