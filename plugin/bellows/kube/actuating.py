"""Applying the autoscaler's decisions to PyTorchJobs and MPIJobs: halt, patch, resume.

The :class:`Actuator` reads the job, asks the pure planner (``journal``) for the next step,
performs it, and reads again, until the job is in the wanted state. Because the journal
lives on the job, any step may be the last one a dying controller makes: the next
:meth:`Actuator.apply` or :meth:`Actuator.resume_interrupted` picks up where it stopped.
A 409 means the job changed under us: read again and re-plan. A job deleted or finished
meanwhile is dropped from the plan without error. A step that cannot be taken now (an
MPIJob's launcher name held by a batch Job the MPIJob does not control) is reported on the
job, with an Event, and the decision stays ``pending``: nothing is deleted, and a later
call goes on once the way is clear.

A job that names a Kueue LocalQueue is refused unless Kueue cooperation is on
(``Actuator(api, kueue=True)``, the setting ``controller.kueue.enabled``). With it, such a
job is driven by the planners of :mod:`bellows.kube.kueue_journal`: its Workload is
deactivated and activated, and ``suspend``, which Kueue owns, is never written (a queued
TrainJob's resize: :mod:`bellows.kube.kueue_recreation`). Waiting for Kueue watches both the
job and its Workload, within ``halt_timeout_s`` per call.

At most ``max_active`` jobs are driven at once (:data:`MAX_ACTIVE`); a call that waits for
the operator or Kueue gives its turn up while it waits. A round that starts 800 jobs would
otherwise read all 800 before patching the first, holding them all (~20 MiB, whose heap
stays resident after: docs/live.md); the API calls go through a few threads either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, TypeVar

import structlog

from bellows.autoscaler.decisions import Decision, Keep, Preempt, Reject, Rescale, Start
from bellows.autoscaler.straddle import FreeNodes
from bellows.inputs import DATA_ERRORS, brief, shown
from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.adapters import KINDS
from bellows.kube.client import ConflictError, ExpiredError, KubeApi, NotFoundError
from bellows.kube.deletion import Terminating
from bellows.kube.examining import LeftAlone, opted_job
from bellows.kube.journal import (
    AwaitHalt,
    Blocked,
    DeleteLauncher,
    Journal,
    Nothing,
    Phase,
    SendPatch,
    Step,
    plan_halt,
    plan_scale,
    target_env,
)
from bellows.kube.kinds import JobView, KindAdapter, finished_state, foreign_manager, pod_templates
from bellows.kube.kueue import (
    JOB_UID,
    WORKLOADS,
    WorkloadView,
    owned_workload,
    queue_name,
    read_workload,
)
from bellows.kube.kueue_journal import (
    AwaitEviction,
    AwaitWorkload,
    KueueStep,
    PatchWorkload,
    plan_kueue_halt,
    plan_kueue_scale,
)
from bellows.kube.kueue_recreation import plan_kueue_recreate
from bellows.kube.pacing import backoff, until
from bellows.kube.placement import (
    HOSTNAME,
    Ask,
    KueueTopology,
    OnType,
    Pinned,
    Placement,
    template_product,
    template_type,
)
from bellows.kube.progress_env import ProgressEndpoint, TargetEnv
from bellows.kube.recording import Recorder
from bellows.kube.records import (
    DEFAULT_RECORDS_NAMESPACE,
    RECORD_LABEL,
    RECORD_NAMESPACE_LABEL,
    BadRecord,
    Record,
    read_record,
    record_name,
)
from bellows.kube.recreation import (
    CreateJob,
    DeleteJob,
    DeleteRecord,
    ProbeInPlace,
    RecreateStep,
    WriteRecord,
    plan_recreate,
)
from bellows.kube.specs import requested_allocation
from bellows.refs import JobRef

__all__ = ["MAX_ACTIVE", "ActuationError", "Actuator", "NodePins", "Outcome"]

MAX_ACTIVE = 64  # jobs driven at once by one Actuator (waits for the operator or Kueue aside)
LAUNCHER_WAIT_S = 5.0  # the longest wait for a launcher deleted to go (halt_timeout_s if less)
MAX_STEPS = 64  # steps of one call (a resize takes about ten): past it the call is pending
BACKOFF_S = (0.05, 0.5)  # first and longest wait after a step that met a change (409, 404)
_CREATED_KEPT = 65_536  # the copies this actuator created that it remembers (uid -> old uid)
_T = TypeVar("_T")
_log = structlog.get_logger("bellows.actuator")


class NodePins(Protocol):
    """Where the jobs the actuator sizes are pinned (the controller's node view)."""

    def place_round(
        self, claims: Sequence[tuple[str, int]], types: Mapping[str, str] | None = None
    ) -> None:
        """Pin the jobs a round starts or resizes, ``(job, GPUs)``, before any is driven;
        ``types``: the GPU type of each job given one (on its type's nodes only)."""

    def pin(
        self, job: str, gpus: int, gpus_per_pod: int, *, required: bool = True, gpu_type: str = ""
    ) -> Sequence[str] | None:
        """The nodes ``job`` sized to ``gpus`` is pinned to (``None``: not pinned);
        ``required=False``: only preferred there (its pods may land elsewhere);
        ``gpu_type``: on that type's nodes only (``""``: any node)."""

    def free_nodes(self) -> FreeNodes | None:
        """Where the GPUs sit now, for the core (``None``: not known)."""

    def free_nodes_by_type(self) -> dict[str, FreeNodes] | None:
        """The same per GPU type, for a core of several types (``None``: not known)."""

    def moves(self, job: str, gpus: int) -> bool:
        """Whether ``job``, kept on ``gpus``, is pinned elsewhere than its pods are."""

    def job_type(self, job: str) -> str | None:
        """The GPU type of the nodes ``job``'s pods are bound to (``None``: not known)."""


Result = Literal[
    "started",
    "rescaled",
    "queued",
    "rejected",
    "preempted",
    "unchanged",
    "dropped",
    "pending",
    "refused",
    "invalid",
]
_EVENTS: dict[Phase, tuple[str, bool]] = {
    Phase.QUEUED: ("Queued", False),
    Phase.REJECTED: ("Rejected", True),
    Phase.PREEMPTED: ("Preempted", True),
}


RecreationSteps = (ProbeInPlace, WriteRecord, DeleteJob, CreateJob, DeleteRecord)
_HALT_RESULTS: dict[Phase, Result] = {
    Phase.QUEUED: "queued",
    Phase.REJECTED: "rejected",
    Phase.PREEMPTED: "preempted",
}


@dataclass(frozen=True)
class _Read:
    """One fresh read of a job, what a planner needs: ``kueue`` says whether it is a Kueue
    job (then ``workload`` is its Workload, ``None`` when there is none now)."""

    kind: KindAdapter
    obj: Mapping[str, Any] | None  # None: a TrainJob deleted by its re-creation (record set)
    settings: keys.Settings
    launcher: Mapping[str, Any] | None
    kueue: bool
    workload: WorkloadView | None
    record: Record | None = None  # a TrainJob's re-creation record (bellows.kube.recreation)


_Planner = Callable[[_Read], "Step | KueueStep | RecreateStep"]


class _Turn:
    """One call's turn among the calls an Actuator drives at once: held from entry, given up
    while the call waits (:meth:`waiting`), taken again after."""

    def __init__(self, turns: asyncio.Semaphore) -> None:
        self._turns = turns
        self._held = False

    async def __aenter__(self) -> _Turn:
        await self._turns.acquire()
        self._held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        self._give_up()

    def _give_up(self) -> None:
        if self._held:  # not held when cancelled while waiting to take it again
            self._held = False
            self._turns.release()

    async def waiting(self, wait: Awaitable[_T]) -> _T:
        """``wait`` (a watch for the operator or Kueue), the turn given up meanwhile and
        taken again after (not after an error: the call ends with it)."""
        self._give_up()
        result = await wait
        await self._turns.acquire()
        self._held = True
        return result


class _Pace:
    """One call's bound on its steps, and its backoff after each step that met a change
    (409, 404): no loop of a call runs unbounded, nor at the API server's full speed."""

    def __init__(self, max_steps: int, max_changes: int) -> None:
        self.max_steps = max_steps
        self._max_changes = max_changes
        self._steps = 0
        self._changes = 0
        self._wait = BACKOFF_S[0]
        self.created = False  # a re-creation's create done by this call (never twice)

    def spent(self, job: str) -> Outcome | None:
        """Count one more step; the ``pending`` outcome once the call has had its steps."""
        self._steps += 1
        if self._steps <= self.max_steps:
            return None
        _log.warning("actuation.steps_spent", job=job, steps=self.max_steps)
        return Outcome(job, "pending", f"not done in {self.max_steps} steps; a later call goes on")

    async def back_off(self) -> None:
        await asyncio.sleep(self._wait)
        self._wait = min(self._wait * 2, BACKOFF_S[1])

    async def met_change(self) -> bool:
        """A step met a change (409, 404): back off; whether the call may go on."""
        self._changes += 1
        if self._changes > self._max_changes:
            return False
        await self.back_off()
        return True


class ActuationError(RuntimeError):
    """A job kept changing under every attempt (more conflicts than allowed)."""


@dataclass(frozen=True)
class Outcome:
    """What one actuation did to one job (``job`` is :attr:`JobRef.key`)."""

    job: str
    result: Result
    detail: str = ""


class Actuator:
    """Applies Start/Rescale/Reject/Preempt decisions idempotently, with a journal on the job."""

    def __init__(
        self,
        api: KubeApi,
        *,
        kinds: Iterable[KindAdapter] = KINDS,
        recorder: Recorder | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        halt_timeout_s: float = 120.0,
        max_conflicts: int = 10,
        kueue: bool = False,
        max_active: int = MAX_ACTIVE,
        placement: Placement = Placement.NONE,
        topology_key: str = HOSTNAME,
        records_namespace: str = DEFAULT_RECORDS_NAMESPACE,
        max_steps: int = MAX_STEPS,
        progress: ProgressEndpoint | None = None,
        pins: NodePins | None = None,
        topology: Callable[[JobView], bool] | None = None,
        gpu_products: Mapping[str, str] | None = None,
        type_label: str = "nvidia.com/gpu.product",
    ) -> None:
        """``kueue``: size the jobs that name a Kueue LocalQueue through their Workloads
        (``controller.kueue.enabled``); when false, such a job is refused with an Event.
        ``max_active``: the most jobs driven at once (the others wait their turn).
        ``placement``: what every sizing patch asks of the scheduler (``controller.placement``,
        :mod:`bellows.kube.placement`), on ``topology_key``. ``records_namespace``: where
        the TrainJobs' re-creation records live (``controller.trainer.recordsNamespace``;
        no tenant writes there, :mod:`bellows.kube.records`). ``max_steps``: the most
        steps one call takes (a call past it is ``pending``, retried later). ``progress``:
        where the pods of the jobs it sizes report progress, written with their batch
        (:mod:`bellows.kube.progress_env`; ``None``: nothing). ``pins``: where each job it
        sizes is required (the controller's node view, ``controller.placement: nodes``;
        ``None``: no view. A job it has no room for is not pinned, a pin from before taken
        out). ``topology(job)``: whether Kueue places the Kueue-managed ``job`` by
        topology-aware scheduling (its ClusterQueue's flavors all have a topology,
        ``QueueIndex.topology_aware``); such a job, with a view, is asked of Kueue on the
        nodes' level instead of pinned (:class:`~bellows.kube.placement.KueueTopology`).
        ``gpu_products``: on a cluster of several GPU types, each type's value of the node
        label ``type_label``; a start or rescale that carries a type (``Start.gpu_type``)
        asks for that type's nodes (:class:`~bellows.kube.placement.OnType`)."""
        self._api = api
        self._pins = pins
        self._topology = topology
        self._progress = progress
        self._records_namespace = records_namespace
        self._max_steps = max_steps
        self._created: dict[str, str] = {}  # uid of each copy this actuator created: old uid
        self._told_terminating: dict[str, None] = {}  # jobs told DeletePending (by uid)
        self._placement = placement
        self._topology_key = topology_key
        self._products = dict(gpu_products or {})
        self._type_label = type_label
        self._kueue = kueue
        self._kinds = {k.kind.lower(): k for k in kinds}
        self._recorder = recorder or Recorder(api, now=now)
        self._now = now
        self._halt_timeout_s = halt_timeout_s
        self._max_conflicts = max_conflicts
        self._turns = asyncio.Semaphore(max_active)

    @property
    def kinds(self) -> tuple[KindAdapter, ...]:
        """The job kinds this actuator drives (and its controller reads)."""
        return tuple(self._kinds.values())

    def place_round(
        self, claims: Sequence[tuple[str, int]], types: Mapping[str, str] | None = None
    ) -> None:
        """Before a round's starts and resizes (``(job, GPUs)``; ``types``: the GPU type of
        each job given one) are driven: place them all at once (with a node view; else
        nothing)."""
        if self._pins is not None:
            self._pins.place_round(claims, types)

    def _moves(self, ref: JobRef, decision: Rescale) -> bool:
        """Whether ``decision`` keeps ``ref``'s size and the node view pins it elsewhere
        than its pods are (a move)."""
        same = (decision.gpus, decision.batch) == (decision.gpus_from, decision.batch_from)
        return same and self._pins is not None and self._pins.moves(ref.key, decision.gpus)

    def free_nodes(self) -> FreeNodes | None:
        """Where the GPUs sit now, from the node view (``None``: no view, or not known)."""
        return None if self._pins is None else self._pins.free_nodes()

    def free_nodes_by_type(self) -> dict[str, FreeNodes] | None:
        """The same per GPU type (``None``: no view, or not known)."""
        return None if self._pins is None else self._pins.free_nodes_by_type()

    def gpu_type_of(self, view: JobView) -> str | None:
        """The GPU type the job of ``view`` runs on (a core of several types adopts it
        there): where the node view sees its pods bound, else the type its pod templates'
        node selector requires (whoever wrote it: the scheduler obeys it); ``None``: not
        known, or a value no type has."""
        if self._pins is not None and (found := self._pins.job_type(view.ref.key)) is not None:
            return found
        return self._selected_type(view, owners=False)

    def pods_type(self, job: str) -> str | None:
        """The GPU type of the nodes ``job``'s pods are bound to, as the node view sees
        them (``None``: no view, or not one type)."""
        return None if self._pins is None else self._pins.job_type(job)

    def owner_type(self, view: JobView) -> str | None:
        """The GPU type the owner's own node selector on the type label requires of the job
        of ``view`` (one Bellows did not write), or ``None``: the job can run on that type
        only, so a core of several types decides it there."""
        return self._selected_type(view, owners=True)

    def _selected_type(self, view: JobView, *, owners: bool) -> str | None:
        """The type the pod templates' node selector names on the type label, the same on
        every template (``owners``: only a selector Bellows did not write)."""
        kind = self._kinds.get(view.ref.kind.lower())
        if kind is None:
            return None
        try:
            templates = pod_templates(kind, view.raw)
        except DATA_ERRORS:
            return None
        if owners:
            templates = [t for t in templates if template_type(t) is None]
        found = {template_product(t, self._type_label) for t in templates}
        if len(found) != 1 or None in found:
            return None
        names = {product: name for name, product in self._products.items()}
        return names.get(str(found.pop()))

    def ref(self, job: str) -> JobRef:
        """The job behind a core job name (``<kind>/<namespace>/<name>``)."""
        return JobRef.parse(job, [k.kind for k in self._kinds.values()])

    async def apply(self, decision: Decision, *, done: float | None = None) -> Outcome:
        """Drive the job to what ``decision`` says; returns what was done.

        ``done``: the samples the job has processed, journaled with a start or rescale
        (``bellows.io/progress``) for a controller that restarts later.
        """
        if isinstance(decision, Start | Rescale):
            verb: Result = "started" if isinstance(decision, Start) else "rescaled"
            target = (decision.gpus, decision.batch)
            ref = self.ref(decision.job)
            if isinstance(decision, Rescale) and self._moves(ref, decision):
                # a move (onto fewer nodes) at the same size: halted first, then placed anew
                halted = await self._halt(ref, Phase.PREEMPTED, f"moving: {decision.reason}")
                if halted.result != "preempted":
                    return halted
            return await self._scale(
                ref, target, verb, done=done, reason=decision.reason, gpu_type=decision.gpu_type
            )
        if isinstance(decision, Reject):
            return await self._halt(
                self.ref(decision.job), Phase.REJECTED, f"rejected: {decision.reason}"
            )
        if isinstance(decision, Preempt):
            return await self._halt(
                self.ref(decision.job), Phase.PREEMPTED, f"preempted: {decision.reason}"
            )
        raise TypeError(f"not a decision: {decision!r}")

    async def hold(
        self, job: str, reason: str = "queued by Bellows until it is started"
    ) -> Outcome:
        """Suspend an arrived job that was submitted running, until a Start decision (a Kueue
        job: journal ``queued``, then its Workload inactive, so that Kueue keeps it out)."""
        # never waits: a Kueue job's Workload may not exist yet, or be evicted later; the
        # caller holds a pool's lock, and the journal lets a later call finish the hold
        return await self._halt(self.ref(job), Phase.QUEUED, reason, wait=False)

    async def report_problem(
        self,
        job: str,
        problem: str,
        *,
        reason: str = "InvalidSettings",
        status: str | None = None,
    ) -> Outcome:
        """Tell the owner why Bellows leaves the job alone: a status annotation and an Event.

        ``status`` is the annotation's line (default ``not managed: <problem>``). Idempotent:
        nothing is written when the status already says the same.
        """
        ref = self.ref(job)
        kind = self._kinds[ref.kind.lower()]
        status = f"not managed: {problem}" if status is None else status
        for attempt in range(self._max_conflicts):
            obj = await self._api.get_job(kind, ref.namespace, ref.name)
            if obj is None:
                return Outcome(job, "dropped", "deleted")
            notes = obj["metadata"].get("annotations") or {}
            if (manager := _foreign(kind, obj)) is not None:
                return _skipped(job, manager)
            if notes.get(keys.STATUS) == status:
                return Outcome(job, "unchanged", status)
            patch = {
                "metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                    "annotations": {keys.STATUS: status},
                }
            }
            try:
                done = await self._api.patch_job(kind, ref.namespace, ref.name, patch)
            except ConflictError:
                await backoff(attempt)  # changed meanwhile: read again, after a while
                continue
            except NotFoundError:
                return Outcome(job, "dropped", "deleted")
            await self._recorder.record(done, reason, problem, warning=True)
            return Outcome(job, "invalid" if reason == "InvalidSettings" else "refused", problem)
        raise ActuationError(f"{job}: more than {self._max_conflicts} conflicts")

    async def note_kept(self, keep: Keep) -> Outcome:
        """Say on a running job why a round kept it as it is (``bellows.io/reason`` and an
        Event ``Kept``), once: nothing is written when the reason already says the same or
        the job no longer runs at the kept allocation."""
        ref = self.ref(keep.job)
        kind = self._kinds[ref.kind.lower()]
        for attempt in range(self._max_conflicts):
            obj = await self._api.get_job(kind, ref.namespace, ref.name)
            if obj is None:
                return Outcome(keep.job, "dropped", "deleted")
            notes = obj["metadata"].get("annotations") or {}
            journal = Journal.read(notes)
            if (
                not keys.opted_in(notes)
                or _foreign(kind, obj) is not None
                or journal.phase is not Phase.DONE
                or journal.allocation != (keep.gpus, keep.batch)
                or notes.get(keys.REASON) == keep.reason
            ):
                return Outcome(keep.job, "unchanged", keep.reason)
            patch = {
                "metadata": {
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                    "annotations": {keys.REASON: keep.reason},
                }
            }
            try:
                done = await self._api.patch_job(kind, ref.namespace, ref.name, patch)
            except ConflictError:
                await backoff(attempt)
                continue
            except NotFoundError:
                return Outcome(keep.job, "dropped", "deleted")
            await self._recorder.record(done, "Kept", keep.reason)
            return Outcome(keep.job, "unchanged", keep.reason)
        raise ActuationError(f"{keep.job}: more than {self._max_conflicts} conflicts")

    async def notify(self, job: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event on the job (best effort, as every Event; nothing else is written)."""
        ref = self.ref(job)
        obj = await self._api.get_job(self._kinds[ref.kind.lower()], ref.namespace, ref.name)
        if obj is not None:
            await self._recorder.record(obj, reason, message, warning=warning)

    async def finish_recreations(self, namespace: str | None = None) -> list[Outcome]:
        """Finish every re-creation a previous controller left half done (its record is
        there, in the records namespace: of the TrainJobs of ``namespace``, or of all): a
        TrainJob deleted and not yet created again is in no list of jobs, so a controller
        calls this before it reads the jobs (``resume_interrupted`` does). A record that
        fails its checks is reported (outcome ``invalid``) and never acted on; a record
        anywhere else (a tenant's namespace) is never read."""
        outcomes: list[Outcome] = []
        selector = RECORD_LABEL if namespace is None else f"{RECORD_NAMESPACE_LABEL}={namespace}"
        for kind in self._kinds.values():
            if not getattr(kind, "recreates", False):
                continue
            for item in await self._api.list_configmaps(self._records_namespace, selector):
                record = read_record(kind, item, records_namespace=self._records_namespace)
                if isinstance(record, BadRecord):
                    outcomes.append(await self._refuse_record(kind, record))
                    continue
                assert record.target is not None  # read_record requires one
                ref = JobRef(kind.kind, record.namespace, record.job)
                outcomes.append(await self._scale(ref, record.target, "rescaled"))
        return outcomes

    async def finish_recreation(self, job: str) -> Outcome | None:
        """Finish the re-creation of the TrainJob ``job`` that its record says is under way,
        as :meth:`finish_recreations` does at start-up: ``None`` when there is no record
        (or the kind is never re-created). A controller calls this when an event finds the
        job gone: its resize may have deleted it and not created it yet (a create that
        failed), which is no completion."""
        kind = self._kinds.get(job.partition("/")[0])
        if kind is None or not getattr(kind, "recreates", False):
            return None
        ref = self.ref(job)
        record = await self._record(kind, ref)
        if record is None:
            return None
        if isinstance(record, BadRecord):
            return await self._refuse_record(kind, record)
        assert record.target is not None
        return await self._scale(ref, record.target, "rescaled")

    def descends(self, uid: str, ancestor: str) -> bool:
        """Whether the job ``uid`` is ``ancestor`` or a copy this actuator created from it
        (one re-creation or more: each copy's old uid kept as it was created). What a job
        says of itself (``bellows.io/recreated-from``) is never asked: a tenant writes it."""
        for _ in range(self._max_steps):
            if uid == ancestor:
                return True
            if (older := self._created.get(uid)) is None:
                return False
            uid = older
        return False

    async def _refuse_record(self, kind: KindAdapter, bad: BadRecord) -> Outcome:
        """Report a record that failed its checks (a log line, and a Warning Event on its
        job when there is one); nothing else is done with it, nor with its job."""
        problem = f"re-creation record {self._records_namespace}/{bad.name}: {bad.problem}"
        _log.warning("recreation.record_refused", record=bad.name, problem=bad.problem)
        job = JobRef(kind.kind, bad.namespace, bad.job).key if bad.namespace and bad.job else ""
        if job:
            obj = await self._api.get_job(kind, bad.namespace, bad.job)
            if obj is not None:
                await self._recorder.record(obj, "RecordRefused", problem, warning=True)
        return Outcome(job or f"record/{bad.name}", "invalid", problem)

    async def resume_interrupted(self, namespace: str | None = None) -> list[Outcome]:
        """Finish every scaling a previous controller left half done (journal not ``done``).

        With Kueue cooperation on, also every halt of a Kueue job whose Workload was left
        active (journal ``queued``, ``rejected`` or ``preempted``); those already complete
        give no outcome.
        """
        outcomes = await self.finish_recreations(namespace)
        for kind in self._kinds.values():
            async for page, _ in self._api.list_job_pages(kind, namespace):
                for obj in page:
                    notes = obj["metadata"].get("annotations") or {}
                    if not keys.opted_in(notes):
                        continue  # never read past the metadata of a job that did not opt in
                    journal = Journal.read(notes)
                    meta = obj["metadata"]
                    ref = JobRef(kind.kind, meta["namespace"], meta["name"])
                    if journal.phase in (Phase.SUSPENDING, Phase.PATCHED) and journal.target:
                        outcomes.append(await self._scale(ref, journal.target, "rescaled"))
                    elif (
                        self._kueue
                        and journal.phase in _HALT_RESULTS
                        and queue_name(obj) is not None
                    ):
                        status = notes.get(keys.STATUS) or str(journal.phase)
                        # no wait: a Workload Kueue has not (re)created yet is left for later
                        outcome = await self._halt(ref, journal.phase, status, wait=False)
                        if outcome.result != "unchanged":
                            outcomes.append(outcome)
        return outcomes

    # ----- the loop ----------------------------------------------------------------------------

    async def _scale(
        self,
        ref: JobRef,
        target: tuple[int, int],
        verb: Result,
        *,
        done: float | None = None,
        reason: str = "",
        gpu_type: str = "",
    ) -> Outcome:
        in_place: list[bool] = []  # this call's dry-run answer, once asked

        def plan(read: _Read) -> Step | KueueStep | RecreateStep:
            kind, obj, settings = read.kind, read.obj, read.settings
            endpoint = (
                None if self._progress is None else self._progress.env(ref.namespace, ref.name)
            )
            env = TargetEnv(target_env(settings, *target), endpoint)
            if _record_due(obj, read.record):  # create from the record, or drop the record
                return plan_recreate(
                    kind, obj, read.record, target=target, env=env, requested=target,
                    now=self._now(), in_place=None,
                )  # fmt: skip
            assert obj is not None  # a job not there always has a record due
            view = kind.view(obj, settings.env_names)
            requested = requested_allocation(view, settings)
            # pinned only while suspended: the patch that sizes it carries the pin (a job
            # running, already at its target or still to halt, is not placed now)
            placement = self._ask(ref, target[0], view, kueue=read.kueue, gpu_type=gpu_type)
            if getattr(kind, "recreates", False):
                common: dict[str, Any] = {
                    "target": target,
                    "env": env,
                    "requested": requested,
                    "now": self._now(),
                    "in_place": in_place[0] if in_place else None,
                    "done": done,
                    "reason": reason,
                    "placement": placement,
                    "topology_key": self._topology_key,
                }
                if read.kueue:  # held through its Workload, re-created in its queue
                    return plan_kueue_recreate(kind, obj, read.record, read.workload, **common)
                return plan_recreate(kind, obj, read.record, **common)
            if read.kueue:
                return plan_kueue_scale(
                    kind,
                    obj,
                    read.workload,
                    target=target,
                    env=env,
                    requested=requested,
                    launcher=read.launcher,
                    now=self._now(),
                    done=done,
                    reason=reason,
                    placement=placement,
                    topology_key=self._topology_key,
                )
            return plan_scale(
                kind,
                obj,
                target=target,
                env=env,
                requested=requested,
                launcher=read.launcher,
                now=self._now(),
                done=done,
                reason=reason,
                placement=placement,
                topology_key=self._topology_key,
            )

        gpus, batch = target
        message = f"{verb} on {gpus} GPUs with global batch {batch}"
        return await self._drive(
            ref,
            plan,
            verb,
            f"{message}: {reason}" if reason else message,
            (verb.capitalize(), False),
            in_place=in_place,
        )

    def _ask(
        self, ref: JobRef, gpus: int, view: JobView, *, kueue: bool, gpu_type: str = ""
    ) -> Ask:
        """:meth:`_placed`, on the nodes of ``gpu_type`` (its label value, in the template's
        node selector) where the job was given a type: always, as the type is where the
        core prices it (a job running on it keeps the selector it started with); never for
        a job Kueue admits (its flavor is Kueue's to assign)."""
        # a job Kueue admits runs on the flavor Kueue gives it: no type of Bellows' written
        product = self._products.get(gpu_type) if gpu_type and not kueue else None
        placed = self._placed(ref, gpus, view, kueue=kueue, gpu_type=gpu_type)
        return placed if product is None else OnType(placed, self._type_label, product, gpu_type)

    def _placed(
        self, ref: JobRef, gpus: int, view: JobView, *, kueue: bool, gpu_type: str = ""
    ) -> Placement | Pinned | KueueTopology:
        """What the sizing patch of ``ref`` to ``gpus`` asks of the scheduler: the configured
        placement, and the nodes the node view pins it to. Pinned only while suspended (the
        patch that sizes it carries the pin: a job running, at its target or still to halt,
        is not placed now). A job Kueue admits is only *preferred* there: Kueue starts jobs
        of its own accord, so a required pin could wait on GPUs it gave another job. Where
        Kueue places it by topology, Kueue is asked instead, on the fewest nodes: preferred
        on the node level, which Kueue's BestFit meets with one node whenever one holds
        the job (the view's pin is then only counted, not written). Required on one node
        would hold the job in Kueue's queue, and a StrictFIFO queue behind it, while no
        node does: measured slower (docs/kube.md, "Placement")."""
        if self._pins is None or not view.suspended:
            return self._placement
        nodes = self._pins.pin(
            ref.key, gpus, max(1, view.gpu_step), required=not kueue, gpu_type=gpu_type
        )
        if kueue and self._topology is not None and self._topology(view):
            return KueueTopology(self._placement, self._topology_key, required=False)
        if not nodes:
            return self._placement
        return Pinned(self._placement, tuple(nodes), required=not kueue)

    async def _halt(self, ref: JobRef, phase: Phase, message: str, *, wait: bool = True) -> Outcome:
        def plan(read: _Read) -> Step | KueueStep | RecreateStep:
            kind, obj = read.kind, read.obj
            if _record_due(obj, read.record):  # finish the re-creation first: never lost
                # (no target of a halt: the record's delete does not end the call)
                return plan_recreate(
                    kind, obj, read.record, target=(0, 0), env={}, requested=(0, 0),
                    now=self._now(), in_place=None,
                )  # fmt: skip
            assert obj is not None
            try:
                requested: tuple[int, int] | None = requested_allocation(
                    kind.view(obj, read.settings.env_names), read.settings
                )
            except SpecError:
                requested = None
            if read.kueue:
                return plan_kueue_halt(
                    kind,
                    obj,
                    read.workload,
                    phase=phase,
                    message=message,
                    requested=requested,
                    now=self._now(),
                )
            return plan_halt(
                kind, obj, phase=phase, message=message, requested=requested, now=self._now()
            )

        return await self._drive(
            ref, plan, _HALT_RESULTS[phase], message, _EVENTS[phase], wait=wait
        )

    async def _drive(
        self,
        ref: JobRef,
        plan: _Planner,
        verb: Result,
        message: str,
        event: tuple[str, bool],
        *,
        wait: bool = True,
        in_place: list[bool] | None = None,
    ) -> Outcome:
        """Plan, perform, read again, until the plan says nothing is left (or the job is
        gone, refused, blocked, or ``pending``: a wait for Kueue past ``halt_timeout_s``, or
        any such wait at all when ``wait`` is false). ``event`` (reason, warning) is the
        Event recorded once the job is in the wanted state. The call waits for its turn
        first (``max_active``)."""
        kind = self._kinds[ref.kind.lower()]
        job, wrote, pace = ref.key, False, _Pace(self._max_steps, self._max_conflicts)
        deadline: float | None = None  # of the waits for Kueue in this call
        activated: Mapping[str, Any] | None = None  # the job, once this call let Kueue in
        async with _Turn(self._turns) as turn:
            while True:
                if (spent := pace.spent(job)) is not None:
                    return spent
                read = await self._read(kind, ref)
                if isinstance(read, Outcome):
                    if activated is not None and read.detail in ("succeeded", "failed"):
                        # Kueue resumed it at the target, and it finished before the journal
                        # said so: the resume is still this call's, and so is its Event.
                        await self._recorder.record(activated, event[0], message, warning=event[1])
                    return read
                obj, kueue_job = read.obj, read.kueue
                step = await self._planned(job, plan, read)
                if isinstance(step, Outcome):
                    return step
                if isinstance(step, Nothing):
                    if wrote and kueue_job and obj is not None:  # a Kueue halt ends with its
                        # Workload deactivated
                        await self._recorder.record(obj, event[0], message, warning=event[1])
                        return Outcome(job, verb, message)
                    return Outcome(job, verb if wrote else "unchanged", step.reason)
                if isinstance(step, Blocked):
                    await self.report_problem(
                        job, step.problem, reason=step.reason, status=f"waiting: {step.problem}"
                    )
                    return Outcome(job, "pending", step.problem)
                if isinstance(step, RecreationSteps):
                    took = await self._recreation_step(
                        kind, ref, step, in_place, pace, verb=verb, event=event, message=message
                    )
                    if isinstance(took, Outcome):
                        return took
                    wrote = wrote or took
                    continue
                if obj is None:  # only a re-creation step is planned for a job not there
                    return Outcome(job, "dropped", "deleted")
                if isinstance(step, DeleteLauncher):
                    if (held := await self._delete_launcher(ref, step, read, turn)) is not None:
                        return held  # a finalizer keeps it: pending, said on the job
                    continue
                if isinstance(step, AwaitHalt):
                    if not await turn.waiting(self._await_halt(kind, ref, obj)):
                        return Outcome(
                            job,
                            "pending",
                            "the operator has not stopped the job's pods "
                            "yet; the journal on the job lets a later call finish",
                        )
                    continue
                if isinstance(step, AwaitEviction | AwaitWorkload):
                    if deadline is None:
                        deadline = asyncio.get_running_loop().time() + self._halt_timeout_s
                    if not wait or not await turn.waiting(
                        self._await_kueue(kind, ref, obj, read.workload, deadline)
                    ):
                        return Outcome(job, "pending", _waiting(step))
                    continue
                done = await self._write(kind, ref, step)
                if isinstance(done, Outcome):
                    return done
                if done is None:  # changed, or a Workload deleted: plan from a fresh read
                    if not await pace.met_change():
                        raise ActuationError(f"{job}: more than {self._max_conflicts} conflicts")
                    continue
                wrote = True
                if isinstance(step, PatchWorkload):
                    if step.active:
                        activated = obj
                    continue
                if step.phase is Phase.DONE or (step.phase in _EVENTS and not kueue_job):
                    await self._recorder.record(done, event[0], message, warning=event[1])
                    return Outcome(job, verb, message)

    async def _delete_launcher(
        self, ref: JobRef, step: DeleteLauncher, read: _Read, turn: _Turn
    ) -> Outcome | None:
        """Delete the MPIJob's stale launcher and wait until it is gone: ``None`` once it
        is (or it changed since it was read: plan again), else the ``pending`` outcome, its
        reason on the MPIJob (status ``waiting: …`` and a Warning Event
        ``LauncherNotDeleted``, once: :meth:`report_problem`).

        A launcher with a finalizer is not gone when its delete is answered: it stays,
        terminating, and every further delete changes nothing. So it is deleted once, then
        read again (backing off: :func:`bellows.kube.pacing.until`) for at most
        :data:`LAUNCHER_WAIT_S` (``halt_timeout_s`` if less), the call's turn given up
        meanwhile; one found terminating already (an earlier call deleted it) is neither
        deleted nor waited for again: the call is ``pending`` at once."""
        ns, launcher = ref.namespace, read.launcher or {}
        meta = launcher.get("metadata") or {}
        if meta.get("uid") == step.uid and meta.get("deletionTimestamp"):
            return await self._launcher_held(ref, launcher)
        answer = await self._api.delete_batch_job(
            ns, step.name, step.uid, resource_version=step.resource_version
        )
        if not isinstance(answer, Terminating):
            return None  # gone, or no longer that Job (409, 404): the next read says

        async def gone() -> bool:
            now = await self._api.get_batch_job(ns, step.name)
            return now is None or (now.get("metadata") or {}).get("uid") != step.uid

        within = min(LAUNCHER_WAIT_S, self._halt_timeout_s)
        if await turn.waiting(until(gone, within_s=within)):
            return None
        return await self._launcher_held(ref, answer.obj)

    async def _launcher_held(self, ref: JobRef, launcher: Mapping[str, Any]) -> Outcome:
        """The call ``pending`` on a launcher deleted and not gone, said on the MPIJob."""
        held = _launcher_held(launcher)
        await self.report_problem(
            ref.key, held, reason="LauncherNotDeleted", status=f"waiting: {held}"
        )
        return Outcome(ref.key, "pending", held)

    async def _planned(
        self, job: str, plan: _Planner, read: _Read
    ) -> Step | KueueStep | RecreateStep | Outcome:
        """The next step planned from ``read``, or the outcome of reporting why there is
        none (a spec Bellows cannot work with: still this job's problem, never the loop's)."""
        try:
            return plan(read)
        except SpecError as err:
            return await self.report_problem(job, str(err))
        except DATA_ERRORS as err:  # a value no check foresaw
            return await self.report_problem(job, f"its spec could not be read ({brief(err)})")

    async def _record_on(
        self, kind: KindAdapter, ref: JobRef, event: tuple[str, bool], message: str
    ) -> None:
        """Record the call's Event on the job as it is now (a re-created TrainJob)."""
        obj = await self._api.get_job(kind, ref.namespace, ref.name)
        if obj is not None:
            await self._recorder.record(obj, event[0], message, warning=event[1])

    async def _recreation_step(
        self,
        kind: KindAdapter,
        ref: JobRef,
        step: ProbeInPlace | WriteRecord | DeleteJob | CreateJob | DeleteRecord,
        in_place: list[bool] | None,
        pace: _Pace,
        *,
        verb: Result,
        event: tuple[str, bool],
        message: str,
    ) -> Outcome | bool:
        """One re-creation step of a call, bounded: whether it wrote, or the outcome that
        ends the call (``verb``, ``message``: the re-creation is complete)."""
        if isinstance(step, CreateJob) and pace.created:  # once per call, ever
            return Outcome(ref.key, "pending", "its copy was created and is gone")
        outcome = await self._recreate(kind, ref, step, in_place, event=event, message=message)
        if outcome == "done":
            return Outcome(ref.key, verb, message)
        pace.created = pace.created or (isinstance(step, CreateJob) and outcome == "written")
        # a step that met a change (409, 404): read again, after a while, a few times
        if outcome is None and not isinstance(step, ProbeInPlace) and not await pace.met_change():
            return Outcome(ref.key, "pending", "its re-creation kept meeting changes")
        return outcome == "written"

    async def _recreate(
        self,
        kind: KindAdapter,
        ref: JobRef,
        step: ProbeInPlace | WriteRecord | DeleteJob | CreateJob | DeleteRecord,
        in_place: list[bool] | None,
        *,
        event: tuple[str, bool],
        message: str,
    ) -> Literal["written", "done"] | None:
        """Perform one step of a TrainJob's re-creation (``bellows.kube.recreation``):
        ``"written"``, ``"done"`` once the record of a complete re-creation is deleted
        (the Event ``event`` then recorded on the new job),
        ``None`` when the next plan must be made from a fresh read (a probe answered, or a
        write that met a change: 409/404)."""
        ns, records = ref.namespace, self._records_namespace
        if isinstance(step, ProbeInPlace):
            answer = await self._api.dry_run_patch_job(kind, ns, ref.name, step.body)
            if answer is not None and in_place is not None:
                in_place[:] = [answer]
            return None
        try:
            if isinstance(step, WriteRecord):
                await self._api.write_configmap(
                    records, step.body, resource_version=step.resource_version
                )
            elif isinstance(step, DeleteJob):
                gone = await self._api.delete_job(
                    kind, ns, ref.name, uid=step.uid, resource_version=step.resource_version
                )
                return "written" if gone else None
            elif isinstance(step, CreateJob):
                await self._create(kind, ref, step)
            else:
                deleted = await self._api.delete_configmap(
                    records, step.name, step.resource_version
                )
                if not (deleted and step.done):
                    return None
                await self._record_on(kind, ref, event, message)  # the call's Event, once
                return "done"
        except (ConflictError, NotFoundError):
            return None
        return "written"

    async def _create(self, kind: KindAdapter, ref: JobRef, step: CreateJob) -> None:
        """Create the copy from its record, then say in the record that it was created (its
        uid): a record whose copy is gone is dropped, never created from again. The body
        was checked as the record was read (:func:`bellows.kube.records.read_record`)."""
        body = step.body
        created = await self._api.create_job(kind, ref.namespace, body)
        meta = created["metadata"]
        old = str(body["metadata"]["annotations"][keys.RECREATED_FROM])
        self._created[str(meta["uid"])] = old
        while len(self._created) > _CREATED_KEPT:
            del self._created[next(iter(self._created))]
        _log.info("recreation.created", job=ref.key, uid=meta["uid"], old_uid=old)
        name = record_name(ref.namespace, ref.name)
        record = await self._api.get_configmap(self._records_namespace, name)
        if record is None:
            return
        data = {**(record.get("data") or {}), "created-uid": str(meta["uid"])}
        rv = record["metadata"].get("resourceVersion")
        with contextlib.suppress(ConflictError, NotFoundError):  # the next read judges it
            await self._api.write_configmap(
                self._records_namespace, {**record, "data": data}, resource_version=rv
            )

    async def _write(
        self, kind: KindAdapter, ref: JobRef, step: SendPatch | PatchWorkload
    ) -> Mapping[str, Any] | Outcome | None:
        """Perform a write ``step``: the job as written (``{}`` for a Workload patch), the
        outcome that ends the call (the job deleted), or ``None`` when it must be planned
        again from a fresh read (the job changed, or its Workload was deleted: Kueue
        recreates it)."""
        try:
            if isinstance(step, PatchWorkload):
                await self._api.patch_workload(ref.namespace, step.name, step.body)
                return {}
            return await self._api.patch_job(kind, ref.namespace, ref.name, step.body)
        except NotFoundError:
            return (
                None if isinstance(step, PatchWorkload) else Outcome(ref.key, "dropped", "deleted")
            )
        except ConflictError:
            return None

    async def _read(self, kind: KindAdapter, ref: JobRef) -> _Read | Outcome:
        """The job read afresh with what its planner needs, or the outcome that ends the
        call (gone, finished, not opted in, another controller's, or refused)."""
        job = ref.key
        obj = await self._api.get_job(kind, ref.namespace, ref.name)
        record = await self._record(kind, ref) if getattr(kind, "recreates", False) else None
        if isinstance(record, BadRecord):  # never acted on, nor is its job until it goes
            return await self._refuse_record(kind, record)
        if record is not None and _record_due(obj, record):
            # a re-creation to finish first (the job deleted, or its copy made: the record
            # goes), or a stale record (the owner made a new job): whatever the job says
            settings = keys.parse_settings(record.body["metadata"].get("annotations") or {})
            return _Read(kind, obj, settings, None, False, None, record)
        if obj is None:
            return Outcome(job, "dropped", "deleted")
        if (state := finished_state(obj)) is not None:
            return Outcome(job, "dropped", state.lower())
        if obj["metadata"].get("deletionTimestamp"):
            return await self._terminating(obj, job)
        notes = obj["metadata"].get("annotations") or {}
        if not keys.opted_in(notes):
            return Outcome(job, "refused", "the job carries no bellows.io/ settings")
        try:
            seen = opted_job(kind, obj, kueue=self._kueue, env=False)
            if isinstance(seen, LeftAlone):
                if seen.why == "foreign":
                    return _skipped(job, seen.detail)
                if seen.why == "finished":
                    return Outcome(job, "dropped", seen.detail.lower())
                return await self.report_problem(job, seen.detail, reason="Refused")
            name = kind.launcher(obj)
            launcher = await self._api.get_batch_job(ref.namespace, name) if name else None
            queued = seen.view.queue is not None
            workload = await self._workload(obj) if queued else None
        except SpecError as err:
            return await self.report_problem(job, str(err))
        except DATA_ERRORS as err:  # a value no check foresaw: still this job's problem
            return await self.report_problem(job, f"its spec could not be read ({brief(err)})")
        return _Read(kind, obj, seen.settings, launcher, queued, workload, record)

    async def _record(self, kind: KindAdapter, ref: JobRef) -> Record | BadRecord | None:
        """The re-creation record of the TrainJob ``ref``, in the records namespace (``None``:
        none; a :class:`BadRecord`: one that failed its checks)."""
        name = record_name(ref.namespace, ref.name)
        found = await self._api.get_configmap(self._records_namespace, name)
        if found is None:
            return None
        return read_record(kind, found, records_namespace=self._records_namespace)

    async def _terminating(self, obj: Mapping[str, Any], job: str) -> Outcome:
        """A job whose delete has not completed (``deletionTimestamp`` set, a finalizer
        holding it): never written to; the call is ``pending``, its GPUs held until the job
        is gone (its ``DELETED`` is its completion), and a Warning Event says so, once per
        job (the retries of a pending call come every second)."""
        meta = obj["metadata"]
        names = [shown(f) for f in (meta.get("finalizers") or [])[:8]]  # a tenant's words
        detail = (
            f"the job is being deleted (since {shown(meta['deletionTimestamp'])}, finalizers: "
            f"{', '.join(names) or 'none'}); its GPUs count as held until it is gone"
        )
        uid = str(meta.get("uid", ""))
        if uid not in self._told_terminating:
            self._told_terminating[uid] = None
            while len(self._told_terminating) > _CREATED_KEPT:
                del self._told_terminating[next(iter(self._told_terminating))]
            await self._recorder.record(obj, "DeletePending", detail, warning=True)
        return Outcome(job, "pending", detail)

    async def _workload(self, obj: Mapping[str, Any]) -> WorkloadView | None:
        """The Workload Kueue keeps for the job ``obj``, or ``None`` when there is none now."""
        meta = obj["metadata"]
        listed = await self._api.list_workloads(
            meta["namespace"], label_selector=f"{JOB_UID}={meta['uid']}"
        )
        found = owned_workload(obj, listed)
        return None if found is None else read_workload(found)

    async def _await_kueue(
        self,
        kind: KindAdapter,
        ref: JobRef,
        obj: Mapping[str, Any],
        workload: WorkloadView | None,
        deadline: float,
    ) -> bool:
        """Wait until the job or its Workload changes (watching both); False once the loop's
        clock passes ``deadline``."""
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            return False
        watchers = [
            asyncio.create_task(self._job_changes(kind, ref, obj)),
            asyncio.create_task(self._workload_changes(obj, workload)),
        ]
        try:
            done, _ = await asyncio.wait(
                watchers, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                task.result()  # an API error other than an expired watch propagates
            return bool(done)
        finally:
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    async def _job_changes(self, kind: KindAdapter, ref: JobRef, obj: Mapping[str, Any]) -> None:
        """Return at the job's next change after the version read (or an expired watch)."""
        version = obj["metadata"]["resourceVersion"]
        with contextlib.suppress(ExpiredError):
            for ended in itertools.count():  # a watch the server ended: again, after a while
                async for _ in self._api.watch_jobs(
                    kind, ref.namespace, version, name=ref.name, timeout_s=60
                ):
                    return
                await backoff(ended)

    async def _workload_changes(
        self, obj: Mapping[str, Any], workload: WorkloadView | None
    ) -> None:
        """Return at the next change of the job's Workload: of the one read, or, with none
        read, at the creation of one the job controls."""
        namespace = obj["metadata"]["namespace"]
        with contextlib.suppress(ExpiredError):
            if workload is not None:
                for ended in itertools.count():
                    async for _ in self._api.watch_workloads(
                        namespace, workload.resource_version, name=workload.name, timeout_s=60
                    ):
                        return
                    await backoff(ended)
            items, version = await self._api.list_kueue(WORKLOADS, namespace)
            if owned_workload(obj, items) is not None:
                return  # created since the job was read
            for ended in itertools.count():
                async for _, new in self._api.watch_workloads(namespace, version, timeout_s=60):
                    version = new["metadata"]["resourceVersion"]
                    if owned_workload(obj, [new]) is not None:
                        return
                await backoff(ended)

    async def _await_halt(self, kind: KindAdapter, ref: JobRef, obj: Mapping[str, Any]) -> bool:
        """Wait (watching the one job) until the operator stopped it; False on timeout."""
        since = Journal.read(obj["metadata"].get("annotations") or {}).suspended_at
        version = obj["metadata"]["resourceVersion"]
        try:
            async with asyncio.timeout(self._halt_timeout_s):
                ended = 0  # watches the server ended: again, within the timeout, after a wait
                while True:
                    async for kind_of_event, new in self._api.watch_jobs(
                        kind, ref.namespace, version, name=ref.name, timeout_s=60
                    ):
                        if kind_of_event == "DELETED" or finished_state(new):
                            return True
                        version = new["metadata"]["resourceVersion"]
                        if kind.halted(new, since):
                            return True
                    await backoff(ended)
                    ended += 1
        except TimeoutError:
            return False
        except ExpiredError:
            return True  # re-plan from a fresh read


def _record_due(obj: Mapping[str, Any] | None, record: Record | None) -> bool:
    """Whether ``record`` is the next thing to act on: the job it re-creates is gone (create
    it), or the job now there is another (its copy, or a new one: delete the record), or
    it finished before its delete (delete the record)."""
    if record is None:
        return False
    return (
        obj is None
        or obj["metadata"].get("uid") != record.old_uid
        or finished_state(obj) is not None
    )


def _launcher_held(launcher: Mapping[str, Any]) -> str:
    """Why a scaling waits for the MPIJob's stale launcher, deleted and not gone: the
    finalizers that hold it (as written by whoever added them: shown escaped)."""
    meta = launcher.get("metadata") or {}
    names = [f for f in meta.get("finalizers") or [] if isinstance(f, str)]
    held = ", ".join(shown(f) for f in names[:8]) or "none"
    return (
        f"the MPIJob's launcher, batch Job {shown(meta.get('name'))}, is deleted and not "
        f"gone: its finalizers ({held}) keep it; the MPI operator makes the new launcher "
        "once it is gone, and the scaling goes on then"
    )


def _waiting(step: AwaitEviction | AwaitWorkload) -> str:
    what = (
        "Kueue to evict the job (suspended, its pods stopped, its quota released)"
        if isinstance(step, AwaitEviction)
        else step.reason
    )
    return f"waiting for {what}; the journal on the job lets a later call finish"


def _foreign(kind: KindAdapter, obj: Mapping[str, Any]) -> str | None:
    """:func:`foreign_manager`, with a value no schema allows read as nobody's."""
    try:
        return foreign_manager(obj, kind.manager)
    except SpecError:
        return None


def _skipped(job: str, manager: str) -> Outcome:
    """Nothing written: ``manager`` (``spec.runPolicy.managedBy``) runs the job."""
    return Outcome(job, "refused", f"spec.runPolicy.managedBy={manager!r}: not written to")
