"""The emulated API server under garbage: it answers 4xx as kube-apiserver does, never 5xx,
and never hangs.

The server runs on its own event loop in a thread (with its operators); the tests speak raw
HTTP to it with ``urllib3`` and a timeout on every request, so a hang fails the test instead
of stalling it. The probes that answered 500 before (invalid UTF-8, ``metadata.name`` a list,
deep JSON) and the watch that never ended (``timeoutSeconds=nan``) come first, each with the
answer Kubernetes gives; then Hypothesis throws bodies and query parameters at it.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import urllib3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bellows.emulator import EmulatedCluster
from tests.kube.conftest import load_examples

JOBS = "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs"
TARGET = f"{JOBS}/target"
MPIJOBS = "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"
BATCH = "/apis/batch/v1/namespaces/default/jobs"
EVENTS = "/api/v1/namespaces/default/events"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
NAMESPACES = "/api/v1/namespaces"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
TIMEOUT = urllib3.Timeout(connect=5.0, read=15.0)  # a hang fails the test, never stalls it


class Background:
    """An emulated cluster serving from its own loop in a thread."""

    def __init__(self, crds: list[Path]) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cluster = EmulatedCluster(crds=crds, compression=1000.0)
        self._run(self.cluster.__aenter__())
        self.http = urllib3.PoolManager(timeout=TIMEOUT, retries=False)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)

    def close(self) -> None:
        self._run(self.cluster.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def operator_alive(self) -> bool:
        task = self.cluster._task
        return task is not None and not task.done()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        content_type: str = "application/json",
        fields: dict[str, str] | None = None,
        stream: bool = False,
    ) -> urllib3.BaseHTTPResponse:
        """The answer; with ``stream`` only its status and headers are read (a watch)."""
        url = self.cluster.url + path
        if fields:
            query = (f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in fields.items())
            url += "?" + "&".join(query)
        headers = {"Content-Type": content_type} if body is not None else {}
        return self.http.request(
            method, url, body=body, headers=headers, preload_content=not stream
        )


@pytest.fixture(scope="module")
def server(shared_data: Path) -> Iterator[Background]:
    background = Background(sorted((shared_data / "crds").glob("*.yaml")))
    try:
        yield background
    finally:
        background.close()


def example(kind: str, name: str) -> dict[str, Any]:
    obj = copy.deepcopy(load_examples()[kind])
    obj["metadata"]["name"] = name
    return obj


def status_of(resp: urllib3.BaseHTTPResponse) -> dict[str, Any]:
    """The response's Status body; every error the server sends is one, with its code."""
    body: dict[str, Any] = json.loads(resp.data)
    assert body["kind"] == "Status", body
    assert body["code"] == resp.status, body
    return body


def answered(server: Background, resp: urllib3.BaseHTTPResponse) -> int:
    """The status of a request that must neither fail the server nor stop its operators (a
    watch it accepted is closed unread: it streams until its timeout)."""
    if resp.status < 400 and not resp.isclosed() and resp.headers.get("Transfer-Encoding"):
        resp.close()
    else:
        assert resp.status < 500, (resp.status, resp.data[:500])
        if resp.status >= 400:
            status_of(resp)
    assert server.operator_alive()
    return resp.status


def ensure(server: Background, path: str, obj: dict[str, Any]) -> None:
    name = obj["metadata"]["name"]
    if server.request("GET", f"{path}/{name}").status == 404:
        made = server.request("POST", path, json.dumps(obj).encode())
        assert made.status == 201, made.data


# ----------------------------------------------------------------------------- the probes


def test_invalid_utf8_is_a_bad_request(server: Background) -> None:
    body = json.dumps(example("PyTorchJob", "utf8")).encode().replace(b'"utf8"', b'"utf\xff8"')
    resp = server.request("POST", JOBS, body)
    assert resp.status == 400
    assert "UTF-8" in status_of(resp)["message"]


