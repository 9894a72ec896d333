"""A tenant's sections per GPU type are data (issue 39, the trust rules of issue 35).

A profile's ``types`` section comes from where its tenant writes (the ``bellows.io/profile``
annotation, a ConfigMap of its namespace). On a cluster of one type, which the controller
runs today, it changes nothing: a job claiming A100s a hundred times faster than its own
profile gets exactly the GPUs and batches the same job gets without the claim. Each value is
bounded and refused by its JSON path (tests/scaling/test_profiles.py).
"""

from __future__ import annotations

import dataclasses

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Mode
from bellows.jobs import JobSpec, StepProfile, TypeSection
from bellows.scaling import default_cluster
from tests.strategies import make_job

PROFILE = StepProfile((20, 200), (0.146, 0.922))


def _decisions(jobs: list[JobSpec], cap: int) -> list[object]:
    auto = Autoscaler(AutoscalerConfig(mode=Mode.BELLOWS), capacity=cap, cluster=default_cluster())
    out: list[object] = []
    for at, job in enumerate(jobs):
        auto.arrive(job, float(at))
        out += auto.step(float(at))
    out += auto.step(600.0)
    return out


def test_a_claimed_fast_type_buys_nothing_on_one_type() -> None:
    shape = {"b_min": 32, "b_max": 512, "profile": PROFILE, "m_max": 256, "k_max": 16}
    honest = [make_job(f"pytorchjob/team-b/o{i}", work=1e6, **shape) for i in range(3)]
    liar = make_job("pytorchjob/team-a/liar", work=2e6, **shape)
    fast = StepProfile(PROFILE.local_batches, tuple(s / 100 for s in PROFILE.seconds))
    claimed = dataclasses.replace(liar, types=(TypeSection("a100", fast, 1, 4096),))
    for cap in (2, 6, 16):
        plain = _decisions([liar, *honest], cap)
        lying = _decisions([claimed, *honest], cap)
        assert plain, cap  # the round decided something
        assert lying == plain, cap
