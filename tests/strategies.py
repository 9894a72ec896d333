"""Hypothesis strategies and small factories for jobs, shared by the test suites."""

from __future__ import annotations

from hypothesis import strategies as st

from bellows.autoscaler import AutoscalerConfig, Mode, Objective
from bellows.jobs import JobSpec, StepProfile

# A single-GPU step time a + c*m with numbers of the size the Pollux T4 profiles show.
LINEAR_PROFILE = StepProfile(
    (8, 16, 32, 64, 128), tuple(0.02 + 0.004 * m for m in (8, 16, 32, 64, 128))
)


def make_job(
    name: str,
    *,
    b_min: int = 32,
    b_max: int = 512,
    batch_size: int | None = None,
    k_max: int = 8,
    m_max: int = 128,
    weights: int = 25_000_000,
    work: float = 1_000_000.0,
    elastic: bool = True,
    gpus: int = 1,
    profile: StepProfile = LINEAR_PROFILE,
) -> JobSpec:
    """A valid job with overridable fields (the defaults scale well up to 8 GPUs)."""
    return JobSpec(
        name=name,
        b_min=b_min,
        b_max=b_max,
        batch_size=b_min if batch_size is None else batch_size,
        k_max=k_max,
        m_max=m_max,
        weights=weights,
        work=work,
        profile=profile,
        elastic=elastic,
        gpus=gpus,
    )


@st.composite
def job_specs(draw: st.DrawFn, name: str) -> JobSpec:
    """Random valid jobs, elastic or rigid, with varied ranges and model sizes."""
    m_max = draw(st.sampled_from([8, 16, 32, 64, 128]))
    k_max = draw(st.integers(1, 16))
    elastic = draw(st.booleans()) or draw(st.booleans())
    b_min = draw(st.integers(1, m_max * k_max))
    b_max = draw(st.integers(b_min, m_max * k_max))
    batch = draw(st.integers(b_min, b_max))
    gpus = max(1, -(-batch // m_max))
    if elastic:
        gpus = draw(st.integers(gpus, k_max)) if gpus <= k_max else k_max
    else:
        gpus = draw(st.integers(gpus, max(gpus, min(k_max, batch))))
    if -(-batch // gpus) > m_max or gpus > k_max:
        # fall back to a job that is always valid
        return make_job(name, elastic=elastic)
    weights = draw(st.sampled_from([1_000_000, 11_000_000, 25_000_000, 110_000_000]))
    work = float(draw(st.integers(10_000, 5_000_000)))
    try:
        return JobSpec(
            name, b_min, b_max, batch, k_max, m_max, weights, work, LINEAR_PROFILE, elastic, gpus
        )
    except ValueError:
        return make_job(name, elastic=elastic)


@st.composite
def steady_configs(draw: st.DrawFn) -> AutoscalerConfig:
    """Bellows mode's settings the no-flapping properties range over: queue, Δ, restart
    cost, objective, restart growth and node counts."""
    return AutoscalerConfig(
        mode=Mode.BELLOWS,
        queue=draw(st.booleans()),
        delta_s=draw(st.sampled_from([0.0, 60.0])),
        restart_s=draw(st.sampled_from([0.0, 30.0, 250.0])),
        objective=draw(st.sampled_from(list(Objective))),
        restart_growth=draw(st.sampled_from([0.0, 1.0])),
        node_counts=draw(st.booleans()),
    )
