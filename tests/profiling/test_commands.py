"""``bellows profile`` and ``bellows calibrate`` on this CPU, with a tiny model and sizes."""

from __future__ import annotations

import csv
import json
import textwrap
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from bellows.cli.main import main
from bellows.jobs import SpecError
from bellows.profiling import SyntheticBatch, TorchWorkload, load_object, parse_shape
from bellows.scaling import parse_cluster_profile, parse_job_profile
from tests.ship import kube_schemas

torch = pytest.importorskip("torch")

MODELS = textwrap.dedent(
    """
    import torch

    def mlp(width=16, inputs=8):
        return torch.nn.Sequential(
            torch.nn.Linear(inputs, width), torch.nn.ReLU(), torch.nn.Linear(width, 4)
        )

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 8)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, tokens):
            hidden = self.embed(tokens).mean(dim=1)
            return {"logits": self.head(hidden), "hidden": hidden}

    def frozen():
        model = torch.nn.Linear(2, 2)
        model.requires_grad_(False)
        return model

    not_a_model = 42
    """
)


@pytest.fixture
def models(tmp_path: Path) -> Path:
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def test_model_references_resolve_from_modules_and_files(models: Path) -> None:
    assert load_object("json:dumps") is json.dumps
    assert callable(load_object(f"{models}:mlp"))
    for bad, valid in [
        ("json", "package.module:factory"),
        ("no_such_module_here:x", "importable module"),
        ("json:nope", "a name defined in json"),
        (f"{models.parent / 'missing.py'}:mlp", "existing Python file"),
    ]:
        with pytest.raises(SpecError, match=valid):
            load_object(bad)


def test_shapes_parse_or_are_named() -> None:
    assert parse_shape("3,224,224") == (3, 224, 224)
    assert parse_shape("3x32x32") == (3, 32, 32)
    for bad in ["", "3,-1", "a,b"]:
        with pytest.raises(SpecError, match="--input-shape"):
            parse_shape(bad)


def test_workload_counts_trainable_weights_and_trains(models: Path) -> None:
    workload = TorchWorkload(
        load_object(f"{models}:mlp"), SyntheticBatch((8,), classes=4), factory_kwargs={"width": 5}
    )
    assert workload.weights == 8 * 5 + 5 + 5 * 4 + 4
    before = [p.detach().clone() for p in workload.model.parameters()]
    workload.make_step(6)()
    after = list(workload.model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_token_models_with_mapping_outputs_are_supported(models: Path) -> None:
    workload = TorchWorkload(load_object(f"{models}:Tagger"), SyntheticBatch((12,), vocab=50))
    workload.make_step(4)()  # token ids below 50; the loss goes on the first output tensor
    assert workload.weights == 50 * 8 + 8 * 3 + 3


def test_workload_refuses_what_cannot_be_profiled(models: Path) -> None:
    with pytest.raises(SpecError, match=r"nn\.Module"):
        TorchWorkload(lambda: 42, SyntheticBatch((2,)))
    with pytest.raises(SpecError, match="trainable weights"):
        TorchWorkload(load_object(f"{models}:frozen"), SyntheticBatch((2,)))
    with pytest.raises(SpecError, match="--optimizer"):
        TorchWorkload(load_object(f"{models}:mlp"), SyntheticBatch((8,)), optimizer="lbfgs")
    assert TorchWorkload.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate"))
    assert not TorchWorkload.is_out_of_memory(RuntimeError("size mismatch"))


def test_profile_command_writes_a_job_profile(models: Path, tmp_path: Path) -> None:
    output = tmp_path / "profile.json"
    result = CliRunner().invoke(
        main,
        [
            "profile",
            "--model",
            f"{models}:mlp",
            "--input-shape",
            "8",
            "--classes",
            "4",
            "--batches",
            "16,4,8",
            "--iterations",
            "3",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--device",
            "cpu",
            "-o",
            str(output),
        ],
    )
    assert result.exit_code == 0, result.output
    profile = parse_job_profile(json.loads(output.read_text()))
    assert profile.weights == 8 * 16 + 16 + 16 * 4 + 4
    assert profile.step.local_batches == (4, 8, 16)
    assert all(s > 0 for s in profile.step.seconds)
    assert "models.py:mlp" in profile.source
    assert "local batch" in result.output
    assert f"wrote {output}" in result.output


def test_profile_command_can_write_the_configmap_a_job_points_to(
    models: Path, tmp_path: Path
) -> None:
    output = tmp_path / "profile-configmap.yaml"
    result = CliRunner().invoke(
        main,
        [
            "profile",
            "--model",
            f"{models}:mlp",
            "--model-kwargs",
            '{"width": 4}',
            "--input-shape",
            "8",
            "--batches",
            "2",
            "--iterations",
            "1",
            "--warmup",
            "0",
            "--configmap",
            "resnet-profile",
            "-o",
            str(output),
        ],
    )
    assert result.exit_code == 0, result.output
    config_map = yaml.safe_load(output.read_text())
    kube_schemas.validate(config_map)
    assert config_map["metadata"]["name"] == "resnet-profile"
    profile = parse_job_profile(json.loads(config_map["data"]["profile.json"]))
    assert profile.step.local_batches == (2,)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "json"], "--model='json'"),
        (["--model-kwargs", "[1]"], "a JSON object"),
        (["--batches", "0,4"], "item 1 is '0', expected an integer in [1, 1048576]"),
        (["--batches", "8,nan"], "item 2 is 'nan'"),
        (["--input-shape", "x"], "--input-shape"),
    ],
)
def test_profile_command_names_bad_options(models: Path, args: list[str], message: str) -> None:
    base = {
        "--model": f"{models}:mlp",
        "--input-shape": "8",
        "--batches": "2",
        "--model-kwargs": "{}",
    }
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flat = [item for pair in base.items() for item in pair]
    result = CliRunner().invoke(main, ["profile", *flat, "-o", "-"])
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.slow
def test_calibrate_command_times_gloo_allreduce_and_writes_a_cluster_profile(
    tmp_path: Path,
) -> None:
    output, raw = tmp_path / "cluster.json", tmp_path / "allreduce.csv"
    result = CliRunner().invoke(
        main,
        [
            "calibrate",
            "--backend",
            "gloo",
            "--processes",
            "2",
            "--sizes",
            "1e3,1e7",
            "--iterations",
            "3",
            "--warmup",
            "1",
            "--gpus-per-node",
            "8",
            "-o",
            str(output),
            "--measurements",
            str(raw),
            "--gpu-type",
            "a100",
        ],
    )
    assert result.exit_code == 0, result.output
    cluster = parse_cluster_profile(json.loads(output.read_text()))
    assert cluster.gpus_per_node == 8
    assert cluster.gpu_type == "a100"
    assert cluster.inter_node == cluster.intra_node
    assert "copied from intra-node" in cluster.source
    rows = list(csv.DictReader(raw.open()))
    assert [(r["processes"], r["weights"]) for r in rows] == [("2", "1000"), ("2", "10000000")]
    assert all(float(r["seconds"]) > 0 for r in rows)
    # Ten thousand times more data (40 MB against 4 kB) takes longer to all-reduce, by far
    # more than the scheduling noise of a shared machine, and the fit says so.
    assert float(rows[1]["seconds"]) > float(rows[0]["seconds"])
    assert cluster.intra_node.per_weight > 0


