"""The live loop on TrainJobs (Kubeflow Trainer v2): the controller killed at each step of a
re-creation, and a new one finishing it: no job lost, none duplicated, none started twice.

Runs ``run_bridge``/``run_controller`` against a real nats-server and the emulated cluster
with its emulated Trainer (``live(trainer=True)``: every job a TrainJob, sized with
``controller.trainer.enabled``). A TrainJob's ``spec.trainer`` is immutable, so every resize
is a re-creation: a record ConfigMap, the delete, the create, the record's delete
(``bellows.kube.recreation``). The store tells the test as each of those lands, and the
first controller is cancelled right there.
"""

from __future__ import annotations

from collections import Counter

import pytest

from bellows.emulator.store import Change
from bellows.kube import keys
from bellows.kube.records import RECORD_LABEL
from tests.service.livecluster import LEASES, NS, Live, jobs, live

pytestmark = pytest.mark.slow

TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
STEPS = ("record", "deleted", "created", "record-deleted")


def _step(change: Change) -> str | None:
    """Which step of a re-creation ``change`` is, if any."""
    labels = (change.obj.get("metadata") or {}).get("labels") or {}
    if change.resource == "v1/configmaps" and RECORD_LABEL in labels:
        return {"ADDED": "record", "DELETED": "record-deleted"}.get(change.kind)
    if change.resource == TRAINJOBS and change.kind == "DELETED":
        return "deleted"
    notes = change.obj["metadata"].get("annotations") or {}
    if change.resource == TRAINJOBS and change.kind == "ADDED" and keys.RECREATED_FROM in notes:
        return "created"
    return None


def _records(stack: Live) -> list[str]:
    store = stack.kube.store
    found = store.list_objects(store.resources["v1/configmaps"], LEASES)[0]  # the records
    return [c["metadata"]["name"] for c in found if RECORD_LABEL in c["metadata"].get("labels", {})]


@pytest.mark.parametrize("step", STEPS)
async def test_a_controller_killed_at_each_step_of_a_recreation_loses_and_duplicates_nothing(
    step: str,
) -> None:
    async with live(trainer=True) as stack:
        assert stack.kube.trainer is not None
        stack.start_bridge()
        stack.start_controller("first")
        interrupted: list[str] = []
        queue = stack.kube.store.subscribe()

        def on_change() -> None:
            while not queue.empty():
                change = queue.get_nowait()
                if change is None or interrupted or "first" not in stack.tasks:
                    continue
                if _step(change) == step:
                    meta = change.obj["metadata"]
                    labels = meta.get("labels") or {}
                    interrupted.append(labels.get(RECORD_LABEL) or meta["name"])  # the job
                    stack.tasks["first"][0].cancel()

        trace = jobs(6, scale=6.0)
        names = await stack.submit(trace)

        def seen() -> bool:
            on_change()
            return bool(interrupted)

        await stack.until(f"a re-creation interrupted at {step}", seen, timeout_s=60)
        stack.kube.store.unsubscribe(queue)
        await stack.kill("first")
        stack.start_controller("second")
        await stack.all_done(names, timeout_s=120)
        stack.alive()
        objects = stack.objects()
        assert sorted(objects) == sorted(names)  # every job there once: none lost
        assert set(stack.states().values()) == {"Succeeded"}
        assert _records(stack) == []
        # no TrainJob (uid) ever started twice
        starts = stack.kube.trainer.starts
        uids = [uid for _, uid, _ in starts]
        assert len(uids) == len(set(uids)), starts
        per_name = Counter(name for name, _, _ in starts)
        assert per_name[f"{NS}/{interrupted[0]}"] >= 1  # the job interrupted ran
        assert stack.witness.overcommits == []  # the pods never held more GPUs than there are
