"""Job Scalability Analyzer (JSA): how fast a job runs on k GPUs with global batch b.

Fits a job's single-GPU processing time ``t_proc(m)`` and the cluster's Allreduce time
``t_ar(weights, k)`` from measurements, and turns them into the throughput-scaling-factor
(TSF) tables the optimizer maximises. Depends only on :mod:`bellows.jobs`.
"""

from __future__ import annotations

from bellows.scaling.documents import (
    API_VERSION,
    cluster_profile_to_json,
    job_profile_to_json,
    load_cluster_profile,
    load_job_profile,
    parse_cluster_profile,
    parse_job_profile,
    save_cluster_profile,
    save_job_profile,
)
from bellows.scaling.efficiency import (
    PROGRESS_UNIT,
    EfficiencyProfile,
    ValidationRun,
    fit_efficiency,
    noise_scale,
)
from bellows.scaling.fitting import (
    FitSample,
    fit_cluster_profile,
    fit_job_profile,
    fit_step_profile,
    predict_step_time,
)
from bellows.scaling.measurements import (
    MeasurementError,
    MeasurementTable,
    StepMeasurement,
    load_measurements,
    load_placements,
    load_scalability,
)
from bellows.scaling.profiles import ClusterProfile, JobProfile, LinkCost
from bellows.scaling.reference import MODEL_EFFICIENCY, MODEL_WEIGHTS, default_cluster
from bellows.scaling.tables import TsfTables, throughput_table, tsf_tables
from bellows.scaling.timing import (
    processing_seconds,
    single_gpu_throughput,
    step_time,
    throughput,
)
from bellows.scaling.validation import load_validation_runs

__all__ = [
    "API_VERSION",
    "MODEL_EFFICIENCY",
    "MODEL_WEIGHTS",
    "PROGRESS_UNIT",
    "ClusterProfile",
    "EfficiencyProfile",
    "FitSample",
    "JobProfile",
    "LinkCost",
    "MeasurementError",
    "MeasurementTable",
    "StepMeasurement",
    "TsfTables",
    "ValidationRun",
    "cluster_profile_to_json",
    "default_cluster",
    "fit_cluster_profile",
    "fit_efficiency",
    "fit_job_profile",
    "fit_step_profile",
    "job_profile_to_json",
    "load_cluster_profile",
    "load_job_profile",
    "load_measurements",
    "load_placements",
    "load_scalability",
    "load_validation_runs",
    "noise_scale",
    "parse_cluster_profile",
    "parse_job_profile",
    "predict_step_time",
    "processing_seconds",
    "save_cluster_profile",
    "save_job_profile",
    "single_gpu_throughput",
    "step_time",
    "throughput",
    "throughput_table",
    "tsf_tables",
]
