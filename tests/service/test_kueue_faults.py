"""The live loop beside Kueue, under faults: nothing lost, nothing started twice, never above
the ClusterQueue's quota, and Kueue never fought.

Each test runs ``run_bridge``/``run_controller`` against a real nats-server and the strict
emulated cluster with its emulated Kueue (``live(kueue=...)``): every job names a LocalQueue
whose ClusterQueue holds the GPUs as quota. The emulated Kueue undoes any suspend written on
an admitted job, as Kueue does, and counts it: a test that fights Kueue fails visibly.
"""

from __future__ import annotations

from typing import Any

import pytest

from bellows.emulator.store import Change
from bellows.kube import keys
from bellows.kube.kueue import JOB_UID
from tests.service.livecluster import CLUSTER_QUEUE, LATENCY_S, NS, Live, jobs, live

pytestmark = pytest.mark.slow


def _fights(stack: Live) -> int:
    assert stack.kube.kueue is not None
    return len(stack.kube.kueue.fights)


def _phase(stack: Live, name: str) -> str | None:
    obj = stack.objects().get(name) or {}
    return (obj.get("metadata", {}).get("annotations") or {}).get(keys.PHASE)


def _running(stack: Live, name: str) -> bool:
    obj = stack.objects().get(name) or {}
    suspended = ((obj.get("spec") or {}).get("runPolicy") or {}).get("suspend", True)
    return _phase(stack, name) == "done" and not suspended


def _job_of(stack: Live, workload: dict[str, Any]) -> str | None:
    uid = (workload["metadata"].get("labels") or {}).get(JOB_UID)
    return stack.witness.uids.get(uid or "")


def _active(obj: dict[str, Any] | None) -> bool:
    return bool(((obj or {}).get("spec") or {}).get("active", True))


async def test_kueue_jobs_are_sized_within_the_quota_without_fighting_kueue() -> None:
    async with live(kueue=8) as stack:
        stack.start_bridge()
        stack.start_controller("controller")
        names = await stack.submit(jobs(8, seed=4))
        await stack.all_done(names, timeout_s=60)
        stack.alive()
        stack.witness.check(names)
        assert _fights(stack) == 0
        # Bellows sized them: every job ran at the allocation its journal gives
        for name in names:
            assert stack.witness.jobs[name].resumes, name


STEPS = ("suspending", "deactivated", "patched", "activated")


@pytest.mark.parametrize("step", STEPS)
async def test_a_controller_killed_between_two_steps_of_a_kueue_rescale_is_finished_by_the_next(
    step: str,
) -> None:
    async with live(kueue=8) as stack:
        stack.start_bridge()
        stack.start_controller("first")
        # long enough to be running when the others come, and still when the second
        # controller takes over on a loaded machine (the Kueue rescale has more steps)
        trace = jobs(4, scale=10.0)
        first = await stack.submit(trace[:1])
        await stack.until("the first job running", lambda: _running(stack, first[0]))
        interrupted: list[tuple[str, str]] = []

        def kill(name: str) -> None:
            # only a rescale of a job that ran (not the start of a queued one)
            if "first" in stack.tasks and not interrupted and stack.witness.jobs[name].resumes:
                obj = stack.objects()[name]
                interrupted.append((name, obj["metadata"]["annotations"].get(keys.TARGET, "")))
                stack.tasks["first"][0].cancel()

        def on_phase(name: str, phase: str, obj: dict[str, Any]) -> None:
            if phase == step:
                kill(name)

        def on_workload(change: Change) -> None:
            name = _job_of(stack, change.obj)
            if name is None or change.kind != "MODIFIED":
                return
            was, now = _active(change.old), _active(change.obj)
            if (step, was, now) in (("deactivated", True, False), ("activated", False, True)):
                kill(name)

        stack.witness.phase_hooks.append(on_phase)
        stack.witness.workload_hooks.append(on_workload)
        rest = await stack.submit(trace[1:], first=1)
        await stack.until("a rescale interrupted", lambda: bool(interrupted), timeout_s=45)
        await stack.kill("first")
        name, target = interrupted[0]
        stack.start_controller("second")
        await stack.all_done(first + rest, timeout_s=90)
        stack.alive()
        stack.witness.check(first + rest, events_exact=False)
        assert _fights(stack) == 0
        assert target, f"{name} had no target when the controller died"
        assert target in stack.witness.jobs[name].resumes[1:], (
            target,
            stack.witness.jobs[name].resumes,
        )


async def test_a_workload_deleted_and_recreated_mid_rescale_loses_nothing() -> None:
    async with live(kueue=8) as stack:
        stack.start_bridge()
        stack.start_controller("controller")
        trace = jobs(4, scale=4.0)
        first = await stack.submit(trace[:1])
        await stack.until("the first job running", lambda: _running(stack, first[0]))
        deleted: list[str] = []
        store = stack.kube.store
        workloads = next(r for key, r in store.resources.items() if key.endswith("/workloads"))

        def on_phase(name: str, phase: str, obj: dict[str, Any]) -> None:
            if phase != "suspending" or deleted or not stack.witness.jobs[name].resumes:
                return
            uid = obj["metadata"]["uid"]
            for workload in store.list_objects(workloads, NS)[0]:
                if (workload["metadata"].get("labels") or {}).get(JOB_UID) == uid:
                    store.delete(workloads, NS, workload["metadata"]["name"])
                    deleted.append(name)

        stack.witness.phase_hooks.append(on_phase)
        rest = await stack.submit(trace[1:], first=1)
        await stack.until("a Workload deleted mid-rescale", lambda: bool(deleted), timeout_s=45)

        def recreated() -> bool:
            return any(
                (w["metadata"].get("labels") or {}).get(JOB_UID)
                == stack.objects()[deleted[0]]["metadata"]["uid"]
                for w in store.list_objects(workloads, NS)[0]
            )

        await stack.until("Kueue recreating the Workload", recreated)
        await stack.all_done(first + rest, timeout_s=60)
        stack.alive()
        # Kueue re-admits the job on its new Workload before Bellows deactivates it again:
        # one more stop and resume at the same size, made by Kueue, and nothing lost
        stack.witness.check(first + rest, events_exact=False, repeats_ok=True)
        assert _fights(stack) == 0


async def test_a_quota_lowered_under_running_jobs_is_respected_within_one_latency() -> None:
    async with live(kueue=8, grace_s=LATENCY_S) as stack:
        stack.start_bridge()
        stack.start_controller("controller")
        names = await stack.submit(jobs(6, seed=5, scale=3.0))
        await stack.until(
            "jobs holding more than 4 GPUs", lambda: sum(stack.witness.held().values()) > 4
        )
        stack.kube.set_cluster_queue_quota(CLUSTER_QUEUE, 4)
        await stack.until(
            "the GPUs back within the lowered quota",
            lambda: bool(stack.witness.drops) and stack.witness.drops[0].within_at is not None,
        )
        await stack.all_done(names, timeout_s=90)
        stack.alive()
        stack.witness.check(names, events_exact=False)
        assert _fights(stack) == 0
        assert stack.witness.peak_gpus <= 8
