"""Profiles: validation on construction, JSON parsing with field names, schemas, files."""

from __future__ import annotations

import copy
import json
import math
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bellows.jobs import SpecError, StepProfile
from bellows.scaling import (
    ClusterProfile,
    JobProfile,
    LinkCost,
    cluster_profile_to_json,
    default_cluster,
    job_profile_to_json,
    load_cluster_profile,
    load_job_profile,
    parse_cluster_profile,
    parse_job_profile,
    save_cluster_profile,
    save_job_profile,
)

STEP = StepProfile((32, 64), (0.21, 0.4))
JOB_DOC: dict[str, Any] = {
    "apiVersion": "bellows.io/v1alpha1",
    "kind": "JobProfile",
    "weights": 25557032,
    "step": [{"localBatch": 32, "seconds": 0.21}, {"localBatch": 64, "seconds": 0.4}],
    "source": "test",
}


def schema(name: str) -> dict[str, Any]:
    text = resources.files("bellows.scaling").joinpath(f"schemas/{name}").read_text()
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: LinkCost(-1.0, 0.0), "latency"),
        (lambda: LinkCost(0.0, math.nan), "per_weight"),
        (lambda: LinkCost(0.0, True), "per_weight"),
        (lambda: ClusterProfile(LinkCost(0, 0), "x"), "inter_node"),  # type: ignore[arg-type]
        (lambda: ClusterProfile("x", LinkCost(0, 0)), "intra_node"),  # type: ignore[arg-type]
        (lambda: ClusterProfile(LinkCost(0, 0), LinkCost(0, 0), overlap=0.5), "overlap"),
        (lambda: ClusterProfile(LinkCost(0, 0), LinkCost(0, 0), overlap=99.0), "overlap"),
        (lambda: ClusterProfile(LinkCost(0, 0), LinkCost(0, 0), gpus_per_node=0), "gpus_per_node"),
        (lambda: ClusterProfile(LinkCost(0, 0), LinkCost(0, 0), source=3), "source"),  # type: ignore[arg-type]
        (lambda: JobProfile(0, STEP), "weights"),
        (lambda: JobProfile(10, "x"), "step"),  # type: ignore[arg-type]
        (lambda: JobProfile(10, STEP, source=None), "source"),  # type: ignore[arg-type]
        (lambda: JobProfile(10, STEP, comm_weights=0), "comm_weights"),
    ],
)
def test_construction_names_the_field(build: Any, field: str) -> None:
    with pytest.raises(SpecError) as info:
        build()
    assert info.value.field == field
    assert "expected" in str(info.value)


def test_allreduce_model() -> None:
    cluster = ClusterProfile(LinkCost(0.001, 1e-9), LinkCost(0.002, 4e-9), gpus_per_node=4)
    assert cluster.allreduce_seconds(10**8, 1) == 0.0
    # 4 GPUs fit on one node: intra-node link; 3 ring steps, 2*3/4 of the buffer.
    assert cluster.allreduce_seconds(10**8, 4) == pytest.approx(0.003 + 1e-9 * 1e8 * 1.5)
    # 5 GPUs need two nodes: inter-node link.
    assert cluster.allreduce_seconds(10**8, 5) == pytest.approx(0.008 + 4e-9 * 1e8 * 1.6)
    # A measured spread placement overrides the packed one.
    assert cluster.allreduce_seconds(10**8, 2, nodes=2) == pytest.approx(0.002 + 0.4)
    with pytest.raises(SpecError, match="gpus"):
        cluster.allreduce_seconds(10**8, 0)
    assert cluster.combine(0.3, 0.4) == pytest.approx(0.7)
    overlapped = ClusterProfile(LinkCost(0, 0), LinkCost(0, 0), overlap=2.0)
    assert overlapped.combine(0.3, 0.4) == pytest.approx(0.5)


def test_job_json_round_trip_and_schema() -> None:
    profile = parse_job_profile(JOB_DOC)
    assert profile == JobProfile(25557032, STEP, "test")
    assert profile.effective_weights == 25557032
    assert job_profile_to_json(profile) == JOB_DOC
    jsonschema.validate(JOB_DOC, schema("job-profile.schema.json"))
    tuned = JobProfile(10, STEP, comm_weights=7)
    doc = job_profile_to_json(tuned)
    assert doc["commWeights"] == 7
    assert parse_job_profile(doc).effective_weights == 7
    jsonschema.validate(doc, schema("job-profile.schema.json"))


def test_cluster_json_round_trip_and_schema() -> None:
    doc = cluster_profile_to_json(default_cluster())
    jsonschema.validate(doc, schema("cluster-profile.schema.json"))
    assert parse_cluster_profile(doc) == default_cluster()
    assert "gpuType" not in doc
    typed = {**doc, "gpuType": "a100"}
    jsonschema.validate(typed, schema("cluster-profile.schema.json"))
    assert parse_cluster_profile(typed).gpu_type == "a100"
    assert cluster_profile_to_json(parse_cluster_profile(typed)) == typed
    with pytest.raises(SpecError) as err:
        parse_cluster_profile({**doc, "gpuType": "A100"})
    assert err.value.field == "gpuType"
    minimal = {k: doc[k] for k in ("apiVersion", "kind", "allreduce")}
    parsed = parse_cluster_profile(minimal)
    assert parsed.overlap == 1.0
    assert parsed.gpus_per_node == 4


