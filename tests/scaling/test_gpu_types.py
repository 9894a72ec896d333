"""GPU types in the model (issue 39 item 1): typed clusters, sections per type, imputation,
and Sia's mix fitted from its measurements."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bellows.jobs import JobSpec, SpecError, StepProfile, TypeSection
from bellows.scaling import default_cluster, load_placements, processing_seconds
from bellows.scaling.accuracy import fit_type_cluster, fit_type_sections, load_sia_models
from bellows.scaling.gpu_types import SIA_TYPES, GpuType, TypedCluster, impute, sia_mix

SLOW = StepProfile((8, 32), (0.1, 0.3))


def _speed(section: TypeSection, local: int) -> float:
    return local / processing_seconds(section.profile, local)


def _job(**kw: object) -> JobSpec:
    base: dict[str, object] = {
        "name": "j", "b_min": 8, "b_max": 256, "batch_size": 8, "k_max": 8, "m_max": 32,
        "weights": 1000, "work": 1e6, "profile": SLOW,
    }  # fmt: skip
    base.update(kw)
    return JobSpec(**base)  # type: ignore[arg-type]


def test_sia_mix_is_sia_s_64_gpus() -> None:
    mix = sia_mix()
    assert mix.names == ("t4", "a100", "rtx2080ti")
    assert mix.capacities == (24, 16, 24)
    assert mix.total == 64
    assert [t.gpus_per_node for t in mix.types] == [4, 8, 8]
    assert mix.type("a100").product == "NVIDIA-A100-SXM4-40GB"
    assert mix.type("t4").cluster.inter_node == default_cluster().inter_node  # Pollux's T4s
    with pytest.raises(SpecError, match="one of t4, a100, rtx2080ti"):
        mix.type("h100")


def test_the_embedded_type_models_are_the_fits_of_the_measurements(shared_data: Path) -> None:
    for gpu in sia_mix().types:
        models = load_sia_models(shared_data / "sia" / "profiles", SIA_TYPES[gpu.name])
        fit = fit_type_cluster(models, gpus_per_node=gpu.gpus_per_node)
        for link in ("intra_node", "inter_node"):
            got, want = getattr(fit, link), getattr(gpu.cluster, link)
            assert got.per_weight == pytest.approx(want.per_weight, rel=1e-3), (gpu.name, link)
            assert got.latency == pytest.approx(want.latency, rel=1e-3, abs=1e-12), gpu.name
        assert fit.overlap == pytest.approx(gpu.cluster.overlap, rel=1e-3)


def test_sections_carry_each_type_s_memory_and_speed(shared_data: Path) -> None:
    """The data's README: bert fits 12 a GPU on a T4, 48 on an A100; yolov3 16 / 32 / 8; an
    A100 is about 7x a T4 for cifar10 but 2.5x for deepspeech2; a 2080 Ti is slower than a T4
    for yolov3."""
    sections = {}
    for gpu in sia_mix().types:
        models = load_sia_models(shared_data / "sia" / "profiles", SIA_TYPES[gpu.name])
        sections[gpu.name] = fit_type_sections(models, gpu.cluster, gpu.name)
    assert [sections[t]["bert"].m_max for t in ("t4", "a100", "rtx2080ti")] == [12, 48, 12]
    assert [sections[t]["yolov3"].m_max for t in ("t4", "a100", "rtx2080ti")] == [16, 32, 8]

    def top(t: str, model: str) -> float:
        return _speed(sections[t][model], sections[t][model].m_max)

    assert 6.0 < top("a100", "cifar10") / top("t4", "cifar10") < 8.0
    assert 2.0 < top("a100", "deepspeech2") / top("t4", "deepspeech2") < 3.0
    assert top("rtx2080ti", "yolov3") < top("t4", "yolov3")
    assert all(not s.imputed for by in sections.values() for s in by.values())


def test_sia_s_files_load_with_their_own_column_order(shared_data: Path) -> None:
    rows = load_placements(shared_data / "sia" / "profiles" / "cifar10" / "placements-dgx-ext.csv")
    assert rows[0].placement == "1"
    assert rows[0].local_batch == 32
    assert max(r.gpus for r in rows) == 16  # two DGX nodes of 8


def test_a_job_on_a_type_is_a_one_type_job() -> None:
    a100 = TypeSection("a100", StepProfile((8, 128), (0.02, 0.1)), 2000, 128)
    t4 = TypeSection("t4", SLOW, 1000, 32)
    job = _job(types=(t4, a100))
    on = job.on("a100")
    assert on is not None
    assert (on.profile, on.weights, on.m_max, on.types) == (a100.profile, 2000, 128, ())
    assert (on.name, on.b_max) == (job.name, job.b_max)
    assert job.on("rtx2080ti") is None
    assert job.type_names == ("t4", "a100")
    # a type whose memory holds no batch of the job's range on k_max GPUs: not a choice
    tiny = TypeSection("small", SLOW, 1000, 1)
    assert _job(b_min=64, batch_size=64, types=(tiny,)).on("small") is None


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"types": (TypeSection("t4", SLOW, 1, 8), TypeSection("t4", SLOW, 1, 8))}, "types"),
        ({"types": [TypeSection("t4", SLOW, 1, 8)]}, "types"),
    ],
)
def test_bad_sections_are_refused_by_name(kw: dict[str, object], field: str) -> None:
    with pytest.raises(SpecError) as err:
        _job(**kw)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("args", "field"),
    [(("", SLOW, 1, 8), "gpu_type"), (("t4", SLOW, 0, 8), "weights"),
     (("t4", SLOW, 1, 0), "m_max"), (("t4", "fast", 1, 8), "profile")],
)  # fmt: skip
def test_a_bad_section_is_refused_by_name(args: tuple[object, ...], field: str) -> None:
    with pytest.raises(SpecError) as err:
        TypeSection(*args)  # type: ignore[arg-type]
    assert err.value.field == field


def test_impute_scales_by_the_class_s_median_ratio() -> None:
    own = [TypeSection("t4", SLOW, 1000, 32)]
    peers = []
    for ratio in (6.0, 7.0, 9.0):
        fast = StepProfile(SLOW.local_batches, tuple(s / ratio for s in SLOW.seconds))
        peers.append([TypeSection("t4", SLOW, 1000, 32), TypeSection("a100", fast, 3000, 64)])
    got = impute(own, "a100", peers)
    assert got is not None
    assert got.imputed
    assert got.gpu_type == "a100"
    assert _speed(got, 32) == pytest.approx(7.0 * _speed(own[0], 32))
    assert (got.m_max, got.weights) == (64, 3000)
    assert impute(own, "rtx2080ti", peers) is None  # no peer measured there
    assert impute(own, "a100", []) is None
    # an imputed section is never a source
    assert impute([replace(own[0], imputed=True)], "a100", peers) is None


def test_impute_from_the_class_itself_gives_back_its_measurement(shared_data: Path) -> None:
    """A job measured on T4 only, whose class was measured on both: its A100 section is the
    class's own speed there (at the batch both hold)."""
    sections = {}
    for gpu in sia_mix().types:
        models = load_sia_models(shared_data / "sia" / "profiles", SIA_TYPES[gpu.name])
        sections[gpu.name] = fit_type_sections(models, gpu.cluster, gpu.name)
    for model in ("cifar10", "imagenet", "bert"):
        t4, a100 = sections["t4"][model], sections["a100"][model]
        got = impute([t4], "a100", [[t4, a100]])
        assert got is not None
        local = min(t4.m_max, a100.m_max)
        assert _speed(got, local) == pytest.approx(_speed(a100, local), rel=1e-9), model
        assert got.m_max == a100.m_max


def test_a_typed_cluster_refuses_bad_types() -> None:
    with pytest.raises(SpecError):
        TypedCluster(())
    t4 = sia_mix().type("t4")
    with pytest.raises(SpecError, match="unique"):
        TypedCluster((t4, t4))
    with pytest.raises(SpecError) as err:
        GpuType("x", -1, default_cluster())
    assert err.value.field == "types[x].nodes"
