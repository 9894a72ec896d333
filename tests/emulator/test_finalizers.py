"""Finalizers and ``deletionTimestamp`` in the emulated API server, as kube-apiserver has them.

A DELETE of an object with finalizers marks it (``deletionTimestamp``, grace period 0, a new
``resourceVersion``, a MODIFIED event) and answers 200 with it; it stays until an update
removes its last finalizer, and then goes with one DELETED event. While it is deleted, a
second DELETE changes nothing, no finalizer may be added (422 Forbidden), and the server's
marks stay its own. Before, every DELETE removed the object at once, so no test could see a
delete that does not complete (issue 35): each test here fails on that server.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from tests.conftest import shared_data_dir
from tests.kube.conftest import load_examples

from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi, PyTorchJobKind
from bellows.kube.deletion import Terminating

NS = "/api/v1/namespaces/default"
CONFIGMAPS = f"{NS}/configmaps"
JOBS = "/apis/batch/v1/namespaces/default/jobs"
HOLD = "example.com/hold"
MERGE = "application/merge-patch+json"


def _map(name: str, finalizers: list[str] | None = None, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **meta}
    if finalizers is not None:
        metadata["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "1"}}


class Http:
    """Raw requests to the emulated server: (status, decoded JSON body)."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url, self.session = url, session

    async def __call__(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        async with self.session.request(
            method, f"{self.url}{path}", data=data, headers={"Content-Type": content_type}
        ) as resp:
            return resp.status, await resp.json(content_type=None)

    async def watch(self, path: str, since: str) -> AsyncIterator[dict[str, Any]]:
        """The events of a watch of ``path`` from version ``since``."""
        url = f"{self.url}{path}?watch=true&resourceVersion={since}&timeoutSeconds=30"
        async with self.session.get(url) as resp:
            async for line in resp.content:
                if line.strip():
                    yield json.loads(line)


@pytest.fixture
async def http() -> AsyncIterator[tuple[EmulatedCluster, Http]]:
    crds = sorted((shared_data_dir() / "crds").glob("*.yaml"))
    async with (
        EmulatedCluster(crds=crds, operator=False) as kube,
        aiohttp.ClientSession() as session,
    ):
        yield kube, Http(kube.url, session)


async def _events(http: Http, path: str, since: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch from ``since`` (within 10 s)."""
    found: list[dict[str, Any]] = []

    async def take() -> None:
        async for event in http.watch(path, since):
            found.append(event)
            if len(found) == count:
                return

    await asyncio.wait_for(take(), 10)
    return found


async def test_a_delete_marks_an_object_with_finalizers_and_the_last_one_removed_deletes_it(
    http: tuple[EmulatedCluster, Http],
) -> None:
    kube, call = http
    code, made = await call("POST", CONFIGMAPS, _map("held", [HOLD]))
    assert code == 201, made
    rv = made["metadata"]["resourceVersion"]
    code, marked = await call("DELETE", f"{CONFIGMAPS}/held")
    assert code == 200, marked
    assert marked["kind"] == "ConfigMap"  # the object, not a Status: it is not gone
    meta = marked["metadata"]
    assert meta["deletionTimestamp"].endswith("Z")
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["finalizers"] == [HOLD]
    assert int(meta["resourceVersion"]) > int(rv)
    assert meta["generation"] == made["metadata"]["generation"] + 1
    code, read = await call("GET", f"{CONFIGMAPS}/held")
    assert (code, read) == (200, marked)
    # a second delete: the same answer, nothing changed (no version, no event)
    assert await call("DELETE", f"{CONFIGMAPS}/held") == (200, marked)
    assert kube.store.revision == int(meta["resourceVersion"])
    # an update that keeps the finalizer is an update as any other
    code, edited = await call(
        "PATCH", f"{CONFIGMAPS}/held", {"data": {"a": "2"}}, content_type=MERGE
    )
    assert code == 200, edited
    assert edited["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    # the last finalizer removed: gone, answered with the object as the update made it
    code, last = await call(
        "PATCH", f"{CONFIGMAPS}/held", {"metadata": {"finalizers": None}}, content_type=MERGE
    )
    assert code == 200, last
    assert "finalizers" not in last["metadata"]
    assert (await call("GET", f"{CONFIGMAPS}/held"))[0] == 404
    events = await _events(call, CONFIGMAPS, rv, 3)
    assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert events[0]["object"]["metadata"]["deletionTimestamp"] == meta["deletionTimestamp"]
    gone = events[2]["object"]["metadata"]
    assert gone["finalizers"] == [HOLD]  # the last stored state, as etcd's delete event
    assert int(gone["resourceVersion"]) == kube.store.revision
    assert [w[0] for w in kube.store.writes if w[2:] == ("default", "held")] == [
        "create",
        "terminate",
        "update",
        "delete",
    ]


async def test_no_finalizer_is_added_to_an_object_being_deleted(
    http: tuple[EmulatedCluster, Http],
) -> None:
    _, call = http
    await call("POST", CONFIGMAPS, _map("held", [HOLD, "example.com/two"]))
    # before its delete, finalizers come and go freely
    code, _ = await call(
        "PATCH",
        f"{CONFIGMAPS}/held",
        {"metadata": {"finalizers": [HOLD, "example.com/two", "example.com/three"]}},
        content_type=MERGE,
    )
    assert code == 200
    await call("DELETE", f"{CONFIGMAPS}/held")
    code, refused = await call(
        "PATCH",
        f"{CONFIGMAPS}/held",
        {"metadata": {"finalizers": [HOLD, "example.com/late"]}},
        content_type=MERGE,
    )
    assert code == 422, refused
    assert refused["reason"] == "Invalid"
    [cause] = refused["details"]["causes"]
    assert cause["reason"] == "FieldValueForbidden"
    assert cause["field"] == "metadata.finalizers"
    assert (
        "no new finalizers can be added if the object is being deleted, found new finalizers "
        '[]string{"example.com/late"}'
    ) in cause["message"]
    # removing some (not all) is fine: still there, still being deleted
    code, fewer = await call(
        "PATCH", f"{CONFIGMAPS}/held", {"metadata": {"finalizers": [HOLD]}}, content_type=MERGE
    )
    assert code == 200, fewer
    assert fewer["metadata"]["finalizers"] == [HOLD]
    assert fewer["metadata"]["deletionTimestamp"]
    # a JSON patch that removes the last one deletes it too
    code, _ = await call(
        "PATCH",
        f"{CONFIGMAPS}/held",
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        content_type="application/json-patch+json",
    )
    assert code == 200
    assert (await call("GET", f"{CONFIGMAPS}/held"))[0] == 404


async def test_deletion_marks_belong_to_the_server(http: tuple[EmulatedCluster, Http]) -> None:
    _, call = http
    await call("POST", CONFIGMAPS, _map("live", [HOLD]))
    for field, value in (
        ("deletionTimestamp", "2030-01-01T00:00:00Z"),
        ("deletionGracePeriodSeconds", 30),
    ):
        code, refused = await call(
            "PATCH", f"{CONFIGMAPS}/live", {"metadata": {field: value}}, content_type=MERGE
        )
        assert code == 422, refused  # on a live object: immutable, as the real server says
        assert refused["details"]["causes"][0]["field"] == f"metadata.{field}"
        assert "field is immutable" in refused["message"]
    _, marked = await call("DELETE", f"{CONFIGMAPS}/live")
    stamp = marked["metadata"]["deletionTimestamp"]
    for change in (
        {"deletionTimestamp": None},
        {"deletionTimestamp": "2030-01-01T00:00:00Z"},
        {"deletionGracePeriodSeconds": None},
    ):
        code, kept = await call(
            "PATCH", f"{CONFIGMAPS}/live", {"metadata": change}, content_type=MERGE
        )
        assert code == 200, kept  # restored, as rest.BeforeUpdate does: a no-op
        assert kept["metadata"]["deletionTimestamp"] == stamp
        assert kept["metadata"]["deletionGracePeriodSeconds"] == 0
        assert kept["metadata"]["resourceVersion"] == marked["metadata"]["resourceVersion"]
    code, refused = await call(
        "PATCH",
        f"{CONFIGMAPS}/live",
        {"metadata": {"deletionGracePeriodSeconds": 30}},
        content_type=MERGE,
    )
    assert code == 422, refused
    # a PUT that leaves them out keeps them too
    body = {**marked, "metadata": {**marked["metadata"]}}
    del body["metadata"]["deletionTimestamp"]
    del body["metadata"]["deletionGracePeriodSeconds"]
    body["data"] = {"a": "9"}
    code, replaced = await call("PUT", f"{CONFIGMAPS}/live", body)
    assert code == 200, replaced
    assert replaced["metadata"]["deletionTimestamp"] == stamp
    # a create never carries them
    code, made = await call(
        "POST",
        CONFIGMAPS,
        _map("fresh", deletionTimestamp=stamp, deletionGracePeriodSeconds=0),
    )
    assert code == 201, made
    assert "deletionTimestamp" not in made["metadata"]
    assert "deletionGracePeriodSeconds" not in made["metadata"]


async def test_preconditions_and_dry_runs_of_a_delete(http: tuple[EmulatedCluster, Http]) -> None:
    kube, call = http
    _, made = await call("POST", CONFIGMAPS, _map("held", [HOLD]))
    meta = made["metadata"]
    code, _ = await call("DELETE", f"{CONFIGMAPS}/held", {"preconditions": {"uid": "other"}})
    assert code == 409
    # a dry run answers the mark it would make, and makes none
    revision = kube.store.revision
    code, would = await call("DELETE", f"{CONFIGMAPS}/held?dryRun=All")
    assert code == 200, would
    assert would["metadata"]["deletionTimestamp"]
    code, would = await call("DELETE", f"{CONFIGMAPS}/held", {"dryRun": ["All"]})
    assert code == 200, would
    assert would["metadata"]["deletionTimestamp"], would
    assert kube.store.revision == revision
    assert "deletionTimestamp" not in (await call("GET", f"{CONFIGMAPS}/held"))[1]["metadata"]
    code, marked = await call(
        "DELETE",
        f"{CONFIGMAPS}/held",
        {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}},
    )
    assert code == 200, marked
    assert marked["metadata"]["deletionTimestamp"], marked
    # preconditions still hold while it is being deleted
    code, _ = await call(
        "DELETE",
        f"{CONFIGMAPS}/held",
        {"preconditions": {"resourceVersion": meta["resourceVersion"]}},
    )
    assert code == 409
    # dry runs of a plain delete: a Status, and the object stays
    await call("POST", CONFIGMAPS, _map("plain"))
    code, status = await call("DELETE", f"{CONFIGMAPS}/plain?dryRun=All")
    assert (code, status["kind"], status["status"]) == (200, "Status", "Success")
    assert (await call("GET", f"{CONFIGMAPS}/plain"))[0] == 200
    for bad in ({"dryRun": ["Maybe"]}, {"dryRun": [1]}):
        assert (await call("DELETE", f"{CONFIGMAPS}/plain", bad))[0] == 400
    assert (await call("DELETE", f"{CONFIGMAPS}/plain?dryRun=Maybe"))[0] == 400
    assert (await call("GET", f"{CONFIGMAPS}/plain"))[0] == 200
    # a finalizer's name is a qualified name, as on every object
    code, refused = await call("POST", CONFIGMAPS, _map("odd", ["not a name!"]))
    assert code == 422, refused
    assert refused["details"]["causes"][0]["field"] == "metadata.finalizers"


async def test_dependents_go_when_their_owner_does(http: tuple[EmulatedCluster, Http]) -> None:
    _, call = http

    async def owned_by(name: str, owner: dict[str, Any], **meta: Any) -> None:
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner["metadata"]["name"]}
        ref["uid"] = owner["metadata"]["uid"]
        code, made = await call("POST", CONFIGMAPS, _map(name, ownerReferences=[ref], **meta))
        assert code == 201, made

    async def exists(name: str) -> bool:
        return (await call("GET", f"{CONFIGMAPS}/{name}"))[0] == 200

    # Background: a dependent stays while its owner is being deleted, and goes with it
    _, owner = await call("POST", CONFIGMAPS, _map("owner", [HOLD]))
    await owned_by("child", owner)
    await owned_by("held-child", owner, finalizers=[HOLD])
    await call("DELETE", f"{CONFIGMAPS}/owner")
    assert await exists("child")
    await call("PATCH", f"{CONFIGMAPS}/owner", {"metadata": {"finalizers": []}}, content_type=MERGE)
    assert not await exists("owner")
    assert not await exists("child")
    # a dependent with a finalizer of its own is marked, not deleted
    code, child = await call("GET", f"{CONFIGMAPS}/held-child")
    assert code == 200, child
    assert child["metadata"]["deletionTimestamp"], child
    # Orphan: its dependents lose the reference when it is marked, and stay
    _, owner = await call("POST", CONFIGMAPS, _map("owner2", [HOLD]))
    await owned_by("orphan", owner)
    code, _ = await call("DELETE", f"{CONFIGMAPS}/owner2", {"propagationPolicy": "Orphan"})
    assert code == 200
    _, orphan = await call("GET", f"{CONFIGMAPS}/orphan")
    assert not orphan["metadata"].get("ownerReferences")
    await call(
        "PATCH", f"{CONFIGMAPS}/owner2", {"metadata": {"finalizers": []}}, content_type=MERGE
    )
    assert not await exists("owner2")
    assert await exists("orphan")


async def test_the_kube_client_tells_a_terminating_object_from_a_gone_one(
    http: tuple[EmulatedCluster, Http],
) -> None:
    kube, call = http
    api = KubeApi(kube.api_client())
    kind = PyTorchJobKind()
    try:
        body = load_examples()["PyTorchJob"]
        body["metadata"] = {"name": "held", "finalizers": [HOLD]}
        made = await api.create_job(kind, "default", body)
        meta = made["metadata"]
        first = await api.delete_job(
            kind, "default", "held", uid=meta["uid"], resource_version=meta["resourceVersion"]
        )
        assert isinstance(first, Terminating), first
        assert first  # truthy: the delete was accepted
        assert first.finalizers == (HOLD,)
        assert first.uid == meta["uid"]
        marked = await api.get_job(kind, "default", "held")
        assert marked is not None
        assert marked["metadata"]["deletionTimestamp"]
        again = await api.delete_job(
            kind,
            "default",
            "held",
            uid=meta["uid"],
            resource_version=marked["metadata"]["resourceVersion"],
        )
        assert isinstance(again, Terminating)
        await api.patch_job(kind, "default", "held", {"metadata": {"finalizers": None}})
        assert await api.get_job(kind, "default", "held") is None
        assert (
            await api.delete_job(
                kind, "default", "held", uid=meta["uid"], resource_version=meta["resourceVersion"]
            )
            is False
        )
        # a batch Job and a ConfigMap: the same three answers
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "launcher", "finalizers": [HOLD]},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "example/c:1"}],
                    }
                }
            },
        }
        code, made = await call("POST", JOBS, job)
        assert code == 201, made
        held = await api.delete_batch_job("default", "launcher", made["metadata"]["uid"])
        assert isinstance(held, Terminating)
        assert held.finalizers == (HOLD,)
        job["metadata"] = {"name": "plain"}
        _, plain = await call("POST", JOBS, job)
        assert await api.delete_batch_job("default", "plain", plain["metadata"]["uid"]) is True
        _, cm = await call("POST", CONFIGMAPS, _map("record", [HOLD]))
        rv = cm["metadata"]["resourceVersion"]
        assert isinstance(await api.delete_configmap("default", "record", rv), Terminating)
        _, cm = await call("POST", CONFIGMAPS, _map("record2"))
        rv = cm["metadata"]["resourceVersion"]
        assert await api.delete_configmap("default", "record2", rv) is True
        assert await api.delete_configmap("default", "record2", rv) is False
    finally:
        await asyncio.to_thread(api.api_client.close)
