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
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from bellows.autoscaler.decisions import Decision, Preempt, Reject, Rescale, Start
from bellows.inputs import DATA_ERRORS, brief
from bellows.jobs import SpecError
from bellows.kube import keys
from bellows.kube.adapters import KINDS
from bellows.kube.client import ConflictError, ExpiredError, KubeApi, NotFoundError
from bellows.kube.journal import (
    AwaitHalt,
    Blocked,
    DeleteLauncher,
    Journal,
    Nothing,
    Phase,
    Step,
    plan_halt,
    plan_scale,
    target_env,
)
from bellows.kube.kinds import JobKind, JobRef, finished_state, foreign_manager
from bellows.kube.recording import Recorder
from bellows.kube.specs import requested_allocation

__all__ = ["ActuationError", "Actuator", "Outcome"]

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


_HALT_RESULTS: dict[Phase, Result] = {
    Phase.QUEUED: "queued",
    Phase.REJECTED: "rejected",
    Phase.PREEMPTED: "preempted",
}


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
        kinds: Iterable[JobKind] = KINDS,
        recorder: Recorder | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        halt_timeout_s: float = 120.0,
        max_conflicts: int = 10,
    ) -> None:
        self._api = api
        self._kinds = {k.kind.lower(): k for k in kinds}
        self._recorder = recorder or Recorder(api, now=now)
        self._now = now
        self._halt_timeout_s = halt_timeout_s
        self._max_conflicts = max_conflicts

    def ref(self, job: str) -> JobRef:
        """The job behind a core job name (``<kind>/<namespace>/<name>``)."""
        return JobRef.parse(job, {name: k.kind for name, k in self._kinds.items()})

    async def apply(self, decision: Decision, *, done: float | None = None) -> Outcome:
        """Drive the job to what ``decision`` says; returns what was done.

        ``done``: the samples the job has processed, journaled with a start or rescale
        (``bellows.io/progress``) for a controller that restarts later.
        """
        if isinstance(decision, Start | Rescale):
            verb: Result = "started" if isinstance(decision, Start) else "rescaled"
            target = (decision.gpus, decision.batch)
            return await self._scale(self.ref(decision.job), target, verb, done=done)
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
        """Suspend an arrived job that was submitted running, until a Start decision."""
        return await self._halt(self.ref(job), Phase.QUEUED, reason)

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
        for _ in range(self._max_conflicts):
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
                continue
            except NotFoundError:
                return Outcome(job, "dropped", "deleted")
            await self._recorder.record(done, reason, problem, warning=True)
            return Outcome(job, "invalid" if reason == "InvalidSettings" else "refused", problem)
        raise ActuationError(f"{job}: more than {self._max_conflicts} conflicts")

    async def notify(self, job: str, reason: str, message: str, *, warning: bool = False) -> None:
        """Record an Event on the job (best effort, as every Event; nothing else is written)."""
        ref = self.ref(job)
        obj = await self._api.get_job(self._kinds[ref.kind.lower()], ref.namespace, ref.name)
        if obj is not None:
            await self._recorder.record(obj, reason, message, warning=warning)

    async def resume_interrupted(self, namespace: str | None = None) -> list[Outcome]:
        """Finish every scaling a previous controller left half done (journal not ``done``)."""
        outcomes: list[Outcome] = []
        for kind in self._kinds.values():
            async for page, _ in self._api.list_job_pages(kind, namespace):
                for obj in page:
                    notes = obj["metadata"].get("annotations") or {}
                    if not keys.opted_in(notes):
                        continue  # never read past the metadata of a job that did not opt in
                    journal = Journal.read(notes)
                    if journal.phase in (Phase.SUSPENDING, Phase.PATCHED) and journal.target:
                        meta = obj["metadata"]
                        ref = JobRef(kind.kind, meta["namespace"], meta["name"])
                        outcomes.append(await self._scale(ref, journal.target, "rescaled"))
        return outcomes

    # ----- the loop ----------------------------------------------------------------------------

    async def _scale(
        self, ref: JobRef, target: tuple[int, int], verb: Result, *, done: float | None = None
    ) -> Outcome:
        def plan(
            kind: JobKind,
            obj: Mapping[str, Any],
            settings: keys.Settings,
            launcher: Mapping[str, Any] | None,
        ) -> Step:
            view = kind.view(obj, settings.env_names)
            return plan_scale(
                kind,
                obj,
                target=target,
                env=target_env(settings, *target),
                requested=requested_allocation(view, settings),
                launcher=launcher,
                now=self._now(),
                done=done,
            )

        gpus, batch = target
        return await self._drive(
            ref, plan, verb, f"{verb} on {gpus} GPUs with global batch {batch}"
        )

    async def _halt(self, ref: JobRef, phase: Phase, message: str) -> Outcome:
        def plan(
            kind: JobKind,
            obj: Mapping[str, Any],
            settings: keys.Settings,
            launcher: Mapping[str, Any] | None,
        ) -> Step:
            try:
                requested: tuple[int, int] | None = requested_allocation(
                    kind.view(obj, settings.env_names), settings
                )
            except SpecError:
                requested = None
            return plan_halt(
                kind, obj, phase=phase, message=message, requested=requested, now=self._now()
            )

        return await self._drive(ref, plan, _HALT_RESULTS[phase], message)

    async def _drive(
        self,
        ref: JobRef,
        plan: Callable[[JobKind, Mapping[str, Any], keys.Settings, Mapping[str, Any] | None], Step],
        verb: Result,
        message: str,
    ) -> Outcome:
        kind = self._kinds[ref.kind.lower()]
        job, conflicts, wrote = ref.key, 0, False
        while True:
            obj = await self._api.get_job(kind, ref.namespace, ref.name)
            if obj is None:
                return Outcome(job, "dropped", "deleted")
            if (state := finished_state(obj)) is not None:
                return Outcome(job, "dropped", state.lower())
            notes = obj["metadata"].get("annotations") or {}
            if not keys.opted_in(notes):
                return Outcome(job, "refused", "the job carries no bellows.io/ settings")
            try:
                if (manager := foreign_manager(obj, kind.manager)) is not None:
                    return _skipped(job, manager)
                view = kind.view(obj, ())
                if view.blocker:
                    return await self.report_problem(job, view.blocker, reason="Refused")
                settings = keys.parse_settings(notes)
                name = kind.launcher(obj)
                launcher = await self._api.get_batch_job(ref.namespace, name) if name else None
                step = plan(kind, obj, settings, launcher)
            except SpecError as err:
                return await self.report_problem(job, str(err))
            except DATA_ERRORS as err:  # a value no check foresaw: still this job's problem
                return await self.report_problem(job, f"its spec could not be read ({brief(err)})")
            if isinstance(step, Nothing):
                return Outcome(job, verb if wrote else "unchanged", step.reason)
            if isinstance(step, Blocked):
                await self.report_problem(
                    job, step.problem, reason=step.reason, status=f"waiting: {step.problem}"
                )
                return Outcome(job, "pending", step.problem)
            if isinstance(step, DeleteLauncher):
                await self._api.delete_batch_job(
                    ref.namespace, step.name, step.uid, resource_version=step.resource_version
                )
                continue
            if isinstance(step, AwaitHalt):
                if not await self._await_halt(kind, ref, obj):
                    return Outcome(
                        job,
                        "pending",
                        "the operator has not stopped the job's pods "
                        "yet; the journal on the job lets a later call finish",
                    )
                continue
            try:
                done = await self._api.patch_job(kind, ref.namespace, ref.name, step.body)
            except ConflictError:
                conflicts += 1
                if conflicts > self._max_conflicts:
                    raise ActuationError(
                        f"{job}: more than {self._max_conflicts} conflicts"
                    ) from None
                continue
            except NotFoundError:
                return Outcome(job, "dropped", "deleted")
            wrote = True
            if step.phase in (Phase.DONE, *_EVENTS):
                reason, warning = _EVENTS.get(step.phase, (verb.capitalize(), False))
                await self._recorder.record(done, reason, message, warning=warning)
                return Outcome(job, verb, message)

    async def _await_halt(self, kind: JobKind, ref: JobRef, obj: Mapping[str, Any]) -> bool:
        """Wait (watching the one job) until the operator stopped it; False on timeout."""
        since = Journal.read(obj["metadata"].get("annotations") or {}).suspended_at
        version = obj["metadata"]["resourceVersion"]
        try:
            async with asyncio.timeout(self._halt_timeout_s):
                while True:
                    async for kind_of_event, new in self._api.watch_jobs(
                        kind, ref.namespace, version, name=ref.name, timeout_s=60
                    ):
                        if kind_of_event == "DELETED" or finished_state(new):
                            return True
                        version = new["metadata"]["resourceVersion"]
                        if kind.halted(new, since):
                            return True
        except TimeoutError:
            return False
        except ExpiredError:
            return True  # re-plan from a fresh read


def _foreign(kind: JobKind, obj: Mapping[str, Any]) -> str | None:
    """:func:`foreign_manager`, with a value no schema allows read as nobody's."""
    try:
        return foreign_manager(obj, kind.manager)
    except SpecError:
        return None


def _skipped(job: str, manager: str) -> Outcome:
    """Nothing written: ``manager`` (``spec.runPolicy.managedBy``) runs the job."""
    return Outcome(job, "refused", f"spec.runPolicy.managedBy={manager!r}: not written to")
