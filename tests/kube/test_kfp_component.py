"""The example pipeline compiled by the real Kubeflow Pipelines SDK; the component's interface."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from kfp import compiler

from bellows.kube.kfp_component import BELLOWS_IMAGE, elastic_training_job
from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pipelines" / "elastic_training.py"


def load_example():
    return load_script(EXAMPLE)


def test_the_example_pipeline_compiles_with_the_component_and_its_outputs(tmp_path):
    out = tmp_path / "pipeline.yaml"
    compiler.Compiler().compile(load_example().elastic_training, str(out))
    spec = yaml.safe_load(out.read_text())
    component = spec["components"]["comp-elastic-training-job"]
    outputs = component["outputDefinitions"]["parameters"]
    assert {name: o["parameterType"] for name, o in outputs.items()} == {
        "gpus": "NUMBER_INTEGER",
        "batch": "NUMBER_INTEGER",
        "jct_seconds": "NUMBER_DOUBLE",
        "phase": "STRING",
    }
    inputs = component["inputDefinitions"]["parameters"]
    assert inputs["kind"]["defaultValue"] == "PyTorchJob"
    assert inputs["timeout_seconds"]["defaultValue"] == 86400.0
    executor = spec["deploymentSpec"]["executors"]["exec-elastic-training-job"]["container"]
    assert executor["image"] == BELLOWS_IMAGE
    assert "from bellows.kube.pipeline_job import" in "\n".join(executor["command"])
    report = spec["root"]["dag"]["tasks"]["report"]["inputs"]["parameters"]
    assert report["gpus"]["taskOutputParameter"] == {
        "outputParameterKey": "gpus",
        "producerTask": "elastic-training-job",
    }


def test_the_component_is_a_kfp_component():
    assert elastic_training_job.name == "elastic-training-job"


def test_the_package_imports_without_kfp():
    code = (
        "import sys; sys.modules['kfp'] = None\n"
        "import bellows.kube, bellows.kube.pipeline_job, bellows.cli.main\n"
        "assert 'kfp' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