def mutate(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    target = out
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("apiVersion",), "v2", "apiVersion"),
        (("kind",), "ClusterProfile", "kind"),
        (("weights",), 0, "weights"),
        (("weights",), 1.5, "weights"),
        (("weights",), KeyError, "weights"),
        (("step",), [], "step"),
        (("step", 1, "localBatch"), 32, "step[1].localBatch"),
        (("step", 0, "localBatch"), "32", "step[0].localBatch"),
        (("step", 1, "seconds"), 0, "step[1].seconds"),
        (("step", 1, "seconds"), -1.0, "step[1].seconds"),
        (("step", 1, "extra"), 1, "step[1].extra"),
        (("step", 0), 5, "step[0]"),
        (("source",), 5, "source"),
        (("commWeights",), 0, "commWeights"),
        (("weight",), 3, "weight"),
    ],
)
def test_bad_job_json_names_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    bad = mutate(JOB_DOC, path, value)
    with pytest.raises(SpecError) as info:
        parse_job_profile(bad)
    assert info.value.field == field
    if field == "step[1].localBatch" and value == 32:
        return  # "strictly increasing" is beyond what JSON Schema can say
    # The shipped schema refuses the same documents.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("job-profile.schema.json"))


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("overlap",), 0.9, "overlap"),
        (("gpusPerNode",), 0, "gpusPerNode"),
        (("allreduce", "interNode"), KeyError, "allreduce.interNode"),
        (("allreduce", "intraNode", "latency"), -1, "allreduce.intraNode.latency"),
        (
            ("allreduce", "interNode", "secondsPerWeight"),
            "x",
            "allreduce.interNode.secondsPerWeight",
        ),
        (("allreduce", "intraNode", "bandwidth"), 1, "allreduce.intraNode.bandwidth"),
        (("kind",), "JobProfile", "kind"),
    ],
)
def test_bad_cluster_json_names_the_field(path: tuple[Any, ...], value: Any, field: str) -> None:
    bad = mutate(cluster_profile_to_json(default_cluster()), path, value)
    with pytest.raises(SpecError) as info:
        parse_cluster_profile(bad)
    assert info.value.field == field
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema("cluster-profile.schema.json"))


def test_files(tmp_path: Path) -> None:
    job = JobProfile(10, STEP, "file", comm_weights=12)
    save_job_profile(tmp_path / "job.json", job)
    assert load_job_profile(tmp_path / "job.json") == job
    save_cluster_profile(tmp_path / "cluster.json", default_cluster())
    assert load_cluster_profile(tmp_path / "cluster.json") == default_cluster()
    (tmp_path / "broken.json").write_text('{"weights": ')
    with pytest.raises(SpecError, match=r"broken\.json.*line 1"):
        load_job_profile(tmp_path / "broken.json")
    (tmp_path / "bad.json").write_text(json.dumps(mutate(JOB_DOC, ("weights",), -3)))
    with pytest.raises(SpecError) as info:
        load_job_profile(tmp_path / "bad.json")
    assert info.value.field == f"{tmp_path / 'bad.json'}: weights"
    with pytest.raises(SpecError, match="readable"):
        load_cluster_profile(tmp_path / "missing.json")


TYPED_DOC = {
    **JOB_DOC,
    "types": {
        "a100": {"weights": 1000, "maxLocalBatch": 800,
                 "step": [{"localBatch": 32, "seconds": 0.05},
                          {"localBatch": 800, "seconds": 0.6}]},
        "t4": {"weights": 25557032, "maxLocalBatch": 200,
               "step": [{"localBatch": 32, "seconds": 0.2}]},
    },
}  # fmt: skip


def test_a_profile_s_sections_per_gpu_type_round_trip_and_validate() -> None:
    profile = parse_job_profile(TYPED_DOC)
    assert [t.gpu_type for t in profile.types] == ["a100", "t4"]
    a100 = profile.types[0]
    assert (a100.weights, a100.m_max, a100.imputed) == (1000, 800, False)
    assert a100.profile.local_batches == (32, 800)
    assert job_profile_to_json(profile) == TYPED_DOC
    jsonschema.validate(TYPED_DOC, schema("job-profile.schema.json"))


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("types", "a100", "maxLocalBatch"), 0, "types.a100.maxLocalBatch"),
        (("types", "a100", "weights"), "many", "types.a100.weights"),
        (("types", "a100", "step", 1, "seconds"), -1.0, "types.a100.step[1].seconds"),
        (("types", "a100", "step", 1, "localBatch"), 8, "types.a100.step[1].localBatch"),
        (("types", "a100", "memory"), 40, "types.a100.memory"),
        (("types", "a100", "step"), KeyError, "types.a100.step"),
        (("types", "A100!"), {"weights": 1, "maxLocalBatch": 1,
                              "step": [{"localBatch": 1, "seconds": 1.0}]}, "types.A100!"),
        (("types",), [1], "types"),
    ],
)  # fmt: skip
def test_a_bad_type_section_is_refused_by_its_json_path(
    path: tuple[Any, ...], value: Any, field: str
) -> None:
    doc = mutate(TYPED_DOC, path, value)
    with pytest.raises(SpecError) as err:
        parse_job_profile(doc)
    assert err.value.field == field, str(err.value)
    if not field.endswith("localBatch"):  # order is the parser's to check, not the schema's
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema("job-profile.schema.json"))


def test_at_most_sixteen_type_sections() -> None:
    one = TYPED_DOC["types"]["t4"]  # type: ignore[index]
    doc = {**JOB_DOC, "types": {f"t{i}": one for i in range(17)}}
    with pytest.raises(SpecError, match="at most 16"):
        parse_job_profile(doc)