def test_a_name_of_the_wrong_json_type_is_a_bad_request_that_names_the_field(
    server: Background,
) -> None:
    obj = example("PyTorchJob", "x")
    obj["metadata"]["name"] = ["a", "b"]
    resp = server.request("POST", JOBS, json.dumps(obj).encode())
    assert resp.status == 400
    assert status_of(resp)["message"] == (
        'PyTorchJob in version "v1" cannot be handled as a PyTorchJob: json: cannot unmarshal '
        "array into Go struct field metadata.name of type string"
    )
    obj["metadata"]["name"] = "x"
    obj["metadata"]["ownerReferences"] = [5]
    assert server.request("POST", JOBS, json.dumps(obj).encode()).status == 400


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 900 + b"1" + b"}" * 900,  # under Python's recursion limit, over the server's
        b'{"metadata": {"name": "n"}, "spec": ' + b"9" * 5000 + b"}",
        b'{"metadata": {"name": "n"}, "spec": NaN}',
        b'{"metadata": {"name": "n"}, "x": 1e400}',
        b"\xff\xfe{}",
        b"{nope",
    ],
    ids=["deep-array", "deep-object", "5000-digits", "nan", "1e400", "bom", "not-json"],
)
def test_a_malformed_body_is_a_bad_request(server: Background, body: bytes) -> None:
    for method, path in (("POST", JOBS), ("PUT", TARGET), ("PATCH", TARGET)):
        ctype = MERGE if method == "PATCH" else "application/json"
        resp = server.request(method, path, body, content_type=ctype)
        assert resp.status == 400, (method, resp.data[:300])
        assert status_of(resp)["reason"] == "BadRequest"


def test_a_body_over_3_mib_is_too_large(server: Background) -> None:
    obj = example("PyTorchJob", "big")
    obj["metadata"]["annotations"]["x"] = "a" * (3 * 1024 * 1024)
    resp = server.request("POST", JOBS, json.dumps(obj).encode())
    assert resp.status == 413
    assert status_of(resp)["reason"] == "RequestEntityTooLarge"


def test_invalid_objects_are_422_with_the_field_in_the_details(server: Background) -> None:
    ensure(server, JOBS, example("PyTorchJob", "target"))
    cases: list[tuple[str, str, dict[str, Any], str]] = [
        ("POST", JOBS, {"metadata": {"name": "x\n"}}, "metadata.name"),
        ("POST", JOBS, {"metadata": {"name": "x", "labels": {"a": "b\n"}}}, "metadata.labels.a"),
        (
            "POST",
            JOBS,
            {"metadata": {"name": "x", "annotations": {"k\n": "v"}}},
            "metadata.annotations",
        ),
        ("PATCH", TARGET, {"metadata": {"labels": 5}}, "metadata.labels"),
        (
            "PATCH",
            TARGET,
            {"metadata": {"annotations": {"big": "a" * 300_000}}},
            "metadata.annotations",
        ),
        (
            "PATCH",
            TARGET,
            {
                "metadata": {
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "A",
                            "name": "a",
                            "uid": "1",
                            "controller": True,
                        },
                        {
                            "apiVersion": "v1",
                            "kind": "B",
                            "name": "b",
                            "uid": "2",
                            "controller": True,
                        },
                    ]
                }
            },
            "metadata.ownerReferences",
        ),
    ]
    for method, path, change, field in cases:
        body = change if method == "PATCH" else _merged(example("PyTorchJob", "x"), change)
        resp = server.request(method, path, json.dumps(body).encode(), content_type=MERGE)
        assert resp.status == 422, (change, resp.data[:300])
        status = status_of(resp)
        assert status["reason"] == "Invalid"
        assert field in [c["field"] for c in status["details"]["causes"]], status


def test_a_quantity_with_a_trailing_newline_is_no_quantity(server: Background) -> None:
    """The CRD's pattern ends in ``$``: Go's regexp ends it there; Python's would not."""
    obj = example("PyTorchJob", "gpu-newline")
    container = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = "1\n"
    resp = server.request("POST", JOBS, json.dumps(obj).encode())
    assert resp.status == 422
    fields = [c["field"] for c in status_of(resp)["details"]["causes"]]
    assert any(f.endswith("limits.nvidia.com/gpu") for f in fields), fields


def test_configmap_keys_are_matched_whole(server: Background) -> None:
    body = {"metadata": {"name": "cm-bad"}, "data": {"profile.json\n": "{}"}}
    resp = server.request("POST", CONFIGMAPS, json.dumps(body).encode())
    assert resp.status == 422
    assert status_of(resp)["details"]["causes"][0]["field"].startswith("data[")
    body["data"] = {"profile.json": "{}"}
    assert server.request("POST", CONFIGMAPS, json.dumps(body).encode()).status == 201


