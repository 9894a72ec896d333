"""Resizing a TrainJob in a Kueue LocalQueue: held through its Workload, then re-created.

A TrainJob's ``spec.trainer`` is immutable (``bellows.kube.recreation``), and Kueue owns its
``spec.suspend`` (``bellows.kube.kueue_journal``). Kueue's TrainJob integration derives the
Workload's podSets from the JobSet the runtime renders, and the Workload is controlled by
the TrainJob: it goes with it (garbage collection by owner reference). So, to run such a
TrainJob on ``(k, b)``:

1. journal on the job: ``target``, phase ``suspending`` (and ``suspended-at`` when it runs);
2. its Workload, when active: ``spec.active: false`` (Kueue evicts it: suspends the TrainJob
   and releases the quota once the Trainer has stopped the pods);
3. wait until the job is suspended and halted and the Workload holds no reservation (a
   queued TrainJob, suspended and never admitted, is there already);
4. probe the API server with a dry-run patch of ``spec.trainer``: a server that accepts it
   (a future Trainer) sizes the job in place, through :func:`plan_kueue_scale`, as a
   PyTorchJob is;
5. otherwise the record, as :func:`bellows.kube.recreation.plan_recreate` writes it, but of
   a successor created **suspended** in the same queue (its labels kept): the old Workload
   goes with the old TrainJob, Kueue creates a new one for the new TrainJob, already sized
   (its podSets are the new ``numNodes``), and admits it by quota and resumes the job;
6. delete the TrainJob (preconditioned on its uid and ``resourceVersion``), create it from
   the record, delete the record: the steps of ``plan_recreate``, crash-safe the same way.

The successor's journal says ``done`` at the target: it counts as running at its allocation
while it waits for Kueue, as a Kueue job journaled ``done`` does. A TrainJob whose spec is
at the target already (sized before its first start, or in place) is finished by
:func:`plan_kueue_scale` (its Workload activated once its podSets match).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from bellows.kube.journal import _body, _spec_matches, reading
from bellows.kube.kinds import KindAdapter
from bellows.kube.kueue import WorkloadView
from bellows.kube.kueue_journal import KueueStep, _announce, _hold, plan_kueue_scale
from bellows.kube.placement import HOSTNAME, Ask, Placement
from bellows.kube.records import Record, fingerprint
from bellows.kube.recreation import DeleteJob, ProbeInPlace, RecreateStep, new_record

__all__ = ["plan_kueue_recreate"]


def plan_kueue_recreate(
    kind: KindAdapter,
    obj: Mapping[str, Any],
    record: Record | None,
    workload: WorkloadView | None,
    *,
    in_place: bool | None,
    target: tuple[int, int],
    env: Mapping[str, str],
    requested: tuple[int, int],
    now: datetime,
    reason: str = "",
    done: float | None = None,
    placement: Ask = Placement.NONE,
    topology_key: str = HOSTNAME,
) -> KueueStep | RecreateStep:
    """The next step towards running the queued TrainJob ``obj`` on ``target``.

    ``record`` is its re-creation record built from ``obj`` (the caller finishes a record
    that is due first, with ``plan_recreate``), ``workload`` its Workload as read
    (``None``: none now), ``in_place`` this call's dry-run answer (``None``: not asked).
    ``placement``: asked of the pods through ``spec.runtimePatches`` (in the copy, or with
    the patch of a job sized in place), as ``plan_recreate`` does.
    """
    gpus, _ = target
    if _spec_matches(kind, obj, gpus, env) or in_place:
        # sized as it is: spec.trainer stays as it is, the env defaults (the progress
        # endpoint) included, unless the Trainer takes changes in place
        kept = env if in_place else dict(env)
        return plan_kueue_scale(
            kind, obj, workload, target=target, env=kept, requested=requested,
            launcher=None, now=now, done=done, reason=reason,
            placement=placement, topology_key=topology_key,
        )  # fmt: skip
    view, journal, notes = reading(kind, obj, env, requested)
    if (first := _announce(obj, view, journal, notes, target=target, now=now)) is not None:
        return first  # step 1
    if (hold := _hold(kind, obj, view, workload)) is not None:
        return hold  # steps 2 and 3
    if in_place is None:
        return ProbeInPlace(_body(obj, {}, kind.scale_patch(obj, gpus, env)))
    if record is None or record.source != fingerprint(obj) or record.target != target:
        return new_record(
            kind, obj, record, target=target, env=env, done=done, now=now,
            journal=journal, reason=reason, suspend=True,
            placement=placement, topology_key=topology_key,
        )  # fmt: skip
    meta = obj["metadata"]
    return DeleteJob(meta["uid"], meta["resourceVersion"])
