"""API discovery as kube-apiserver serves it, for ``kubectl`` and other generic clients.

The ``kubernetes`` Python client never asks what the server serves; ``kubectl`` asks
before anything else (``couldn't get current server API group list`` when it cannot
find out). This module answers from the store's resource types:

* ``/api`` (``APIVersions``), ``/apis`` (``APIGroupList``), ``/apis/<group>``
  (``APIGroup``), ``/api/v1`` and ``/apis/<group>/<version>`` (``APIResourceList``: each
  resource's verbs, scope, kind, singular and short names, categories, and its ``status``
  subresource);
* aggregated discovery (``apidiscovery.k8s.io/v2``), which kubectl 1.30+ asks for first
  with ``Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList``:
  ``/api`` and ``/apis`` answer an ``APIGroupDiscoveryList`` with that content type. Any
  other ``Accept`` gets the legacy documents (kubectl falls back to them on a plain JSON
  answer).

The verbs are what ``server.py`` answers: no ``deletecollection`` (a DELETE of a
collection is a 405 there), no ``apply`` (server-side apply answers 415).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from bellows.emulator.resources import ResourceType
from bellows.emulator.store import Store

__all__ = ["AGGREGATED", "VERBS", "add_discovery_routes"]

VERBS = ("create", "delete", "get", "list", "patch", "update", "watch")
_STATUS_VERBS = ("get", "patch", "update")
AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
_PREFERRED: dict[str, str] = {}  # group -> version, when several are served (none today)


def _groups(resources: Iterable[ResourceType]) -> dict[str, dict[str, list[ResourceType]]]:
    """The served resource types by group, then version, in the order they were given."""
    out: dict[str, dict[str, list[ResourceType]]] = {}
    for res in resources:
        out.setdefault(res.group, {}).setdefault(res.version, []).append(res)
    return out


def _singular(res: ResourceType) -> str:
    return res.singular or res.kind.lower()


def _legacy_resources(res: ResourceType) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {
        "name": res.plural,
        "singularName": _singular(res),
        "namespaced": res.namespaced,
        "kind": res.kind,
        "verbs": list(VERBS),
    }
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if res.categories:
        entry["categories"] = list(res.categories)
    out = [entry]
    if res.status_subresource:
        out.append(
            {
                "name": f"{res.plural}/status",
                "singularName": "",
                "namespaced": res.namespaced,
                "kind": res.kind,
                "verbs": list(_STATUS_VERBS),
            }
        )
    return out


def resource_list(group: str, version: str, types: Iterable[ResourceType]) -> dict[str, Any]:
    """The ``APIResourceList`` of one group version."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": [entry for res in types for entry in _legacy_resources(res)],
    }


def _group_doc(group: str, versions: Iterable[str]) -> dict[str, Any]:
    listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    preferred = next((v for v in listed if v["version"] == _PREFERRED.get(group)), listed[0])
    return {"name": group, "versions": listed, "preferredVersion": preferred}


def _aggregated_resource(res: ResourceType) -> dict[str, Any]:
    kind = {"group": res.group, "version": res.version, "kind": res.kind}
    entry: dict[str, Any] = {
        "resource": res.plural,
        "responseKind": kind,
        "scope": "Namespaced" if res.namespaced else "Cluster",
        "singularResource": _singular(res),
        "verbs": list(VERBS),
    }
    if res.short_names:
        entry["shortNames"] = list(res.short_names)
    if res.categories:
        entry["categories"] = list(res.categories)
    if res.status_subresource:
        entry["subresources"] = [
            {"subresource": "status", "responseKind": kind, "verbs": list(_STATUS_VERBS)}
        ]
    return entry


def aggregated(groups: dict[str, dict[str, list[ResourceType]]]) -> dict[str, Any]:
    """The ``APIGroupDiscoveryList`` of ``groups`` (``/api``: the core group alone)."""
    items = [
        {
            "metadata": {"name": group},
            "versions": [
                {
                    "version": version,
                    "resources": [_aggregated_resource(r) for r in types],
                    "freshness": "Current",
                }
                for version, types in versions.items()
            ],
        }
        for group, versions in groups.items()
    ]
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    }


def _wants_aggregated(request: web.Request) -> bool:
    """Whether the ``Accept`` header's first acceptable type is aggregated discovery v2."""
    for media in request.headers.get("Accept", "").split(","):
        params = {p.strip() for p in media.split(";")[1:]}
        if {"g=apidiscovery.k8s.io", "v=v2", "as=APIGroupDiscoveryList"} <= params:
            return True
        if media.split(";")[0].strip() in ("application/json", "*/*"):
            return False
    return False


def _json(body: Any, content_type: str = "application/json") -> web.Response:
    # web.json_response would append its own charset to the aggregated content type
    return web.Response(body=json.dumps(body).encode(), headers={"Content-Type": content_type})


def _not_found(path: str) -> web.Response:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"the server could not find the requested resource {path}",
        "reason": "NotFound",
        "details": {},
        "code": 404,
    }
    return web.json_response(body, status=404)


def add_discovery_routes(app: web.Application, store: Store) -> None:
    """Serve discovery for ``store``'s resource types on ``app`` (before its catch-all route)."""

    def groups() -> dict[str, dict[str, list[ResourceType]]]:
        return _groups(store.resources.values())

    async def core(request: web.Request) -> web.Response:
        if _wants_aggregated(request):
            return _json(aggregated({"": groups().get("", {})}), AGGREGATED)
        host = request.host
        return _json(
            {
                "kind": "APIVersions",
                "versions": list(groups().get("", {})),
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
            }
        )

    async def named(request: web.Request) -> web.Response:
        served = {g: v for g, v in groups().items() if g}
        if _wants_aggregated(request):
            return _json(aggregated(served), AGGREGATED)
        return _json(
            {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group_doc(g, v) for g, v in served.items()],
            }
        )

    async def group(request: web.Request) -> web.Response:
        name = request.match_info["group"]
        versions = groups().get(name) if name else None
        if not versions:
            return _not_found(request.path)
        return _json({"kind": "APIGroup", "apiVersion": "v1", **_group_doc(name, versions)})

    async def group_version(request: web.Request) -> web.Response:
        name, version = request.match_info.get("group", ""), request.match_info["version"]
        types = groups().get(name, {}).get(version) if (name or version == "v1") else None
        if not types:
            return _not_found(request.path)
        return _json(resource_list(name, version, types))

    app.router.add_get("/api", core)
    app.router.add_get("/api/", core)
    app.router.add_get("/apis", named)
    app.router.add_get("/apis/", named)
    app.router.add_get("/api/{version}", group_version)
    app.router.add_get("/apis/{group}", group)
    app.router.add_get("/apis/{group}/{version}", group_version)
