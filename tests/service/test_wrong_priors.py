"""``bellows demo --wrong-priors``: the truth the emulated cluster trains at is the oracle's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.scaling import JobProfile, default_cluster
from bellows.scaling.timing import step_time
from bellows.twin.replay import manifest_name
from bellows.twin.wrong_priors import WRONG_PRIORS, true_speeds, true_trace
from tests.service.livecluster import jobs


def test_the_oracle_trace_holds_the_speed_the_cluster_trains_at() -> None:
    trace = jobs(6, seed=4)
    truth, oracle = true_speeds(trace), true_trace(trace)
    cluster = default_cluster()
    seen = set()
    for job, known in zip(trace, oracle, strict=True):
        factors = truth("default", manifest_name(job))
        assert factors in WRONG_PRIORS
        seen.add(factors)
        real = factors.apply(JobProfile(job.spec.weights, job.spec.profile))
        assert (known.spec.weights, known.spec.profile) == (real.effective_weights, real.step)
        k = min(4, job.spec.k_max)
        batch = k * min(job.spec.m_max, max(1, job.spec.b_min // k))
        assert step_time(known.spec, k, batch, cluster) != step_time(job.spec, k, batch, cluster)
    assert seen == set(WRONG_PRIORS)  # every kind of wrong prior is in the trace
    assert truth("default", "not-in-the-trace") is None


@pytest.mark.slow
def test_the_demo_runs_with_wrong_priors_and_learning(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(
        main,
        [
            "demo", "--gpus", "8", "--minutes", "10", "--speedup", "600", "--seed", "3",
            "--crds", str(shared_data / "crds"), "--json-out", str(out), "--wrong-priors",
        ],
    )  # fmt: skip
    assert "the controller learned online: average JCT" in result.output, result.output
    report = json.loads(out.read_text())
    assert report["live"]["jobs_completed_total"] == report["live"]["jobs_total"] > 1
