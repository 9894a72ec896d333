"""End to end: the live stack (nats-server, emulated Kubeflow, bridge, controller) against the
simulator on the same bursty trace, through the ``bellows demo`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.twin.demo import KUEUE_JCT_SHARE, KUEUE_SJS_SHARE, compare


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bellows", "paper", "kueue", "trainjob", "trainjob-kueue"])
def test_live_stack_agrees_with_the_simulator(mode: str, shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(
        main,
        [
            "demo", "--gpus", "8", "--minutes", "20", "--speedup", "60", "--seed", "3",
            "--crds", str(shared_data / "crds"), "--json-out", str(out),
            *(["--paper"] if mode == "paper" else []),
            *(["--kueue"] if mode.endswith("kueue") else []),
            # every job a Kubeflow Trainer v2 TrainJob: each resize a re-creation (beside
            # Kueue: in its queue, its Workload re-created with it)
            *(["--kinds", "trainjob"] if mode.startswith("trainjob") else []),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["ok"] is True
    live, simulated = report["live"], report["simulated"]
    # --kueue: Bellows mode, every job admitted by the emulated Kueue within its quota
    assert live["mode"] == simulated["mode"] == ("paper" if mode == "paper" else "bellows")
    assert live["jobs_total"] == simulated["jobs_total"] > 3
    # the comparison is not vacuous: jobs ran, and the elastic policy rescaled some of them
    assert live["jobs_completed_total"] == simulated["jobs_completed_total"] == live["jobs_total"]
    assert live["rescales"] > 0
    assert {b["metric"] for b in report["bounds"]} == {
        "jobs_completed", "sjs_efficiency", "avg_jct_min", "drop_ratio",
        "jobs_in_a_different_final_state",
    }  # fmt: skip
    # at goodput (the default): both halves charge the jobs' efficiency, and the live
    # controller decided every job by goodput (from its profile's model, then its reports)
    assert live["efficiency_charged"] is simulated["efficiency_charged"] is True
    if mode != "paper":  # paper mode decides by throughput, as the paper does
        assert live["jobs_decided_by_goodput"] == live["jobs_total"]
    # Kueue admits an arriving job at its owner's size before Bellows can hold it whenever
    # its quota is free: the count is reported (the job c4-00000 arrives on an idle cluster)
    # the pods ran on nodes of the profile's size, where the controller's node view placed
    # them as the simulator places (docs/kube.md, "Placement"); beside Kueue, which starts
    # jobs of its own accord, on the nodes Kueue's topology-aware scheduling gave them: the
    # fewest its flavor's free GPUs allow, as Bellows asks with its topology request (and
    # as Kueue's implicit default packs the jobs it admits before Bellows sizes them)
    assert 0.0 <= live["spread_job_time_share"] <= 0.05
    if not mode.endswith("kueue"):
        assert simulated["spread_job_time_share"] <= 0.05  # the simulator half on nodes too
    else:  # Kueue starts and places jobs itself: the simulator half is not on nodes
        assert "spread_job_time_share" not in simulated
    assert ("kueue_admitted_first" in live) == mode.endswith("kueue")
    if mode.endswith("kueue"):
        assert live["kueue_admitted_first"] >= 1


def test_demo_refuses_a_folder_without_crds(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--crds", str(tmp_path)])
    assert result.exit_code == 2
    assert "no CRD files" in result.output


def _summary(sjs: float, jct: float = 10.0, **extra: int) -> dict[str, float]:
    return {
        "jobs_completed": 10, "sjs_efficiency": sjs, "avg_jct_min": jct, "drop_ratio": 0.0,
        **extra,
    }  # fmt: skip


def test_average_jct_is_held_within_ten_percent() -> None:
    simulated = _summary(0.90)
    near = {b.metric: b for b in compare(_summary(0.90, jct=10.9), simulated)}
    assert near["avg_jct_min"].ok
    assert near["avg_jct_min"].tolerance == "within 10%"
    assert not {b.metric: b for b in compare(_summary(0.90, jct=11.1), simulated)}["avg_jct_min"].ok


def test_the_bounds_are_the_papers_unless_kueue_admitted_a_job_first() -> None:
    simulated = _summary(0.90)
    strict = {b.metric: b for b in compare(_summary(0.85), simulated)}  # 5.6 % off
    assert not strict["sjs_efficiency"].ok
    assert strict["sjs_efficiency"].tolerance == "within 5%"
    assert strict["jobs_completed"].ok
    assert strict["drop_ratio"].ok
    none_first = {b.metric: b for b in compare(_summary(0.85, kueue_admitted_first=0), simulated)}
    assert not none_first["sjs_efficiency"].ok
    beside = {b.metric: b for b in compare(_summary(0.85, kueue_admitted_first=2), simulated)}
    assert beside["sjs_efficiency"].ok
    assert beside["sjs_efficiency"].tolerance == "within 15% (2 admitted by Kueue first)"
    far = 0.90 * (1 - KUEUE_SJS_SHARE) - 0.01
    assert not {b.metric: b for b in compare(_summary(far, kueue_admitted_first=2), simulated)}[
        "sjs_efficiency"
    ].ok
    # average JCT likewise: 10 % without Kueue's early admission, 15 % with it
    late = {b.metric: b for b in compare(_summary(0.90, jct=11.2), simulated)}["avg_jct_min"]
    assert not late.ok
    kept = compare(_summary(0.90, jct=11.2, kueue_admitted_first=2), simulated)
    beside_jct = {b.metric: b for b in kept}["avg_jct_min"]
    assert beside_jct.ok
    assert beside_jct.tolerance == "within 15% (2 admitted by Kueue first)"
    over = 10.0 * (1 + KUEUE_JCT_SHARE) + 0.1
    assert not {b.metric: b for b in compare(_summary(0.90, jct=over, kueue_admitted_first=2),
                                             simulated)}["avg_jct_min"].ok  # fmt: skip
