"""The Pollux artifact's physics as opt-in truths (issue 36): measured statistical efficiency
(bellows.sim.measured), measured step times (run(step_seconds=...)) and the artifact's batches
(import_pollux(batches="accumulate"))."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bellows.autoscaler import AutoscalerConfig
from bellows.jobs import SpecError
from bellows.scaling import MODEL_EFFICIENCY, default_cluster, step_time
from bellows.scaling.efficiency import ValidationRun
from bellows.scaling.online import ProgressReport
from bellows.sim import run
from bellows.sim.learning import Learning, OnlineLearner
from bellows.sim.measured import MeasuredEfficiency, measured_efficiency
from bellows.sim.pollux.speedups import RowCache
from bellows.sim.workloads.importing import POLLUX_EPOCHS, POLLUX_MAX_REPLICAS, import_pollux
from bellows.sim.workloads.traces import TraceJob
from tests.strategies import make_job

CLUSTER = default_cluster()


def _run(batch: int, progress: tuple[float, ...], sqr: tuple[float, ...],
         var: tuple[float, ...]) -> ValidationRun:  # fmt: skip
    n = len(progress)
    return ValidationRun(batch, progress, (1.0,) * n, (0.0,) * n, sqr, var)


def _two_epochs() -> MeasuredEfficiency:
    """M0 = 10; epochs end at 100 and 300 reference samples (the least over the runs)."""
    runs = [
        _run(10, (100.0, 300.0), (1.0, 1.0), (1.0, 3.0)),
        _run(30, (120.0, 310.0), (1.0, 2.0), (3.0, 6.0)),
    ]
    return MeasuredEfficiency.from_runs(runs, 2)


def test_efficiency_is_pollux_formula_on_each_epochs_measured_statistics() -> None:
    """At b = 20 (halfway): epoch 0 sqr 1, var 2; epoch 1 sqr 1.5, var 4.5; scale 2."""
    e = _two_epochs()
    assert e.bounds.tolist() == [0.0, 100.0, 300.0]
    assert e.epoch_efficiency(20).tolist() == pytest.approx([3 / 4, 6 / 7.5])
    assert e.epoch_efficiency(10).tolist() == pytest.approx([1.0, 1.0])  # E(M0) = 1


def test_samples_and_progress_are_exact_inverses_across_epochs() -> None:
    e = _two_epochs()
    # from 50 to 200 at b = 20: 50 / 0.75 in epoch 0, 100 / 0.8 in epoch 1
    assert float(e.samples_between(20, 50.0, 200.0)) == pytest.approx(50 / 0.75 + 100 / 0.8)
    assert float(e.progress_after(20, 50.0, 50 / 0.75 + 100 / 0.8)) == pytest.approx(200.0)
    # past the last epoch: its E goes on
    assert float(e.samples_between(20, 300.0, 400.0)) == pytest.approx(100 / 0.8)
    assert float(e.progress_after(20, 300.0, 125.0)) == pytest.approx(400.0)
    ends = np.array([100.0, 250.0])
    assert e.samples_between(20, 0.0, ends).tolist() == pytest.approx(
        [100 / 0.75, 100 / 0.75 + 150 / 0.8]
    )
    with pytest.raises(SpecError):
        e.samples_between(20, 200.0, 100.0)


def test_the_artifacts_yolov3_efficiency_at_its_trace_batch(shared_data: Path) -> None:
    """yolov3 at 64 over its whole work: 0.81 reference samples per sample (our fitted
    profile says 0.87), as benchmarks/fidelity.py --alone shows."""
    truth = measured_efficiency(shared_data / "pollux" / "profiles", POLLUX_EPOCHS)
    assert set(truth) == set(POLLUX_EPOCHS)
    work = float(truth["yolov3"].bounds[-1])
    assert work / float(truth["yolov3"].samples_between(64, 0.0, work)) == pytest.approx(
        0.810, abs=0.002
    )
    fitted = MODEL_EFFICIENCY["yolov3"]
    assert work / float(fitted.samples(64, work)) > 0.85


def test_a_measured_truth_charges_the_jobs_and_leaves_the_decisions(shared_data: Path) -> None:
    """One yolov3 job alone, rigid: with the measured truth it takes 1 / 0.81 of the samples
    at its batch, against 1 / E of the fitted profile without it."""
    truth = measured_efficiency(shared_data / "pollux" / "profiles", {"yolov3": 50})
    spec = make_job("y", gpus=1, elastic=False, batch_size=64, b_min=8, b_max=64, k_max=1,
                    m_max=64)  # fmt: skip
    work = float(truth["yolov3"].bounds[-1])
    job = TraceJob(0.0, dataclasses.replace(spec, work=work), "yolov3")
    config = AutoscalerConfig(restart_s=0.0, delta_s=60.0)
    both = [
        run([job], gpus=4, config=config, cluster=CLUSTER, efficiency=MODEL_EFFICIENCY,
            nodes=True, tiresias=True, efficiency_truth=t)
        for t in (None, truth)
    ]  # fmt: skip
    fitted, measured = (r.jobs[0].finish_s for r in both)
    assert fitted is not None
    assert measured is not None
    samples = float(truth["yolov3"].samples_between(64, 0.0, work))
    rate = work / float(MODEL_EFFICIENCY["yolov3"].samples(64, work))
    assert measured / fitted == pytest.approx(samples / work * rate, rel=1e-6)


def test_a_measured_step_truth_sets_the_rate_on_the_placement() -> None:
    """With ``step_seconds`` a job of 100 steps of 2 s takes 200 s, whatever the JSA says."""
    spec = make_job("a", gpus=2, elastic=False, batch_size=64, b_max=64, k_max=2)
    job = TraceJob(0.0, dataclasses.replace(spec, work=6400.0), "x")
    seen = []

    def steps(model: str, spec_: object, placement: tuple[tuple[int, int], ...],
              batch: int) -> float:  # fmt: skip
        seen.append((model, placement, batch))
        return 2.0

    config = AutoscalerConfig(restart_s=0.0, delta_s=60.0)
    result = run([job], gpus=8, config=config, cluster=CLUSTER, nodes=True, tiresias=True,
                 step_seconds=steps)  # fmt: skip
    assert result.jobs[0].finish_s == pytest.approx(200.0)
    assert seen == [("x", ((0, 2),), 64)]
    with pytest.raises(SpecError):
        run([job], gpus=8, config=config, cluster=CLUSTER, step_seconds=steps)


def test_progress_reports_carry_the_measured_step_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a learning setup and ``step_seconds``, a stepping job reports the step time it
    really takes on its placement (what the live controller would hear), not the JSA's."""
    spec = make_job("a", gpus=2, elastic=True, batch_size=64, b_max=64, k_max=2)
    job = TraceJob(0.0, dataclasses.replace(spec, work=64.0 * 400), "x")
    jsa = step_time(spec, 2, 64, CLUSTER, nodes=1)
    heard: list[float] = []
    report = OnlineLearner.report

    def listening(self: OnlineLearner, auto: object, told: object, got: ProgressReport,
                  now: float, **options: Any) -> bool:  # fmt: skip
        heard.append(got.step_seconds)
        return report(self, auto, told, got, now, **options)  # type: ignore[arg-type]

    monkeypatch.setattr(OnlineLearner, "report", listening)

    def steps(model: str, spec_: object, placement: tuple[tuple[int, int], ...],
              batch: int) -> float:  # fmt: skip
        return 3.0 * jsa

    config = AutoscalerConfig(restart_s=0.0, delta_s=60.0)
    learning = Learning({}, report_s=60.0, learn=True)
    result = run([job], gpus=2, config=config, cluster=CLUSTER, nodes=True,
                 step_seconds=steps, learning=learning)  # fmt: skip
    assert result.stats.reports == len(heard) > 0
    assert heard == pytest.approx([3.0 * jsa] * len(heard))


