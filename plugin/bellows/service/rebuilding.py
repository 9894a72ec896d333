"""A controller's start-up: its state recovered from the cluster, then the optimizer rehearsed.

Interrupted rescales are finished first; jobs Bellows runs are adopted at their allocation;
jobs waiting (suspended, not rejected) re-enter the queue in creation order; jobs with
invalid settings are reported. The jobs are read a page at a time and only their specs are
kept. Last, the optimizer meets the next rounds' likely shapes (:meth:`Rebuild.rehearse`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

import structlog

from bellows.autoscaler import AnyAutoscaler, Mode, Rescale, Start
from bellows.inputs import DATA_ERRORS, brief
from bellows.jobs import Allocation, JobSpec
from bellows.kube import Arrived, Invalid, JobView, KindAdapter, Skipped
from bellows.kube.client import unavailable
from bellows.kube.journal import Phase
from bellows.service.intake import Intake
from bellows.service.parts import Part, Parts
from bellows.service.scoping import Scope, object_key

__all__ = ["Rebuild"]

_log = structlog.get_logger("bellows.controller")
_T = TypeVar("_T")


class Rebuild(Part):
    """Recovers one controller's jobs from the cluster; see the module docstring."""

    def __init__(
        self, parts: Parts, *, scope: Scope, intake: Intake, timer: Callable[[], float]
    ) -> None:
        super().__init__(parts)
        self._scope = scope
        self._intake = intake
        self._timer = timer

    async def recover_all(self, now: float) -> None:
        """Read every job of the cluster a page at a time into the core: the running ones
        adopted as they are met, the waiting ones queued after, in creation order."""
        waiting: list[tuple[str, Arrived]] = []
        for namespace in self._scope.namespaces:
            # a TrainJob a killed controller deleted to re-create it is in no list: its
            # record is; the copy is then read below, running at the journal's allocation
            recreated = await self._isolated(
                f"records of {namespace or 'every namespace'}",
                self._actuator.finish_recreations(namespace),
                report=False,
            )
            for outcome in recreated or ():
                _log.info("rebuild.recreated", job=outcome.job, result=outcome.result)
                if outcome.result == "invalid":  # a record that failed its checks
                    self._observer.job_set_aside("record")
            for kind in self._actuator.kinds:
                async for page, _ in self._api.list_job_pages(kind, namespace):
                    for obj in page:
                        key = object_key(kind, obj)
                        found = await self._isolated(key, self._recovered(kind, obj, now))
                        if found is not None:
                            waiting.append(found)
        waiting.sort(key=lambda item: item[0])
        # their rows in vectorized batches, not one small table per arrival (10 000 jobs:
        # 0.3 s, not 2 s of the takeover; benchmarks/takeover.py)
        self._tabulated(job.spec for _, job in waiting)
        for _, job in waiting:
            admitted = self._intake.admit(job, now, arrived_at=now, quiet=True)
            await self._isolated(job.spec.name, admitted)

    def _tabulated(self, specs: Iterable[JobSpec]) -> None:
        """The core's rows of ``specs`` computed ahead, in batches; when a batch cannot be
        (a job the JSA cannot tabulate), each job's own arrival computes its row, and only
        that job is set aside."""
        try:
            self._auto.tabulate(specs)
        except Exception as err:
            _log.info("rebuild.tabulate_failed", error=brief(err))

    async def _isolated(self, job: str, work: Awaitable[_T], *, report: bool = True) -> _T | None:
        """``work`` for one job. Whatever that job's objects raise (a value no check
        foresaw, an API error about them, anything) sets the job aside: it is reported
        invalid (an Event on it, the metrics) and the caller goes on with the others in the
        same pass. Only an API server that cannot be asked now (``unavailable``) stops the
        pass, to be retried whole: that is the cluster's trouble, not the job's."""
        try:
            return await work
        except Exception as err:
            if unavailable(err):
                raise
            reason = "spec" if isinstance(err, DATA_ERRORS) else _failure(err)
            _log.exception("job.set_aside", job=job, reason=reason)
            self._observer.job_set_aside(reason)
            if report:
                problem = f"Bellows could not take the job ({brief(err)})"
                await self._reports.report(Invalid(job, problem))
            return None

    async def _recovered(
        self, kind: KindAdapter, obj: dict[str, Any], now: float
    ) -> tuple[str, Arrived] | None:
        """Take one job found at start-up; a job that waits is returned (creation, job)."""
        if not await self._scope.takes(kind, obj, now):
            return None
        seen = await self._reader.examine(kind, obj)
        if isinstance(seen, Invalid):
            await self._reports.report(seen)
        elif isinstance(seen, Skipped):
            await self._reports.skip(seen)
        if not isinstance(seen, Arrived) or (seen := await self._intake.fit(seen)) is None:
            return None
        journal = self._intake.journal(seen)  # what it holds up of what was written
        running = seen.running
        # a journal value not trusted reads as absent (the job Bellows' settings and replicas
        # rule it out for is queued: held, its pods stopped, then sized afresh; its replicas
        # buy it no GPUs in the meantime, whatever they ask for)
        if journal.phase in (Phase.SUSPENDING, Phase.PATCHED) and journal.target:
            # a scaling the previous controller left half done: finish it first
            gpus, batch = journal.target
            was = journal.allocation or journal.target
            sized_on = self._intake.typed_of(seen) or ""  # the type it was being sized on
            outcome = await self._actuator.apply(
                Rescale(seen.spec.name, *was, gpus, batch, gpu_type=sized_on)
            )
            _log.info("rebuild.resumed", job=outcome.job, result=outcome.result)
            if outcome.result == "dropped":
                return None
            if outcome.result == "pending":  # its pods may still run: count their GPUs
                self._roster.held[seen.spec.name] = seen.view.gpus
            else:
                running = Allocation(gpus, batch)
        seen, recalled = self._intake.recalled(seen)
        typed = None if running is None else self._intake.typed_of(seen)
        if running is not None and typed is not None:
            self._roster.held[seen.spec.name] = running.gpus
            self._roster.known(seen.spec.name, seen.view.uid)
            done, since = self._intake.progress(seen, now)
            self._intake.charge(seen)
            adopted = self._intake.adopt(seen, running, now, done=done, since=since,
                                         gpu_type=typed)  # fmt: skip
            if adopted and recalled is not None and recalled.done is not None:
                # resumed when the journal says; then at the samples its reports said, as the
                # last leader's core had them (not a resume then)
                self._auto.revise(seen.spec, now, done=recalled.done, since=recalled.since)
            if adopted:
                self._observer.arrived(seen.spec, now)
                self._observer.took_effect(Start(seen.spec.name, running.gpus, running.batch), now)
            return None
        if journal.phase is Phase.REJECTED:
            return None
        lean = Arrived(seen.spec, _lean(seen.view), None, efficiency=seen.efficiency)
        return _created(seen), lean

    def rehearse(self, now: float) -> float:
        """Run the next likely rounds on copies of the core: for each kind of job (category)
        one more of it arriving, and one of it finishing.

        The optimizer compiles a kernel for each new problem shape it meets, once per
        process, which takes a second or more; meeting the likely shapes now, before events
        are consumed, keeps those seconds out of the first windows' latency (later, in
        ``run_controller``, a kernel not met here compiles in the background while the
        NumPy engine answers: :meth:`RentRule.in_background` on the rent rule the runner
        owns and passes in, :attr:`Autoscaler.engines`). The copies
        (:meth:`Autoscaler.fork`) and their decisions are thrown away. The NumPy path
        compiles nothing, so it skips this. Returns the seconds it took.
        """
        if self._auto.config.optimizer == "numpy":
            return 0.0
        names = [*self._auto.allocations, *self._auto.queued]
        kinds = {self._auto.job(name).category: name for name in names}
        started = self._timer()
        later = now + 1.0
        # "auto" would rent NumPy for a new shape (docs/optimizer.md): here it compiles now
        with self._auto.engines.rent.compiling():
            for name in kinds.values():
                leaving = self._auto.fork()
                leaving.finish(name, later)
                leaving.step(_first_step(leaving, later))
                coming = self._auto.fork()
                spec = self._auto.job(name)
                coming.arrive(dataclasses.replace(spec, name=f"{spec.name}-rehearsal"), later)
                coming.step(_first_step(coming, later))
        seconds = self._timer() - started
        if kinds:
            _log.info("rebuild.rehearsed", seconds=round(seconds, 3))
        return seconds