def test_json_patches_are_bounded(server: Background) -> None:
    ensure(server, JOBS, example("PyTorchJob", "target"))
    double = [{"op": "copy", "from": "", "path": f"/metadata/annotations/c{i}"} for i in range(40)]
    cases = [
        (
            [
                {
                    "op": "add",
                    "path": "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/²",
                    "value": {},
                }
            ],
            422,
        ),
        ([{"op": "add", "path": "/metadata/labels/" + "9" * 5000, "value": "x"}], 422),
        ([{"op": "copy", "from": "", "path": "/spec/x"}] * 30, 422),  # doubling the document
        (double, 422),
        ([{"op": "test", "path": "/metadata/name", "value": "target"}] * 10_001, 413),
        ({"op": "add"}, 400),  # not a list
        ([{"op": "frobnicate", "path": "/a"}], 400),
        ([{"op": "add", "path": 5, "value": 1}], 400),
    ]
    for patch, code in cases:
        started = time.monotonic()
        resp = server.request("PATCH", TARGET, json.dumps(patch).encode(), content_type=JSON_PATCH)
        assert resp.status == code, (str(patch)[:120], resp.data[:300])
        status_of(resp)
        assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "value", ["nan", "-1", "inf", "1.5", "1e3", "²", " ", "99999999999999999999", "9223372037"]
)
def test_a_watch_timeout_that_is_no_integer_in_range_is_refused(
    server: Background, value: str
) -> None:
    resp = server.request("GET", JOBS, fields={"watch": "true", "timeoutSeconds": value})
    assert resp.status == 400, value
    assert "timeoutSeconds" in status_of(resp)["message"]


def test_a_watch_ends_when_its_timeout_says(server: Background) -> None:
    started = time.monotonic()
    resp = server.request("GET", JOBS, fields={"watch": "true", "timeoutSeconds": "1"})
    assert resp.status == 200
    assert time.monotonic() - started < 10  # the whole stream, read to its end


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("limit", "nan"),
        ("limit", "-5"),
        ("limit", "²"),
        ("resourceVersion", "²"),
        ("continue", "%%%"),
        ("continue", base64.urlsafe_b64encode(b"[" * 3000).decode()),
        ("continue", base64.urlsafe_b64encode(b'{"rv": 1e400, "after": ["a", "b"]}').decode()),
        ("continue", base64.urlsafe_b64encode(b'{"rv": 1, "after": [[], "b"]}').decode()),
        ("labelSelector", "a in (b"),
        ("fieldSelector", "spec.x=1"),
    ],
)
def test_bad_list_parameters_are_bad_requests(server: Background, name: str, value: str) -> None:
    watch = {"watch": "true", "timeoutSeconds": "1"} if name == "resourceVersion" else {}
    resp = server.request("GET", JOBS, fields={name: value, **watch})
    assert resp.status == 400, (name, value, resp.data[:300])
    status_of(resp)


def test_delete_options_of_the_wrong_types_are_bad_requests(server: Background) -> None:
    ensure(server, CONFIGMAPS, {"metadata": {"name": "keep"}, "data": {}})
    for options in (
        [1],
        {"preconditions": [1]},
        {"preconditions": {"uid": 5}},
        {"propagationPolicy": ["Background"]},
        {"gracePeriodSeconds": True},
        {"dryRun": "All"},
        {"dryRun": ["Maybe"]},
    ):
        resp = server.request("DELETE", f"{CONFIGMAPS}/keep", json.dumps(options).encode())
        assert resp.status == 400, (options, resp.data[:300])
        status_of(resp)
    assert server.request("GET", f"{CONFIGMAPS}/keep").status == 200


# ----------------------------------------------------------------------------- fuzzing

_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20)
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4),
    max_leaves=16,
)
_PATHS = {
    "PyTorchJob": ("POST", JOBS),
    "MPIJob": ("POST", MPIJOBS),
    "ConfigMap": ("POST", CONFIGMAPS),
}
_SPOTS = [
    ("apiVersion",),
    ("kind",),
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "generateName"),
    ("metadata", "namespace"),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("metadata", "finalizers"),
    ("metadata", "resourceVersion"),
    ("metadata", "generation"),
    ("metadata", "uid"),
    ("spec",),
    ("spec", "runPolicy"),
    ("data",),
]


