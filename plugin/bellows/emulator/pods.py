"""The emulated operators' pods as objects in the emulated API server.

What a controller watching pods sees on a real cluster: one Pod per replica the operator
runs, named as the operator names it, labelled with the pod template's labels and the
operator's, owned by its job (``ownerReferences``, ``controller: true``: garbage collected
with it), its spec the template's spec. A bound pod has ``spec.nodeName`` and is
``Running`` (``PodScheduled`` and ``Ready`` true: the emulator does not model image pulls);
one that fits no node is ``Pending`` with ``PodScheduled`` false, reason
``Unschedulable``, until the scheduler binds it (the binding sets ``nodeName`` on the same
object, as ``pods/binding`` does). A suspended, finished or deleted job's pods are deleted.

:class:`StorePods` is the :class:`~bellows.emulator.scheduling.PodSink` that writes them;
:func:`pod_manifest` builds the object a replica's pod starts from.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from bellows.emulator.errors import ApiError, rfc3339
from bellows.emulator.scheduling import Pod
from bellows.emulator.store import Store

__all__ = ["REPLICA_INDEX_LABEL", "StorePods", "pod_manifest"]

REPLICA_INDEX_LABEL: Final = "training.kubeflow.org/replica-index"
_PODS: Final = "v1/pods"


def pod_manifest(
    owner: Mapping[str, Any],
    name: str,
    template: Mapping[str, Any],
    labels: Mapping[str, str],
) -> dict[str, Any]:
    """The Pod ``owner`` (a job object) runs as ``name`` from ``template`` (a
    PodTemplateSpec), with ``labels`` over the template's."""
    meta = owner["metadata"]
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": copy.deepcopy(dict(template.get("spec") or {})),
    }


def _conditions(bound: bool, message: str, now: str) -> list[dict[str, str]]:
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": now}
    if not bound:
        return [scheduled | {"status": "False", "reason": "Unschedulable", "message": message}]
    return [
        scheduled,
        {"type": "Initialized", "status": "True", "lastTransitionTime": now},
        {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
        {"type": "Ready", "status": "True", "lastTransitionTime": now},
    ]


class StorePods:
    """Publishes placed pods as Pod objects in ``store`` (see the module docstring)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._res = store.resources[_PODS]

    def _status(self, pod: Pod, bound: bool) -> None:
        meta = pod.manifest["metadata"] if pod.manifest else {}
        message = "no node has room for the pod's GPUs where its node selector and affinity allow"
        now = rfc3339(datetime.now(UTC))

        def change(obj: dict[str, Any]) -> dict[str, Any]:
            obj["status"] = {
                "phase": "Running" if bound else "Pending",
                "conditions": _conditions(bound, message, now),
            }
            return obj

        self._store.update_with(
            self._res, meta["namespace"], meta["name"], change, subresource="status"
        )

    def _write(self, pod: Pod, node: str | None) -> None:
        if pod.manifest is None:
            return
        meta = pod.manifest["metadata"]
        try:
            current = self._store.get(self._res, meta["namespace"], meta["name"])
        except ApiError:
            current = None
        if current is None or current["metadata"].get("uid") is None:
            body = copy.deepcopy(dict(pod.manifest))
            if node is not None:
                body["spec"]["nodeName"] = node
            self._store.create(self._res, meta["namespace"], body)
        elif node is not None:  # the pending pod bound: pods/binding sets its node

            def bind(obj: dict[str, Any]) -> dict[str, Any]:
                obj["spec"]["nodeName"] = node
                return obj

            self._store.update_with(self._res, meta["namespace"], meta["name"], bind)
        self._status(pod, node is not None)

    def bound(self, pod: Pod, node: str) -> None:
        self._write(pod, node)

    def pending(self, pod: Pod) -> None:
        self._write(pod, None)

    def released(self, pods: Sequence[Pod]) -> None:
        for pod in pods:
            if pod.manifest is None:
                continue
            meta = pod.manifest["metadata"]
            try:
                self._store.delete(self._res, meta["namespace"], meta["name"])
            except ApiError:
                continue  # already gone (collected with its deleted job)
