"""A Kubeflow Pipelines v2 pipeline whose training step Bellows sizes, then a step that reads it.

Compile: ``python examples/pipelines/elastic_training.py elastic_training.yaml`` (needs the
``pipelines`` extra), then upload the YAML to Kubeflow Pipelines. The training step submits
a suspended, annotated PyTorchJob (``kind="TrainJob"`` for Kubeflow Trainer v2), waits for it
and outputs the GPUs, global batch and JCT Bellows gave it; ``report`` prints them.
"""

# No `from __future__ import annotations`: KFP reads the real types of the signature.

import sys

from kfp import compiler, dsl

from bellows.kube.kfp_component import BELLOWS_IMAGE, elastic_training_job


# on the Bellows image too, which holds kfp: no step installs anything at run time
@dsl.component(base_image=BELLOWS_IMAGE, install_kfp_package=False)
def report(gpus: int, batch: int, jct_seconds: float) -> str:
    """One line on how the training step ran."""
    line = f"trained on {gpus} GPUs, global batch {batch}, JCT {jct_seconds / 60:.1f} min"
    print(line)
    return line


@dsl.pipeline(name="bellows-elastic-training")
def elastic_training(
    job_name: str = "resnet50-pipeline",
    kind: str = "PyTorchJob",
    max_gpus: int = 8,
    timeout_seconds: float = 86400.0,
) -> str:
    """ResNet-50 on ImageNet, 1..``max_gpus`` GPUs and global batch 64..512, sized by Bellows."""
    train = elastic_training_job(
        name=job_name,
        kind=kind,
        image="ghcr.io/example/resnet50-train:1.0",
        command=["torchrun", "/workspace/train.py", "--checkpoint-dir=/ckpt", "--resume"],
        gpus=2,
        batch=256,
        min_batch=64,
        max_batch=512,
        max_gpus=max_gpus,
        max_batch_per_gpu=128,
        work=12811670,  # 10 epochs x 1,281,167 images
        profile_configmap="resnet50-profile",  # manifests/examples/pytorchjob-resnet50.yaml
        timeout_seconds=timeout_seconds,
    )
    shown = report(
        gpus=train.outputs["gpus"],
        batch=train.outputs["batch"],
        jct_seconds=train.outputs["jct_seconds"],
    )
    return shown.output


if __name__ == "__main__":
    compiler.Compiler().compile(
        elastic_training, sys.argv[1] if len(sys.argv) > 1 else "elastic_training.yaml"
    )
