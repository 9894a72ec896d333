"""The emulator's building blocks: CRD schema checks, patches, selectors."""

from __future__ import annotations

import copy

import pytest

from bellows.emulator.patching import PatchError, json_patch, merge_patch
from bellows.emulator.resources import crd_resources
from bellows.emulator.selectors import SelectorError, field_selector, label_selector


@pytest.fixture(scope="module")
def schemas(shared_data):
    return {r.kind: r for r in crd_resources(sorted((shared_data / "crds").glob("*.yaml")))}


def test_examples_are_valid_against_the_real_crds(schemas, examples):
    for kind in ("PyTorchJob", "MPIJob"):
        assert schemas[kind].problems(examples[kind]) == []


def test_crd_versions_and_subresources(schemas):
    assert (schemas["PyTorchJob"].api_version, schemas["MPIJob"].api_version) == (
        "kubeflow.org/v1",
        "kubeflow.org/v2beta1",
    )
    assert schemas["PyTorchJob"].status_subresource
    assert schemas["MPIJob"].status_subresource
    assert not schemas["PyTorchJob"].unconditional_update


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("spec", "pytorchReplicaSpecs", "Worker", "replicas"), "two", "replicas"),
        (("spec", "pytorchReplicaSpecs", "Worker", "replicas"), 2**31, "replicas"),
        (("spec", "runPolicy", "suspend"), "yes", "suspend"),
        (("spec", "runPolicy", "suspnd"), True, "suspnd"),
        (("spec", "pytorchReplicaSpecs", "Worker", "template", "spec", "containers"), [{}], "name"),
    ],
)
def test_schema_rejects_wrong_types_ranges_unknown_and_missing_fields(
    schemas, examples, path, value, field
):
    obj = copy.deepcopy(examples["PyTorchJob"])
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    problems = schemas["PyTorchJob"].problems(obj)
    assert problems
    assert field in problems[0].field


def test_int_or_string_and_defaults(schemas, examples):
    obj = examples["MPIJob"]
    limits = obj["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]["limits"]
    limits["nvidia.com/gpu"] = "1"
    assert schemas["MPIJob"].problems(obj) == []
    limits["nvidia.com/gpu"] = 1.5
    assert schemas["MPIJob"].problems(obj)
    del obj["spec"]["slotsPerWorker"]
    assert schemas["MPIJob"].defaulted(obj)["spec"]["slotsPerWorker"] == 1
    assert schemas["MPIJob"].defaulted(obj)["spec"]["mpiImplementation"] == "OpenMPI"


def test_merge_patch_follows_rfc_7386():
    target = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_patch(target, {"a": {"b": None, "c": [3]}, "e": {"f": 1}}) == {
        "a": {"c": [3]},
        "d": 1,
        "e": {"f": 1},
    }
    assert target == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


def test_json_patch_follows_rfc_6902():
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/1", "value": 9},
            {"op": "replace", "path": "/b/c", "value": 2},
            {"op": "move", "from": "/b/c", "path": "/d"},
            {"op": "test", "path": "/a/2", "value": 2},
            {"op": "remove", "path": "/a/0"},
        ],
    )
    assert out == {"a": [9, 2], "b": {}, "d": 2}
    with pytest.raises(PatchError, match="test failed"):
        json_patch(doc, [{"op": "test", "path": "/b/c", "value": 5}])
    with pytest.raises(PatchError, match="does not exist"):
        json_patch(doc, [{"op": "replace", "path": "/x", "value": 1}])


def test_label_and_field_selectors():
    obj = {"metadata": {"name": "j", "namespace": "ns", "labels": {"app": "a", "tier": "x"}}}
    for text, want in [
        ("app=a", True),
        ("app==b", False),
        ("app!=b", True),
        ("tier in (x, y),app", True),
        ("tier notin (x)", False),
        ("!missing", True),
        ("missing", False),
    ]:
        assert label_selector(text)(obj) is want, text
    assert field_selector("metadata.name=j,metadata.namespace!=other")(obj)
    with pytest.raises(SelectorError):
        field_selector("spec.suspend=true")
    with pytest.raises(SelectorError):
        label_selector("app in (a")
