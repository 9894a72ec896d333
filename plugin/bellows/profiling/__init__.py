"""Measurements that feed the JSA: ``bellows profile`` (per job) and ``bellows calibrate``.

* :func:`profile_job` times a training iteration at several per-GPU batch sizes on one
  device and yields a :class:`bellows.scaling.JobProfile` (``t_proc(m)`` and the weights);
  :class:`TorchWorkload` turns a user's ``nn.Module`` factory into that iteration.
* :func:`measure_allreduce` times Allreduce over several buffer sizes and process counts
  (torch.distributed: gloo on CPU, NCCL on GPU); :func:`fit_link` and
  :func:`cluster_profile` turn the times into the cluster's generic
  :class:`bellows.scaling.ClusterProfile`.

Depends on :mod:`bellows.jobs` and :mod:`bellows.scaling`; torch is imported lazily, only
by the functions that need it (the ``train`` extra).
"""

from __future__ import annotations

from bellows.profiling.allreduce import measure_allreduce
from bellows.profiling.calibrating import AllreduceSample, LinkFit, cluster_profile, fit_link
from bellows.profiling.job_profiles import JobProfileRun, profile_job
from bellows.profiling.measuring import Timing, time_iterations
from bellows.profiling.workloads import SyntheticBatch, TorchWorkload, load_object, parse_shape

__all__ = [
    "AllreduceSample",
    "JobProfileRun",
    "LinkFit",
    "SyntheticBatch",
    "Timing",
    "TorchWorkload",
    "cluster_profile",
    "fit_link",
    "load_object",
    "measure_allreduce",
    "parse_shape",
    "profile_job",
    "time_iterations",
]
