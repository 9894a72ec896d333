"""Reference numbers fitted from real measurements, embedded with their source named.

``MODEL_WEIGHTS`` are the parameter counts of the six models Pollux measured on AWS
g4dn.12xlarge nodes (4 x NVIDIA T4 each); :func:`default_cluster` is the Allreduce model
fitted to those measurements (``python benchmarks/jsa_accuracy.py`` refits it from
``shared/data/pollux/profiles`` and prints the same numbers); ``MODEL_EFFICIENCY`` the
statistical efficiency of each model fitted to its validation runs
(``python benchmarks/efficiency_fit.py --embedded``). Tests check that both agree.
"""

from __future__ import annotations

from types import MappingProxyType

from bellows.scaling.efficiency import EfficiencyProfile
from bellows.scaling.profiles import ClusterProfile, LinkCost

__all__ = [
    "DEFAULT_CLUSTER_SOURCE",
    "EFFICIENCY_SOURCE",
    "MODEL_EFFICIENCY",
    "MODEL_WEIGHTS",
    "default_cluster",
]

# Parameter counts of the models in the Pollux/AdaptDL artifact (petuum/adaptdl,
# osdi21-artifact), computed from each architecture as its training script builds it:
MODEL_WEIGHTS: MappingProxyType[str, int] = MappingProxyType(
    {
        # BERT-base (uncased) for SQuAD question answering: 12 layers, hidden 768,
        # encoder + pooler (109,482,240) + span head 768*2+2.
        "bert": 109_483_778,
        # ResNet-18 in the CIFAR-10 variant (kuangliu/pytorch-cifar, adaptdl example).
        "cifar10": 11_173_962,
        # DeepSpeech2 (deepspeech.pytorch): 2 conv layers + 5 bidirectional GRU layers of 800
        # on 161-bin spectrograms + 29-way output. Architecture settings are not recorded in
        # the data, so this one is the least certain; see docs/jsa.md.
        "deepspeech2": 41_203_773,
        # ResNet-50 (torchvision), ImageNet.
        "imagenet": 25_557_032,
        # NeuMF-end (adaptdl examples/NCF, defaults factor_num=32, num_layers=3) on
        # MovieLens-1M (6,040 users, 3,706 items).
        "ncf": 1_602_657,
        # YOLOv3 (Darknet-53 backbone), 80-class head.
        "yolov3": 61_949_149,
    }
)

DEFAULT_CLUSTER_SOURCE = (
    "fitted by bellows.scaling.fit_cluster_profile to every multi-GPU row of the six models "
    "in the Pollux T4 measurements (petuum/adaptdl osdi21-artifact simulator traces, "
    "Apache-2.0; AWS g4dn.12xlarge, 4 x T4 per node); python benchmarks/jsa_accuracy.py"
)


def default_cluster() -> ClusterProfile:
    """The Allreduce + overlap model of a g4dn.12xlarge cluster (4 T4 GPUs per node).

    The overlap variant: it has the lower held-out error once jobs carry ``commWeights``
    (``docs/jsa.md``). Fitted intra-node latency is below 1e-38 s, i.e. zero.
    """
    return ClusterProfile(
        intra_node=LinkCost(latency=0.0, per_weight=2.673e-9),
        inter_node=LinkCost(latency=3.842e-4, per_weight=7.180e-9),
        overlap=1.498,
        gpus_per_node=4,
        source=DEFAULT_CLUSTER_SOURCE,
    )


EFFICIENCY_SOURCE = (
    "fitted by bellows.scaling.fit_efficiency to every row of the model's validation-<batch>.csv "
    "in the Pollux/AdaptDL artifact (petuum/adaptdl osdi21-artifact, Apache-2.0); "
    "python benchmarks/efficiency_fit.py --embedded"
)


def _efficiency(m0: int, phi: float, growth: float, exponent: float) -> EfficiencyProfile:
    return EfficiencyProfile(m0, phi, growth, exponent, EFFICIENCY_SOURCE)


# Statistical efficiency of the same six models (bellows.scaling.efficiency), relative to the
# smallest batch each was validated at; numbers rounded to four significant digits.
MODEL_EFFICIENCY: MappingProxyType[str, EfficiencyProfile] = MappingProxyType(
    {
        "bert": _efficiency(12, 12240.0, 0.6250, 0.5463),
        "cifar10": _efficiency(128, 2982.0, 0.8145, 0.1655),
        "deepspeech2": _efficiency(20, 26910.0, 1.469, 0.2161),
        "imagenet": _efficiency(200, 1766.0, 0.5466, 0.1032),
        "ncf": _efficiency(256, 96330.0, 0.7613, 0.2372),
        "yolov3": _efficiency(8, 490.9, 0.4747, 0.1823),
    }
)
