"""The emulated API server, driven by the real ``kubernetes`` client over HTTP."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from bellows.kube import ExpiredError, PyTorchJobKind

G, V, P = "kubeflow.org", "v1", "pytorchjobs"


async def call(fn, *args, **kwargs):
    return await asyncio.to_thread(fn, *args, **kwargs)


async def status_of(fn, *args, **kwargs) -> int:
    with pytest.raises(ApiException) as err:
        await call(fn, *args, **kwargs)
    return err.value.status


def test_create_assigns_identity_and_refuses_duplicates_and_bad_objects(on_cluster, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        job = examples["PyTorchJob"]
        made = await call(custom.create_namespaced_custom_object, G, V, "default", P, job)
        meta = made["metadata"]
        assert meta["uid"]
        assert meta["resourceVersion"]
        assert meta["generation"] == 1
        assert meta["creationTimestamp"].endswith("Z")
        assert (
            await status_of(custom.create_namespaced_custom_object, G, V, "default", P, job) == 409
        )
        bad = dict(
            job,
            metadata={"name": "bad"},
            spec={"pytorchReplicaSpecs": {"Worker": {"replicas": "x"}}},
        )
        assert (
            await status_of(custom.create_namespaced_custom_object, G, V, "default", P, bad) == 422
        )
        # A body in another namespace than the URL's is a bad request; a missing namespace 404.
        assert (
            await status_of(custom.create_namespaced_custom_object, G, V, "nowhere", P, job) == 400
        )
        job["metadata"].pop("namespace")
        assert (
            await status_of(custom.create_namespaced_custom_object, G, V, "nowhere", P, job) == 404
        )
        # The training operator's webhook: the container must be named "pytorch".
        renamed = examples["PyTorchJob"]
        renamed["metadata"]["name"] = "renamed"
        renamed["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
            "name"
        ] = "main"
        assert (
            await status_of(custom.create_namespaced_custom_object, G, V, "default", P, renamed)
            == 422
        )

    on_cluster(scenario, operator=False)


def test_stale_writes_conflict_and_noops_keep_the_version(on_cluster, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        made = await call(
            custom.create_namespaced_custom_object, G, V, "default", P, examples["PyTorchJob"]
        )
        old = made["metadata"]["resourceVersion"]
        labelled = await call(
            custom.patch_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            made["metadata"]["name"],
            {"metadata": {"labels": {"team": "a"}}},
        )
        assert int(labelled["metadata"]["resourceVersion"]) > int(old)
        assert labelled["metadata"]["generation"] == 1  # metadata only
        stale = {"metadata": {"resourceVersion": old}, "spec": {"runPolicy": {"suspend": False}}}
        assert (
            await status_of(
                custom.patch_namespaced_custom_object,
                G,
                V,
                "default",
                P,
                "resnet50-imagenet",
                stale,
            )
            == 409
        )
        fresh = dict(stale, metadata={"resourceVersion": labelled["metadata"]["resourceVersion"]})
        resumed = await call(
            custom.patch_namespaced_custom_object, G, V, "default", P, "resnet50-imagenet", fresh
        )
        assert resumed["metadata"]["generation"] == 2
        again = await call(
            custom.patch_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            "resnet50-imagenet",
            {"spec": {"runPolicy": {"suspend": False}}},
        )
        assert again["metadata"]["resourceVersion"] == resumed["metadata"]["resourceVersion"]
        # PUT of a custom resource must carry its resourceVersion; a stale one conflicts.
        body = dict(resumed)
        body["metadata"] = dict(resumed["metadata"], resourceVersion=old)
        assert (
            await status_of(
                custom.replace_namespaced_custom_object,
                G,
                V,
                "default",
                P,
                "resnet50-imagenet",
                body,
            )
            == 409
        )
        body["metadata"].pop("resourceVersion")
        assert (
            await status_of(
                custom.replace_namespaced_custom_object,
                G,
                V,
                "default",
                P,
                "resnet50-imagenet",
                body,
            )
            == 422
        )

    on_cluster(scenario, operator=False)


def test_status_subresource_and_patch_media_types(on_cluster, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        await call(
            custom.create_namespaced_custom_object, G, V, "default", P, examples["PyTorchJob"]
        )
        name = "resnet50-imagenet"
        ignored = await call(
            custom.patch_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            name,
            {"status": {"startTime": "2024-01-01T00:00:00Z"}},
        )
        assert "status" not in ignored  # the main resource ignores status
        done = await call(
            custom.patch_namespaced_custom_object_status,
            G,
            V,
            "default",
            P,
            name,
            {
                "status": {"startTime": "2024-01-01T00:00:00Z"},
                "spec": {"runPolicy": {"suspend": False}},
            },
        )
        assert done["status"]["startTime"] == "2024-01-01T00:00:00Z"
        assert done["spec"]["runPolicy"]["suspend"] is True  # the status endpoint ignores spec
        ops = [{"op": "replace", "path": "/spec/pytorchReplicaSpecs/Worker/replicas", "value": 3}]
        core = k8s.ApiClient(cluster.configuration())
        # JSON patch (a list body) is accepted; strategic merge is answered 415 for CRDs.
        patched = await call(
            core.call_api,
            f"/apis/{G}/{V}/namespaces/default/{P}/{name}",
            "PATCH",
            header_params={"Content-Type": "application/json-patch+json"},
            body=ops,
            response_type="object",
            _return_http_data_only=True,
        )
        assert patched["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
        code = await status_of(
            core.call_api,
            f"/apis/{G}/{V}/namespaces/default/{P}/{name}",
            "PATCH",
            header_params={"Content-Type": "application/strategic-merge-patch+json"},
            body={"spec": {}},
            response_type="object",
        )
        assert code == 415
        await asyncio.to_thread(core.close)

    on_cluster(scenario, operator=False)


def test_label_selectors_and_watch_from_a_version(on_cluster, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        job = examples["PyTorchJob"]
        job["metadata"]["labels"] = {"team": "a"}
        await call(custom.create_namespaced_custom_object, G, V, "default", P, job)
        other = examples["PyTorchJob"]
        other["metadata"].update(name="other", labels={"team": "b"})
        await call(custom.create_namespaced_custom_object, G, V, "default", P, other)
        listed = await call(
            custom.list_namespaced_custom_object, G, V, "default", P, label_selector="team=a"
        )
        assert [o["metadata"]["name"] for o in listed["items"]] == ["resnet50-imagenet"]
        version = listed["metadata"]["resourceVersion"]
        await call(
            custom.patch_namespaced_custom_object,
            G,
            V,
            "default",
            P,
            "other",
            {"metadata": {"labels": {"team": "a"}}},
        )
        await call(custom.delete_namespaced_custom_object, G, V, "default", P, "resnet50-imagenet")
        events = []
        stream = k8s.CustomObjectsApi(api.api_client)

        def collect():
            for ev in watch.Watch().stream(
                stream.list_namespaced_custom_object,
                G,
                V,
                "default",
                P,
                label_selector="team=a",
                resource_version=version,
                timeout_seconds=1,
            ):
                events.append((ev["type"], ev["raw_object"]["metadata"]["name"]))
                if len(events) == 2:
                    break

        await asyncio.to_thread(collect)
        # "other" entered the selection (ADDED), the first one was deleted.
        assert events == [("ADDED", "other"), ("DELETED", "resnet50-imagenet")]
        cluster.store.compact()
        with pytest.raises(ExpiredError):
            async for _ in api.watch_jobs(PyTorchJobKind(), "default", version, timeout_s=1):
                pass

    on_cluster(scenario, operator=False)


def test_leases_events_configmaps_and_owner_garbage_collection(on_cluster, examples):
    async def scenario(cluster, api):
        coord = k8s.CoordinationV1Api(api.api_client)
        lease = k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(name="bellows"),
            spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
        )
        made = await call(coord.create_namespaced_lease, "default", lease)
        made.spec.holder_identity = "b"
        replaced = await call(coord.replace_namespaced_lease, "bellows", "default", made)
        assert replaced.spec.holder_identity == "b"
        assert await status_of(coord.replace_namespaced_lease, "bellows", "default", made) == 409
        core = k8s.CoreV1Api(api.api_client)
        bad_event = {"metadata": {"name": "e"}, "involvedObject": {"namespace": "other"}}
        assert await status_of(core.create_namespaced_event, "default", bad_event) == 422
        # Deleting an MPIJob deletes the launcher Job it owns.
        custom = k8s.CustomObjectsApi(api.api_client)
        mpi = await call(
            custom.create_namespaced_custom_object,
            G,
            "v2beta1",
            "default",
            "mpijobs",
            examples["MPIJob"],
        )
        batch = k8s.BatchV1Api(api.api_client)
        owned = {
            "metadata": {
                "name": "launcher",
                "ownerReferences": [
                    {
                        "apiVersion": "kubeflow.org/v2beta1",
                        "kind": "MPIJob",
                        "name": "cifar10-horovod",
                        "uid": mpi["metadata"]["uid"],
                    }
                ],
            },
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                }
            },
        }
        await call(batch.create_namespaced_job, "default", owned)
        await call(
            custom.delete_namespaced_custom_object,
            G,
            "v2beta1",
            "default",
            "mpijobs",
            "cifar10-horovod",
        )
        assert await api.get_batch_job("default", "launcher") is None

    on_cluster(scenario, operator=False)


def test_lists_page_from_one_version_and_an_old_continue_token_is_gone(on_cluster, examples):
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        job = examples["PyTorchJob"]
        for i in range(5):
            job["metadata"]["name"] = f"job-{i}"
            await call(custom.create_namespaced_custom_object, G, V, "default", P, job)
        first = await call(custom.list_namespaced_custom_object, G, V, "default", P, limit=2)
        assert [o["metadata"]["name"] for o in first["items"]] == ["job-0", "job-1"]
        assert first["metadata"]["remainingItemCount"] == 3
        version = first["metadata"]["resourceVersion"]
        # changes while paging: the later pages still report the first page's version, so a
        # watch from it sees these changes; a job created past the cursor is listed too
        await call(custom.delete_namespaced_custom_object, G, V, "default", P, "job-2")
        job["metadata"]["name"] = "job-9"
        await call(custom.create_namespaced_custom_object, G, V, "default", P, job)
        token, names = first["metadata"]["continue"], []
        while token:
            page = await call(
                custom.list_namespaced_custom_object, G, V, "default", P, limit=2, _continue=token
            )
            assert page["metadata"]["resourceVersion"] == version
            names += [o["metadata"]["name"] for o in page["items"]]
            token = page["metadata"].get("continue")
        assert names == ["job-3", "job-4", "job-9"]
        stream = watch.Watch().stream(
            custom.list_namespaced_custom_object, G, V, "default", P,
            resource_version=version, timeout_seconds=1,
        )  # fmt: skip
        seen = await call(lambda: [(e["type"], e["object"]["metadata"]["name"]) for e in stream])
        assert seen == [("DELETED", "job-2"), ("ADDED", "job-9")]
        # compaction: the token can no longer give a consistent list; a bad token or limit 400
        cluster.store.compact()
        stale = first["metadata"]["continue"]
        list_ns = custom.list_namespaced_custom_object
        assert await status_of(list_ns, G, V, "default", P, limit=2, _continue=stale) == 410
        assert await status_of(list_ns, G, V, "default", P, limit=2, _continue="xyz") == 400
        assert await status_of(list_ns, G, V, "default", P, limit=-1) == 400
        # KubeApi pages the same way and keeps the version of the first page
        kind = PyTorchJobKind()
        pages = [(len(items), rv) async for items, rv in api.list_job_pages(kind, limit=3)]
        assert [n for n, _ in pages] == [3, 2]  # job-0, 1, 3, 4, 9
        assert len({rv for _, rv in pages}) == 1

        async def list_while_compacting() -> None:
            async for _ in api.list_job_pages(kind, "default", limit=1):
                await call(custom.delete_namespaced_custom_object, G, V, "default", P, "job-9")
                cluster.store.compact()

        with pytest.raises(ExpiredError):  # compacted while paging: the caller lists again
            await list_while_compacting()

    on_cluster(scenario, operator=False)


def test_a_list_shows_each_write_and_only_the_namespace_asked_for(on_cluster, examples):
    # the server encodes each stored object once and splices it into lists: a write must
    # show in the next list, a namespace that prefixes another must not list the other's
    async def scenario(cluster, api):
        custom = k8s.CustomObjectsApi(api.api_client)
        core = k8s.CoreV1Api(api.api_client)
        job = examples["PyTorchJob"]
        for ns in ("team", "team-b"):
            await call(core.create_namespace, {"metadata": {"name": ns}})
            job["metadata"].update(name="job-0", namespace=ns)
            await call(custom.create_namespaced_custom_object, G, V, ns, P, job)
        listed = await call(custom.list_namespaced_custom_object, G, V, "team", P)
        assert [o["metadata"]["namespace"] for o in listed["items"]] == ["team"]
        patch = {"metadata": {"annotations": {"example.com/seen": "é twice"}}}
        await call(custom.patch_namespaced_custom_object, G, V, "team", P, "job-0", patch)
        again = await call(custom.list_cluster_custom_object, G, V, P, limit=1)
        (first,) = again["items"]
        assert first["metadata"]["annotations"]["example.com/seen"] == "é twice"
        assert first["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
        assert again["metadata"]["remainingItemCount"] == 1
        await call(custom.delete_namespaced_custom_object, G, V, "team", P, "job-0")
        left = await call(custom.list_cluster_custom_object, G, V, P)
        assert [o["metadata"]["namespace"] for o in left["items"]] == ["team-b"]

    on_cluster(scenario)
