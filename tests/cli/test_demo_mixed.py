"""``bellows demo --cluster mixed`` (issue 39): the twin on Sia's mix of GPU types. What it
refuses (one pool of types: no paper mode, no Kueue, its 64 GPUs), what it runs (the mix's
nodes and the jobs' sections per type, carried in their profile annotations), and the whole
run against the simulator on the same typed cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bellows.cli import demo as demo_cli
from bellows.cli.main import main
from bellows.kube import keys
from bellows.scaling import default_cluster
from bellows.scaling.gpu_types import sia_mix
from bellows.twin.demo import DemoOptions, workload
from bellows.twin.replay import job_manifest


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--paper"], "--cluster mixed takes no --paper"),
        (["--kueue"], "--cluster mixed takes no --kueue"),
        (["--wrong-priors"], "--cluster mixed takes no --wrong-priors"),
        (["--gpus", "16"], "--gpus 16: --cluster mixed has 64 GPUs (--gpus 64)"),
    ],
)
def test_what_a_mixed_demo_refuses_is_a_usage_error(flags: list[str], said: str) -> None:
    shown = CliRunner().invoke(main, ["demo", "--cluster", "mixed", *flags])
    assert shown.exit_code == 2, shown.output
    assert said in " ".join(shown.output.split())  # rich folds the usage line


def test_the_options_refuse_what_the_cli_does() -> None:
    with pytest.raises(ValueError, match="takes no --paper"):
        DemoOptions(crds=[], gpus=64, typed=sia_mix(), paper=True)
    with pytest.raises(ValueError, match="has 64 GPUs"):
        DemoOptions(crds=[], gpus=16, typed=sia_mix())


def test_a_mixed_demo_runs_the_mix_with_each_jobs_sections(
    monkeypatch: pytest.MonkeyPatch, shared_data: Path
) -> None:
    seen: list[DemoOptions] = []

    def run(options: DemoOptions, console: Any, **_: Any) -> Any:
        seen.append(options)
        raise SystemExit(0)  # (the run itself is the slow test's)

    monkeypatch.setattr(demo_cli, "_run", run)
    shown = CliRunner().invoke(
        main, ["demo", "--cluster", "mixed", "--crds", str(shared_data / "crds")]
    )
    assert shown.exit_code == 0, shown.output
    [options] = seen
    assert (options.gpus, options.typed) == (64, sia_mix())  # --gpus left out: the mix's
    trace = workload(options, default_cluster())
    assert trace
    assert all(job.spec.types for job in trace)
    assert {t.gpu_type for t in trace[0].spec.types} == {"t4", "a100", "rtx2080ti"}
    # the sections travel in the profile annotation, and read back as they were
    for index, job in enumerate(trace[:4]):
        _, body = job_manifest(job, index, namespace="default", efficiency=True)
        notes = body["metadata"]["annotations"]
        profile = keys.parse_settings(notes).profile
        assert not isinstance(profile, keys.ConfigMapRef)
        assert profile.types == job.spec.types
        # what a type with more memory may run per GPU is allowed by the annotation
        assert int(notes[keys.MAX_BATCH_PER_GPU]) == max(t.m_max for t in job.spec.types)


@pytest.mark.slow
def test_a_mixed_demo_agrees_with_the_simulator_on_the_same_types(
    shared_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "demo.json"
    shown = CliRunner().invoke(
        main,
        ["demo", "--cluster", "mixed", "--minutes", "20", "--speedup", "60", "--seed", "3",
         "--crds", str(shared_data / "crds"), "--json-out", str(out), "--no-live"],
    )  # fmt: skip
    report = json.loads(out.read_text())
    live, simulated = report["live"], report["simulated"]
    assert live["mode"] == simulated["mode"] == "bellows"
    assert live["jobs_total"] == simulated["jobs_total"] > 3
    assert live["efficiency_charged"] is simulated["efficiency_charged"] is True
    bounds = {b["metric"]: b for b in report["bounds"]}
    # every bound, SJS efficiency's 5 % too, since a job that changes type carries its
    # progress into its new core (before, live came out 18 % above in one run in two)
    assert all(b["ok"] for b in bounds.values()), bounds
    assert report["ok"] is True
    assert shown.exit_code == 0, shown.output