def test_a_charged_job_reports_the_samples_it_processed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Charged with efficiency, a job progresses in reference samples but reports the
    samples it processed, as a real job does (the controller has its reference samples from
    its gradient noise): the report checks' pace then reads its true step time, not one
    inflated by ``1 / E(b)`` (at E 0.2 a fivefold step time, which the fit and the placement
    memory learned before); the core is revised with its reference samples."""
    spec = make_job("a", gpus=2, batch_size=512, b_min=512, b_max=512, k_max=2, m_max=256)
    job = TraceJob(0.0, dataclasses.replace(spec, work=512.0 * 2000), "cifar10")
    heard: list[tuple[float, float | None]] = []
    learned: list[dict[tuple[int, int], float]] = []
    report = OnlineLearner.report

    def listening(self: OnlineLearner, auto: object, told: object, got: ProgressReport,
                  now: float, **options: Any) -> bool:  # fmt: skip
        heard.append((got.samples, options.get("reference")))
        revised = report(self, auto, told, got, now, **options)  # type: ignore[arg-type]
        learned.append(self._jobs["a"].log.medians())
        return revised

    monkeypatch.setattr(OnlineLearner, "report", listening)
    config = AutoscalerConfig(restart_s=0.0, delta_s=60.0)
    learning = Learning({}, report_s=60.0, learn=True)
    efficiency = {"cifar10": MODEL_EFFICIENCY["cifar10"]}
    run([job], gpus=2, config=config, cluster=CLUSTER, learning=learning, efficiency=efficiency)
    assert len(heard) > 2
    for seen, reference in heard:
        assert reference is not None
        assert seen > 1.2 * reference  # E(512) below 1 for cifar10
    truth = step_time(spec, 2, 512, CLUSTER)
    assert learned[-1][2, 512] == pytest.approx(truth, rel=0.05)


def test_the_artifacts_batches_keep_the_trace_batch_by_accumulation(tmp_path: Path) -> None:
    """bert 384 on 6 GPUs: clipped to 6 x 12 = 72 by default, kept with accumulation (its
    per-GPU limit raised to the largest validation batch); yolov3's profile cut at 8."""
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "b,0,bert,6,384\ny,5,yolov3,4,64\n")  # fmt: skip
    default = {j.spec.name: j.spec for j in import_pollux(csv)}
    artifact = {j.spec.name: j.spec for j in import_pollux(csv, batches="accumulate")}
    assert default["b"].batch_size == 72
    assert artifact["b"].batch_size == 384
    assert artifact["b"].b_max == artifact["b"].m_max == 384
    assert default["y"].profile.local_batches[-1] == 16
    assert artifact["y"].profile.local_batches[-1] == 8
    assert artifact["y"].b_max == 512
    with pytest.raises(SpecError):
        import_pollux(csv, batches="more")