def _failure(err: Exception) -> str:
    """The metric's reason for a job set aside: ``api`` for an API error about its objects
    (a 4xx, a 500, an actuation that kept conflicting), else ``unexpected``."""
    module = type(err).__module__
    return "api" if module.startswith(("kubernetes", "bellows.kube")) else "unexpected"


def _first_step(core: AnyAutoscaler, now: float) -> float:
    """When the step a fact fed at ``now`` leads to first is rehearsed: at once in Bellows
    mode (a fill, if GPUs are free while jobs wait), at the round the core's clock has due
    in paper mode (it decides only in rounds)."""
    due = core.next_round_at()
    return now if core.config.mode is Mode.BELLOWS or due is None else max(due, now)


def _lean(view: JobView) -> JobView:
    """What :meth:`Intake.admit <bellows.service.intake.Intake.admit>` reads of a waiting
    job's view, kept until the rebuild queues it: not the raw object, its annotations (the
    profile's JSON text among them) nor its env values. 10 000 of those, held through the
    rebuild, cost ~20 MiB of heap, and the Python allocator's arenas they pin stay resident
    after (docs/live.md)."""
    return dataclasses.replace(view, annotations={}, env={}, raw={})


def _created(seen: Arrived) -> str:
    created = seen.view.raw.get("metadata", {}).get("creationTimestamp")
    return str(created or "")
