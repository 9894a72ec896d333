"""The pure planners of a Kueue job (``bellows.kube.kueue_journal``), against a small model of
Kueue and the operator: every step of the protocol, a controller killed between any two
steps, a Workload deleted and recreated, and never a write of ``suspend``."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bellows.emulator.patching import merge_patch
from bellows.kube import MPIJobKind, PyTorchJobKind, keys
from bellows.kube.journal import Blocked, DeleteLauncher, Nothing, Phase, SendPatch, target_env
from bellows.kube.kinds import JobKind, conditions
from bellows.kube.kueue import JOB_UID, KUEUE_QUEUE, read_workload, workload_name
from bellows.kube.kueue_journal import (
    AwaitEviction,
    AwaitWorkload,
    KueueStep,
    PatchWorkload,
    plan_kueue_halt,
    plan_kueue_scale,
)

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
TORCH = PyTorchJobKind()
TARGET = (4, 256)
ENV = {"GLOBAL_BATCH_SIZE": "256", "LOCAL_BATCH_SIZE": "64"}
REQUESTED = (2, 256)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _set_condition(obj: dict[str, Any], kind: str, status: bool, at: datetime) -> None:
    found = obj.setdefault("status", {}).setdefault("conditions", [])
    for entry in found:
        if entry["type"] == kind:
            if entry["status"] != ("True" if status else "False"):
                entry.update(status="True" if status else "False", lastTransitionTime=_stamp(at))
            return
    found.append(
        {"type": kind, "status": "True" if status else "False", "lastTransitionTime": _stamp(at)}
    )


def _true(obj: dict[str, Any] | None, kind: str) -> bool:
    return obj is not None and conditions(obj).get(kind, {}).get("status") == "True"


@dataclass
class World:
    """A job, its Workload, and the moves Kueue and the operator make, as Kueue v0.19.2's
    reconciler makes them (see /work/shared/design/KUBEFLOW.md, "Kueue"), quota unbounded."""

    job: dict[str, Any]
    workload: dict[str, Any] | None
    kind: JobKind = TORCH
    minute: int = 0
    version: int = 100
    recreations: int = 0
    writes: list[KueueStep] = field(default_factory=list)

    def now(self) -> datetime:
        return T0 + timedelta(minutes=self.minute)

    def bump(self, obj: dict[str, Any]) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)

    # ----- what Kueue and the operator see -------------------------------------------------------

    def suspended(self) -> bool:
        return bool(self.job["spec"]["runPolicy"].get("suspend"))

    def synced(self) -> bool:
        return self.workload is not None and {
            p["name"]: p["count"] for p in self.workload["spec"]["podSets"]
        } == self.kind.pod_counts(self.job)

    def admitted(self) -> bool:
        """Admitted, matching the job, and not evicted (``active: false``)."""
        return (
            _true(self.workload, "Admitted")
            and self.synced()
            and self.workload is not None
            and self.workload["spec"]["active"]
        )

    def reserved(self) -> bool:
        return _true(self.workload, "QuotaReserved")

    def stopped(self) -> bool:
        """No pod of the job runs (what Kueue waits for before releasing the quota)."""
        return self.kind.halted(self.job, None)

    def new_workload(self) -> dict[str, Any]:
        meta = self.job["metadata"]
        self.recreations += 1
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(self.job["kind"], meta["name"], meta["uid"]),
                "namespace": meta["namespace"],
                "uid": f"w-{self.recreations}",
                "labels": {JOB_UID: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": self.job["apiVersion"],
                        "kind": self.job["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": meta["labels"][KUEUE_QUEUE], "active": True, "podSets": []},
        }
        self.bump(workload)
        self._sync(workload)
        return workload

    def _sync(self, workload: dict[str, Any]) -> None:
        workload["spec"]["podSets"] = [
            {"name": name, "count": count} for name, count in self.kind.pod_counts(self.job).items()
        ]

    def moves(self, *, faults: bool = False) -> list[tuple[str, Callable[[], None]]]:
        """The moves Kueue and the operator may make now (each one write)."""
        out: list[tuple[str, Callable[[], None]]] = []
        job, workload, now = self.job, self.workload, self.now()

        def write(obj: dict[str, Any], change: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                change()
                self.bump(obj)

            return run

        if workload is None:

            def create() -> None:
                self.workload = self.new_workload()

            out.append(("create", create))
        else:
            if faults:

                def delete() -> None:
                    self.workload = None

                out.append(("delete", delete))
            if not self.suspended() and not self.admitted():
                out.append(
                    ("suspend", write(job, lambda: job["spec"]["runPolicy"].update(suspend=True)))
                )
            evicting = not workload["spec"]["active"] or not self.synced()
            if self.reserved() and evicting and self.suspended() and self.stopped():

                def release() -> None:
                    workload["status"]["conditions"] = []
                    workload["status"].pop("admission", None)

                out.append(("release", write(workload, release)))
            if not self.reserved() and self.suspended() and not self.synced():
                out.append(("sync", write(workload, lambda: self._sync(workload))))
            if workload["spec"]["active"] and not self.reserved() and self.synced():

                def admit() -> None:
                    workload["status"] = {"admission": {"clusterQueue": "gpus"}}
                    _set_condition(workload, "QuotaReserved", True, now)
                    _set_condition(workload, "Admitted", True, now)

                out.append(("admit", write(workload, admit)))
            if self.suspended() and self.admitted():
                out.append(
                    ("resume", write(job, lambda: job["spec"]["runPolicy"].update(suspend=False)))
                )
        if self.suspended() and _true(job, "Running"):

            def halt() -> None:
                _set_condition(job, "Running", False, now)
                _set_condition(job, "Suspended", True, now)

            out.append(("halt", write(job, halt)))
        if not self.suspended() and not _true(job, "Running"):

            def start() -> None:
                job.setdefault("status", {}).setdefault("startTime", _stamp(now))
                _set_condition(job, "Suspended", False, now)
                _set_condition(job, "Running", True, now)

            out.append(("start", write(job, start)))
        return out

    def settle(self) -> None:
        """Let Kueue and the operator act until nothing is left for them to do."""
        for _ in range(50):
            moves = self.moves()
            if not moves:
                return
            self.minute += 1
            moves[0][1]()
        raise AssertionError("Kueue never settled")

    # ----- what Bellows does --------------------------------------------------------------------

    def plan(
        self, target: tuple[int, int] = TARGET, launcher: dict[str, Any] | None = None
    ) -> KueueStep:
        workload = None if self.workload is None else read_workload(self.workload)
        return plan_kueue_scale(
            self.kind,
            copy.deepcopy(self.job),
            workload,
            target=target,
            env=target_env(keys.parse_settings(self.job["metadata"]["annotations"]), *target),
            requested=REQUESTED,
            launcher=launcher,
            now=self.now(),
            done=1000.0,
        )

    def halt_plan(self, phase: Phase) -> KueueStep:
        workload = None if self.workload is None else read_workload(self.workload)
        return plan_kueue_halt(
            self.kind, copy.deepcopy(self.job), workload, phase=phase, message=f"{phase}: test",
            requested=REQUESTED, now=self.now(),
        )  # fmt: skip

    def perform(self, step: KueueStep) -> bool:
        """Write ``step`` as the API server would (False: not a write); check that it is safe."""
        assert '"suspend":' not in json.dumps(getattr(step, "body", {}))
        if isinstance(step, SendPatch):
            assert (
                step.body["metadata"]["resourceVersion"] == self.job["metadata"]["resourceVersion"]
            )
            if "spec" in step.body:  # a resize: only while evicted, quota released
                assert "runPolicy" not in step.body["spec"]
                assert self.suspended()
                assert self.stopped()
                assert not self.reserved()
            self.job = merge_patch(self.job, step.body)
            self.bump(self.job)
        elif isinstance(step, PatchWorkload):
            assert self.workload is not None
            assert step.name == self.workload["metadata"]["name"]
            assert step.body == {
                "metadata": {"resourceVersion": self.workload["metadata"]["resourceVersion"]},
                "spec": {"active": step.active},
            }
            self.workload = merge_patch(self.workload, step.body)
            self.bump(self.workload)
        else:
            return False
        self.writes.append(step)
        return True

    def finish(self, target: tuple[int, int] = TARGET, *, limit: int = 60) -> None:
        """Bellows and Kueue in turn until Bellows has nothing left to do, then Kueue settles."""
        for _ in range(limit):
            self.minute += 1
            step = self.plan(target)
            if isinstance(step, Nothing):
                self.settle()
                return
            if not self.perform(step):
                moves = self.moves()
                assert moves, f"{step} waits, and neither Kueue nor the operator can move"
                moves[0][1]()
        raise AssertionError("the rescale never finished")

    def snapshot(self) -> World:
        return copy.deepcopy(self)

    def end(self) -> dict[str, Any]:
        """What the end state must be, whatever the path."""
        notes = self.job["metadata"]["annotations"]
        view = self.kind.view(self.job, tuple(ENV))
        assert self.workload is not None
        return {
            "phase": notes.get(keys.PHASE),
            "target": notes.get(keys.TARGET),
            "allocation": notes.get(keys.ALLOCATION),
            "gpus": view.gpus,
            "env": dict(view.env),
            "suspended": view.suspended,
            "running": _true(self.job, "Running"),
            "active": self.workload["spec"]["active"],
            "admitted": self.admitted(),
        }


EXPECTED_END = {
    "phase": "done",
    "target": "k=4,b=256",
    "allocation": "k=4,b=256",
    "gpus": 4,
    "env": {"GLOBAL_BATCH_SIZE": ("256",), "LOCAL_BATCH_SIZE": ("64",)},
    "suspended": False,
    "running": True,
    "active": True,
    "admitted": True,
}


def kueue_job(examples: dict[str, Any], kind: str = "PyTorchJob") -> dict[str, Any]:
    obj = copy.deepcopy(examples[kind])
    obj["metadata"].update(uid="job-1", resourceVersion="1", labels={KUEUE_QUEUE: "team-a"})
    return obj


def queued_world(examples: dict[str, Any]) -> World:
    """A job just submitted (suspended) whose Workload Bellows holds: journal ``queued``,
    Workload inactive, never admitted."""
    world = World(kueue_job(examples), None)
    world.workload = world.new_workload()
    for _ in range(4):
        step = world.halt_plan(Phase.QUEUED)
        if not world.perform(step):
            break
    assert isinstance(step, Nothing)
    return world


def running_world(examples: dict[str, Any]) -> World:
    """A job Bellows started on 2 GPUs, admitted and running."""
    world = queued_world(examples)
    world.finish((2, 256))
    assert world.end()["running"]
    assert world.end()["allocation"] == "k=2,b=256"
    world.writes.clear()
    return world


# ----- holding, rejecting, preempting ------------------------------------------------------------


def test_a_hold_journals_first_then_deactivates_the_workload(examples):
    world = World(kueue_job(examples), None)
    step = world.halt_plan(Phase.QUEUED)
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.QUEUED
    assert "spec" not in step.body  # the journal alone: suspend is Kueue's
    notes = step.body["metadata"]["annotations"]
    assert notes[keys.PHASE] == "queued"
    assert notes[keys.TARGET] is None
    assert notes[keys.REQUESTED] == "k=2,b=256"
    assert keys.SUSPENDED_AT not in notes  # submitted suspended
    world.perform(step)
    # No Workload yet: Kueue has not created it; the plan waits for it.
    assert isinstance(world.halt_plan(Phase.QUEUED), AwaitWorkload)
    world.workload = world.new_workload()
    step = world.halt_plan(Phase.QUEUED)
    assert isinstance(step, PatchWorkload)
    assert step.active is False
    world.perform(step)
    assert world.halt_plan(Phase.QUEUED) == Nothing("already queued")
    # A recreated Workload (active by default) is deactivated again.
    world.workload = world.new_workload()
    assert isinstance(world.halt_plan(Phase.QUEUED), PatchWorkload)


@pytest.mark.parametrize("phase", [Phase.REJECTED, Phase.PREEMPTED])
def test_a_preemption_of_a_running_job_evicts_it_through_its_workload(examples, phase):
    world = running_world(examples)
    step = world.halt_plan(phase)
    assert isinstance(step, SendPatch)
    notes = step.body["metadata"]["annotations"]
    assert (notes[keys.PHASE], notes[keys.TARGET]) == (str(phase), None)
    assert notes[keys.SUSPENDED_AT] == _stamp(world.now())  # it runs now
    world.perform(step)
    world.perform(world.halt_plan(phase))
    assert world.workload is not None
    assert world.workload["spec"]["active"] is False
    assert isinstance(world.halt_plan(phase), Nothing)
    world.settle()  # Kueue suspends the job and releases its quota
    assert world.suspended()
    assert not world.reserved()
    assert not _true(world.job, "Running")
    assert isinstance(world.halt_plan(phase), Nothing)


# ----- starting and rescaling, step by step ------------------------------------------------


def test_a_held_job_is_sized_while_suspended_and_then_let_in(examples):
    world = queued_world(examples)
    world.writes.clear()
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.SUSPENDING
    assert "spec" not in step.body
    notes = step.body["metadata"]["annotations"]
    assert (notes[keys.TARGET], notes[keys.PHASE]) == ("k=4,b=256", "suspending")
    assert keys.SUSPENDED_AT not in notes
    world.perform(step)
    # Its Workload is inactive already, and a job that never ran has nothing to stop.
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    spec = step.body["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert spec["replicas"] == 4
    env = spec["template"]["spec"]["containers"][0]["env"]
    assert {e["name"]: e["value"] for e in env} == ENV
    world.perform(step)
    # Kueue has not updated the Workload's podSets yet: activating it now could admit 2 GPUs.
    step = world.plan()
    assert isinstance(step, AwaitWorkload)
    assert "podSets" in step.reason
    assert [m for m, _ in world.moves()] == ["sync"]
    world.moves()[0][1]()
    step = world.plan()
    assert isinstance(step, PatchWorkload)
    assert step.active is True
    world.perform(step)
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    assert "spec" not in step.body
    notes = step.body["metadata"]["annotations"]
    assert notes[keys.ALLOCATION] == "k=4,b=256"
    assert notes[keys.STATUS] == "running on 4 GPUs with global batch 256"
    assert notes[keys.PROGRESS].startswith("samples=1000")
    world.perform(step)
    # Done while Kueue has not admitted it yet: running at its allocation, nothing to do.
    assert world.suspended()
    assert world.plan() == Nothing("already running at the target")
    world.settle()
    assert world.end() == EXPECTED_END


def test_an_admitted_job_is_evicted_patched_and_readmitted(examples):
    world = running_world(examples)
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.SUSPENDING
    assert step.body["metadata"]["annotations"][keys.SUSPENDED_AT] == _stamp(world.now())
    world.perform(step)
    step = world.plan()
    assert isinstance(step, PatchWorkload)
    assert step.active is False
    world.perform(step)
    seen = []
    while isinstance(step := world.plan(), AwaitEviction):
        moves = world.moves()
        seen.append(moves[0][0])
        world.minute += 1
        moves[0][1]()
    assert seen == ["suspend", "halt", "release"]  # Kueue suspends, the pods stop, quota freed
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    world.perform(step)
    assert isinstance(world.plan(), AwaitWorkload)
    world.moves()[0][1]()  # sync
    step = world.plan()
    assert isinstance(step, PatchWorkload)
    assert step.active
    world.perform(step)
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.DONE
    world.perform(step)
    world.settle()
    assert world.end() == EXPECTED_END
    assert not [
        s
        for s in world.writes
        if isinstance(s, SendPatch) and "runPolicy" in s.body.get("spec", {})
    ]


def test_a_suspended_job_without_a_workload_may_be_patched(examples):
    world = queued_world(examples)
    world.perform(world.plan())  # suspending
    world.workload = None  # deleted; Kueue has not recreated it yet
    step = world.plan()
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.PATCHED
    world.perform(step)
    assert isinstance(world.plan(), AwaitWorkload)
    world.finish()
    assert world.end() == EXPECTED_END


def test_a_running_job_without_a_workload_waits_for_kueue(examples):
    world = running_world(examples)
    world.perform(world.plan())  # suspending
    world.workload = None
    step = world.plan()
    assert isinstance(step, AwaitWorkload)
    assert "create" in step.reason
    # Kueue recreates it, active by default: it is deactivated again.
    world.workload = world.new_workload()
    step = world.plan()
    assert isinstance(step, PatchWorkload)
    assert step.active is False
    world.finish()
    assert world.end() == EXPECTED_END


def test_a_recreated_workload_after_the_patch_is_deactivated_until_it_matches(examples):
    world = running_world(examples)
    while not isinstance(step := world.plan(), SendPatch) or step.phase is not Phase.PATCHED:
        if not world.perform(step):
            world.moves()[0][1]()
    world.perform(step)
    # Kueue recreates the Workload from the job as it was before its update reached it.
    old = copy.deepcopy(world.job)
    old["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 2
    world.workload = World(old, None, recreations=5).new_workload()
    step = world.plan()
    assert isinstance(step, PatchWorkload)
    assert step.active is False
    world.finish()
    assert world.end() == EXPECTED_END


def test_a_workload_is_not_activated_while_its_eviction_still_runs(examples):
    world = running_world(examples)
    while not isinstance(step := world.plan(), SendPatch) or step.phase is not Phase.PATCHED:
        if not world.perform(step):
            world.moves()[0][1]()
    world.perform(step)
    world.moves()[0][1]()  # sync
    # A recreated Workload was admitted, then deactivated: its reservation not yet released.
    assert world.workload is not None
    world.workload["status"] = {"admission": {"clusterQueue": "gpus"}}
    _set_condition(world.workload, "QuotaReserved", True, world.now())
    _set_condition(world.workload, "Admitted", True, world.now())
    assert isinstance(world.plan(), AwaitEviction)
    world.finish()
    assert world.end() == EXPECTED_END


def test_a_done_job_is_left_alone_and_a_new_target_starts_over(examples):
    world = running_world(examples)
    assert world.plan((2, 256)) == Nothing("already running at the target")
    step = world.plan((3, 192))
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.SUSPENDING
    # A target changed mid-way restarts from the journal step.
    world.perform(world.plan())
    world.perform(world.plan())  # Workload inactive
    step = world.plan((3, 192))
    assert isinstance(step, SendPatch)
    assert step.phase is Phase.SUSPENDING
    world.finish((3, 192))
    assert world.end()["allocation"] == "k=3,b=192"
    assert world.end()["gpus"] == 3


# ----- killed between any two steps, Workloads recreated -----------------------------------


@pytest.mark.parametrize("start", ["queued", "running"])
def test_every_intermediate_state_reaches_the_same_end(examples, start):
    """The controller killed after any write (its own or Kueue's): the next one, planning
    from what it reads, reaches the same end; and with the Workload deleted there too."""
    world = queued_world(examples) if start == "queued" else running_world(examples)
    states = [world.snapshot()]
    for _ in range(60):
        world.minute += 1
        step = world.plan()
        if isinstance(step, Nothing):
            break
        if not world.perform(step):
            world.moves()[0][1]()
        states.append(world.snapshot())
    world.settle()
    assert world.end() == EXPECTED_END
    assert len(states) > 5
    for state in states:
        again = state.snapshot()
        again.finish()
        assert again.end() == EXPECTED_END
        recreated = state.snapshot()
        recreated.workload = None
        recreated.finish()
        assert recreated.end() == EXPECTED_END


@pytest.mark.parametrize("seed", range(150))
def test_random_interleavings_with_workloads_recreated(examples, seed):
    """Bellows, Kueue and the operator in a random order, the Workload deleted up to twice:
    every write stays safe (``World.perform``) and the end is the same."""
    rng = random.Random(seed)
    world = queued_world(examples) if seed % 2 else running_world(examples)
    deletions = 0
    for _ in range(300):
        world.minute += 1
        step = world.plan()
        if isinstance(step, Nothing):
            break
        choices: list[tuple[str, Callable[[], object]]] = [
            ("bellows", lambda s=step: world.perform(s)),
            *world.moves(faults=deletions < 2),
        ]
        name, run = rng.choice(choices)
        deletions += name == "delete"
        run()
    else:
        raise AssertionError("the rescale never finished")
    world.settle()
    assert world.end() == EXPECTED_END


# ----- an MPIJob's launcher ----------------------------------------------------------------------


def launcher_of(world: World, value: str, owner: str | None = None) -> dict[str, Any]:
    name = world.job["metadata"]["name"]
    return {
        "metadata": {
            "name": f"{name}-launcher",
            "uid": "l-1",
            "resourceVersion": "9",
            "ownerReferences": [
                {
                    "kind": "MPIJob",
                    "name": name,
                    "uid": owner or world.job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "launcher", "env": [{"name": "GLOBAL_BATCH_SIZE", "value": value}]}
                    ]
                }
            }
        },
    }


def test_an_mpijob_launcher_is_deleted_while_evicted_never_while_admitted(examples):
    world = World(kueue_job(examples, "MPIJob"), None, kind=MPIJobKind())
    world.workload = world.new_workload()
    target = (3, 384)
    stale = launcher_of(world, "256")
    # Someone else's launcher: nothing is written at all.
    assert isinstance(world.plan(target, launcher_of(world, "256", owner="other")), Blocked)
    while not isinstance(step := world.plan(target, stale), DeleteLauncher):
        assert isinstance(step, SendPatch | PatchWorkload), step
        world.perform(step)
    assert world.job["metadata"]["annotations"][keys.PHASE] == "patched"
    assert (step.name, step.uid, step.resource_version) == ("cifar10-horovod-launcher", "l-1", "9")
    # A recreated Workload (active) is deactivated before the stale launcher goes.
    world.workload = world.new_workload()
    step = world.plan(target, stale)
    assert isinstance(step, PatchWorkload)
    assert step.active is False
    world.perform(step)
    assert isinstance(world.plan(target, stale), DeleteLauncher)
    fresh = launcher_of(world, "384")
    while (
        not isinstance(step := world.plan(target, fresh), SendPatch) or step.phase is not Phase.DONE
    ):
        if not world.perform(step):
            world.moves()[0][1]()
    assert world.workload is not None
    assert world.workload["spec"]["active"] is True