def test_the_artifacts_batches_bound_gpus_as_its_max_replicas(tmp_path: Path) -> None:
    """With accumulation a job may take as many GPUs as the artifact's simulator lets it:
    the largest batch over the smallest per-GPU batch, at most 64 (yolov3 512 / 4, bert 384
    / 4), never fewer than the trace asked; by default 8 (``K_MAX``) or the trace's."""
    csv = tmp_path / "w.csv"
    csv.write_text("name,time,application,num_replicas,batch_size\n"
                   "b,0,bert,6,384\ny,5,yolov3,4,64\nd,9,deepspeech2,12,120\n")  # fmt: skip
    default = {j.spec.name: j.spec for j in import_pollux(csv)}
    artifact = {j.spec.name: j.spec for j in import_pollux(csv, batches="accumulate")}
    assert [default[n].k_max for n in "byd"] == [8, 8, 12]
    assert artifact["y"].k_max == POLLUX_MAX_REPLICAS == 64
    assert artifact["b"].k_max == min(64, 384 // artifact["b"].b_min)
    assert artifact["d"].k_max == min(64, 640 // artifact["d"].b_min)


def test_the_pollux_reference_decides_with_the_measured_step_times() -> None:
    """Its goodput rows come from ``measured`` when given: a truth of 1 000 samples/s on any
    placement makes every feasible count worth 1 000 (uncharged), whatever the JSA says."""
    spec = make_job("p", b_min=32, b_max=512, k_max=8, m_max=128)
    calls: list[tuple[tuple[int, int], ...]] = []

    def steps(model: str, job: object, placement: tuple[tuple[int, int], ...],
              batch: int) -> float:  # fmt: skip
        calls.append(placement)
        return batch / 1000.0

    rows = RowCache(CLUSTER, steps).rows([spec], {}, {})[0]
    assert rows.packed[0] == 0.0
    assert rows.packed[1:].tolist() == pytest.approx([1000.0] * 8)
    assert ((0, 4), (1, 2)) in calls  # 6 GPUs packed: a whole node, then 2
    assert ((0, 2), (1, 1)) in calls  # 3 GPUs spread over two nodes
    jsa = RowCache(CLUSTER).rows([spec], {}, {})[0]
    assert jsa.packed[1:].tolist() != pytest.approx([1000.0] * 8)