def test_calibrate_refuses_one_process() -> None:
    result = CliRunner().invoke(main, ["calibrate", "--backend", "gloo", "--processes", "1"])
    assert result.exit_code == 2
    assert "item 1 is '1', expected an integer in [2, 1024]" in result.output


def _profile_args(models: Path, output: Path, *more: str) -> list[str]:
    return ["profile", "--model", f"{models}:mlp", "--input-shape", "8", "--classes", "4",
            "--batches", "4,8", "--iterations", "1", "--warmup", "0", "--threads", "1",
            "--device", "cpu", "--noise-draws", "0", "-o", str(output), *more]  # fmt: skip


def test_profile_on_a_gpu_type_writes_and_adds_its_section(models: Path, tmp_path: Path) -> None:
    """``--gpu-type`` makes the run the profile's section for that type; ``--add-to`` adds
    one to an existing profile, keeping the rest (issue 39)."""
    first, both = tmp_path / "t4.json", tmp_path / "both.json"
    result = CliRunner().invoke(main, _profile_args(models, first, "--gpu-type", "t4"))
    assert result.exit_code == 0, result.output
    t4 = parse_job_profile(json.loads(first.read_text()))
    assert [t.gpu_type for t in t4.types] == ["t4"]
    assert t4.types[0].profile == t4.step
    assert t4.types[0].m_max == 8
    more = ("--gpu-type", "a100", "--add-to", str(first))
    result = CliRunner().invoke(main, _profile_args(models, both, *more))
    assert result.exit_code == 0, result.output
    merged = parse_job_profile(json.loads(both.read_text()))
    assert [t.gpu_type for t in merged.types] == ["t4", "a100"]
    assert merged.step == t4.step  # the default section is the file's
    assert merged.types[0] == t4.types[0]


@pytest.mark.parametrize(
    ("more", "message"),
    [
        (("--add-to", "x.json"), "--add-to needs --gpu-type"),
        (("--gpu-type", "A100"), "--gpu-type"),
        (("--gpu-type", "a100", "--add-to", "missing.json"), "missing.json"),
    ],
)
def test_profile_on_a_gpu_type_names_bad_options(
    models: Path, tmp_path: Path, more: tuple[str, ...], message: str
) -> None:
    args = _profile_args(models, tmp_path / "out.json", *more)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output