def _merged(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _encode(value: Any, *, ascii_only: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ascii_only)  # NaN and Infinity when drawn
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate: invalid UTF-8


@st.composite
def mutated_objects(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """A valid example with one place replaced by any JSON value; sent as create or patch."""
    kind = draw(st.sampled_from(sorted(_PATHS)))
    obj = copy.deepcopy(load_examples()[kind])
    obj["metadata"]["name"] = "fuzzed"
    node: Any = obj
    if draw(st.booleans()):  # a place the API server reads itself
        spot = draw(st.sampled_from(_SPOTS))
        for key in spot[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node
        if isinstance(node, dict):
            node[spot[-1]] = draw(_JSON)
    else:  # anywhere in the object: a random walk down from the top
        parent: Any = None
        key: Any = None
        for _ in range(draw(st.integers(1, 12))):
            if isinstance(node, dict) and node:
                key = draw(st.sampled_from(sorted(node)))
            elif isinstance(node, list) and node:
                key = draw(st.integers(0, len(node) - 1))
            else:
                break
            parent, node = node, node[key]
        if parent is not None:
            parent[key] = draw(_JSON)
    body = _encode(obj, ascii_only=draw(st.booleans()))
    method, path = _PATHS[kind]
    if draw(st.booleans()):
        return "PATCH", f"{TARGET}", body  # as a merge patch of an existing job
    return method, path, body


_GARBAGE = st.one_of(
    st.binary(max_size=300),
    _JSON.map(lambda v: _encode(v, ascii_only=False)),
    st.integers(1, 3000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n),
)
_WRITES = st.sampled_from(
    [
        ("POST", JOBS),
        ("PUT", TARGET),
        ("PATCH", TARGET),
        ("PUT", f"{TARGET}/status"),
        ("PATCH", f"{TARGET}/status"),
        ("POST", MPIJOBS),
        ("POST", CONFIGMAPS),
        ("POST", BATCH),
        ("POST", EVENTS),
        ("POST", LEASES),
        ("POST", NAMESPACES),
        ("DELETE", f"{BATCH}/nothing-here"),
        ("DELETE", f"{JOBS}/fuzz-victim"),
    ]
)
_CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        MERGE,
        JSON_PATCH,
        "application/strategic-merge-patch+json",
        "application/apply-patch+yaml",
        "application/json; charset=latin-1",
        "application/json; charset=nonsense",
        "text/plain",
    ]
)
_FUZZ = settings(
    # BELLOWS_FUZZ_EXAMPLES=5000 for a longer run than CI's
    max_examples=int(os.environ.get("BELLOWS_FUZZ_EXAMPLES", "150")),
    deadline=None,  # HTTP on a loaded machine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_FUZZ
@given(write=_WRITES, body=_GARBAGE, content_type=_CONTENT_TYPES)
def test_garbage_bodies_get_4xx_never_5xx(
    server: Background, write: tuple[str, str], body: bytes, content_type: str
) -> None:
    ensure(server, JOBS, example("PyTorchJob", "target"))
    method, path = write
    answered(server, server.request(method, path, body, content_type=content_type))


@_FUZZ
@given(case=mutated_objects())
def test_objects_with_any_value_anywhere_get_an_answer_never_5xx(
    server: Background, case: tuple[str, str, bytes]
) -> None:
    ensure(server, JOBS, example("PyTorchJob", "target"))
    method, path, body = case
    code = answered(server, server.request(method, path, body, content_type=MERGE))
    if method == "POST" and code == 201:
        name = json.loads(body)["metadata"]["name"]
        answered(server, server.request("DELETE", f"{path}/{quote(str(name), safe='')}"))


_PARAM_VALUES = st.one_of(
    st.sampled_from(["nan", "-1", "inf", "0", "1", "1.5", "²", "", " 1", "99999999999999999999"]),
    _TEXT,
    st.integers(-(2**70), 2**70).map(str),
)
_PARAMS = st.dictionaries(
    st.sampled_from(
        [
            "limit",
            "continue",
            "labelSelector",
            "fieldSelector",
            "resourceVersion",
            "resourceVersionMatch",
            "allowWatchBookmarks",
            "sendInitialEvents",
            "dryRun",
            "propagationPolicy",
            "fieldManager",
        ]
    )
    | _TEXT,
    _PARAM_VALUES,
    max_size=4,
)


@_FUZZ
@given(params=_PARAMS, watch=st.booleans(), timeout=_PARAM_VALUES, segment=_TEXT)
def test_garbage_query_parameters_and_paths_get_4xx_never_5xx_and_never_hang(
    server: Background, params: dict[str, str], watch: bool, timeout: str, segment: str
) -> None:
    fields = dict(params)
    if watch:
        fields.update(watch="true", timeoutSeconds=timeout)
    segment = quote(segment, safe="")
    started = time.monotonic()
    answered(server, server.request("GET", JOBS, fields=fields, stream=True))
    answered(server, server.request("GET", f"{JOBS}/{segment}"))
    answered(server, server.request("GET", f"/apis/kubeflow.org/v1/namespaces/{segment}/jobs"))
    assert time.monotonic() - started < 30


def test_after_the_fuzzing_the_server_still_serves(server: Background) -> None:
    made = server.request("POST", JOBS, json.dumps(example("PyTorchJob", "after")).encode())
    assert made.status == 201
    listed = json.loads(server.request("GET", JOBS).data)
    assert "after" in [item["metadata"]["name"] for item in listed["items"]]
    assert server.operator_alive()
