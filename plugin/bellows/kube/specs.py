"""From a job's view, its owner's settings and its profile to a validated ``JobSpec``.

Pure: the profile has already been fetched (inline or from its ConfigMap). Every error is a
:class:`bellows.jobs.SpecError` whose field is what the owner must edit: an annotation key,
an env var of the training containers, or a spec field.
"""

from __future__ import annotations

from bellows.inputs import parse_int
from bellows.jobs import MAX_BATCH, JobSpec, SpecError
from bellows.kube import keys
from bellows.kube.kinds import JobView
from bellows.scaling import JobProfile

__all__ = ["build_spec", "requested_allocation"]

_FIELD_TO_KEY = {
    "b_min": keys.MIN_BATCH,
    "b_max": keys.MAX_BATCH,
    "k_max": keys.MAX_GPUS,
    "m_max": keys.MAX_BATCH_PER_GPU,
    "work": keys.WORK,
    "weights": keys.PROFILE,
    "profile": keys.PROFILE,
    "gpus": keys.MAX_GPUS,
}


def _env_value(view: JobView, name: str) -> int | None:
    values = {v for v in view.env.get(name, ()) if v is not None}
    if not values:
        return None
    if len(values) > 1:
        raise SpecError(f"env {name}", sorted(values), "the same value in every training container")
    return parse_int(f"env {name}", values.pop(), minimum=1, maximum=MAX_BATCH)


def requested_allocation(view: JobView, settings: keys.Settings) -> tuple[int, int]:
    """``(gpus, batch)`` the owner asked for.

    From ``bellows.io/requested`` once Bellows has saved it (before its first patch), else
    from the spec: the replicas' GPUs and the batch env var (global, or per-GPU x GPUs).
    """
    saved = keys.parse_pair(keys.REQUESTED, view.annotations.get(keys.REQUESTED))
    if saved is not None:
        return saved
    gpus = view.gpus
    batch = _env_value(view, settings.batch_env) if settings.batch_env else None
    local = _env_value(view, settings.local_batch_env) if settings.local_batch_env else None
    if batch is not None and local is not None and batch != local * gpus:
        raise SpecError(
            f"env {settings.local_batch_env}",
            local,
            f"{settings.batch_env} / GPUs = {batch} / {gpus} (the two env vars disagree)",
        )
    if batch is None and local is not None:
        batch = local * gpus
    if batch is None:
        names = " or ".join(settings.env_names)
        raise SpecError(
            f"env {names}",
            None,
            "a literal value on the training containers (the batch size the job asks for)",
        )
    return gpus, batch


def build_spec(view: JobView, settings: keys.Settings, profile: JobProfile) -> JobSpec:
    """The job's ``JobSpec``, named :attr:`JobRef.key`; SpecError names what to fix."""
    if settings.elastic and (view.gpu_step != 1 or view.min_gpus != 1):
        raise SpecError(
            "replicas",
            f"{view.min_gpus} GPUs at least, {view.gpu_step} per replica",
            "one GPU per training replica and no other GPU replica for an elastic job "
            f"(Bellows may give it a single GPU); or set {keys.ELASTIC}: 'false'",
        )
    gpus, batch = requested_allocation(view, settings)
    if -(-batch // gpus) > settings.m_max:
        raise SpecError(
            keys.MAX_BATCH_PER_GPU,
            settings.m_max,
            f">= the per-GPU batch the job asks for (ceil({batch} / {gpus} GPUs))",
        )
    try:
        return JobSpec(
            name=view.ref.key,
            b_min=settings.b_min,
            b_max=settings.b_max,
            batch_size=batch,
            k_max=settings.k_max,
            m_max=settings.m_max,
            weights=profile.effective_weights,
            work=settings.work,
            profile=profile.step,
            elastic=settings.elastic,
            gpus=gpus,
            restart_s=settings.restart_s,
            min_runtime_s=settings.min_runtime_s,
            types=profile.types,
            placements=profile.placements,
        )
    except SpecError as err:
        if err.field == "batch_size":
            env = " / ".join(settings.env_names)
            raise SpecError(f"env {env}", batch, err.valid) from None
        raise SpecError(_FIELD_TO_KEY.get(err.field, err.field), err.value, err.valid) from None
