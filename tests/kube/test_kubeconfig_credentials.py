"""The kubeconfig as every command reads it (``bellows.kube.kubeconfig``, through the official
client's loader: issue 38 item 3, one client): files merged as kubectl merges them, and TLS,
tokens and client certificates against a real HTTPS server (a CA, a server and a client
certificate made for the test), through the calls ``bellows status`` and the controller
make (:class:`bellows.kube.client.KubeApi`)."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ipaddress
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from kubernetes.client.rest import ApiException
from kubernetes.config import incluster_config

from bellows.kube import kubeconfig
from bellows.kube.client import KubeApi, client_from_config, described
from bellows.kube.kubeconfig import (
    KubeconfigError,
    UnknownContextError,
    context_namespace,
    load_configuration,
)

NODES = {"kind": "NodeList", "metadata": {"resourceVersion": "7"}, "items": [{"metadata": {}}]}


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _issue(
    name: str,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    sans: list[x509.GeneralName] = (),  # type: ignore[assignment]
    ca: bool = False,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer[0].subject if issuer else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256()), key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA; a server certificate for 127.0.0.1 and one only for ``kube.test``; a client's."""
    folder = tmp_path_factory.mktemp("pki")
    ca = _issue("test-ca", None, ca=True)
    here = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    made = {
        "server": _issue("server", ca, sans=here),
        "named": _issue("named", ca, sans=[x509.DNSName("kube.test")]),
        "client": _issue("jane", ca),
    }
    out = {"ca.crt": folder / "ca.crt"}
    out["ca.crt"].write_bytes(_pem(ca[0]))
    for name, (cert, key) in made.items():
        out[f"{name}.crt"], out[f"{name}.key"] = folder / f"{name}.crt", folder / f"{name}.key"
        out[f"{name}.crt"].write_bytes(_pem(cert))
        out[f"{name}.key"].write_bytes(_key_pem(key))
    return out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as an API server
    seen: list[dict[str, Any]]

    def do_GET(self) -> None:
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        self.seen.append(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "peer": peer,
            }
        )
        if self.path.startswith("/api/v1/nodes"):
            status, body = 200, NODES
        elif "/namespaces/forbidden/" in self.path:
            message = 'nodes is forbidden: User "jane" cannot list resource "nodes"'
            status, body = 403, {"kind": "Status", "message": message, "code": 403}
        else:
            status, body = 404, {"kind": "Status", "message": "not found", "code": 404}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def server(pki: dict[str, Path], request: pytest.FixtureRequest) -> Iterator[tuple[str, list]]:
    """An HTTPS server with ``request.param`` as its certificate (``server``, ``named``),
    asking for a client certificate signed by the CA (optional: tokens work too)."""
    which = getattr(request, "param", "server")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki[f"{which}.crt"], pki[f"{which}.key"])
    tls.load_verify_locations(pki["ca.crt"])
    tls.verify_mode = ssl.CERT_OPTIONAL
    seen: list[dict[str, Any]] = []
    handler = type("Handler", (_Handler,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def _kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any], **more: Any) -> Path:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "here",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "here", "context": {"cluster": "c", "user": "u"}}],
        **more,
    }
    path.write_text(yaml.safe_dump(document))
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def _all(pages: Any) -> list[Any]:
    return [page async for page in pages]


def _nodes(config: Path | None = None, context: str | None = None) -> Any:
    """The nodes' pages, listed as ``bellows status`` and the controller list them."""
    client = client_from_config(config, context)
    try:
        return asyncio.run(_all(KubeApi(client).list_nodes()))
    finally:
        client.close()


LISTED = [(NODES["items"], "7")]
pytestmark = pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")


def test_a_token_over_tls_with_the_ca_as_data_or_file(server, pki, tmp_path) -> None:
    url, seen = server
    data = {"server": url, "certificate-authority-data": _b64(pki["ca.crt"])}
    assert _nodes(_kubeconfig(tmp_path / "a", data, {"token": "s3cret"})) == LISTED
    assert seen[-1]["headers"]["authorization"] == "Bearer s3cret"
    # relative file names are read beside the kubeconfig, as kubectl reads them
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    (tmp_path / "certs" / "token").write_text("from-a-file\n")
    files = {"server": url, "certificate-authority": "certs/ca.crt"}
    assert _nodes(_kubeconfig(tmp_path / "b", files, {"tokenFile": "certs/token"})) == LISTED
    assert seen[-1]["headers"]["authorization"] == "Bearer from-a-file"
    # without the CA the server's certificate is refused; skipping verification is allowed
    with pytest.raises(urllib3.exceptions.MaxRetryError) as refused:
        _nodes(_kubeconfig(tmp_path / "c", {"server": url}, {"token": "t"}))
    assert described(refused.value).startswith(f"could not connect to 127.0.0.1:{url[-5:]}")
    assert "certificate verify failed" in described(refused.value)
    insecure = {"server": url, "insecure-skip-tls-verify": True}
    assert _nodes(_kubeconfig(tmp_path / "d", insecure, {"token": "t"})) == LISTED


def test_a_client_certificate_as_data_or_files(server, pki, tmp_path) -> None:
    url, seen = server
    ca = {"server": url, "certificate-authority": str(pki["ca.crt"])}
    user = {
        "client-certificate-data": _b64(pki["client.crt"]),
        "client-key-data": _b64(pki["client.key"]),
    }
    assert _nodes(_kubeconfig(tmp_path / "a", ca, user)) == LISTED
    assert seen[-1]["peer"]["subject"] == ((("commonName", "jane"),),)
    assert "authorization" not in seen[-1]["headers"]
    files = {"client-certificate": str(pki["client.crt"]), "client-key": str(pki["client.key"])}
    assert _nodes(_kubeconfig(tmp_path / "b", ca, files)) == LISTED
    assert seen[-1]["peer"]["subject"] == ((("commonName", "jane"),),)
    basic = {"username": "jane", "password": "pw"}
    assert _nodes(_kubeconfig(tmp_path / "c", ca, basic)) == LISTED
    assert seen[-1]["headers"]["authorization"] == "Basic " + base64.b64encode(b"jane:pw").decode()


@pytest.mark.parametrize("server", ["named"], indirect=True)
def test_tls_server_name_checks_the_certificate_for_that_name(server, pki, tmp_path) -> None:
    url, _ = server
    ca = {"server": url, "certificate-authority": str(pki["ca.crt"])}
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        _nodes(_kubeconfig(tmp_path / "a", ca, {"token": "t"}))
    named = {**ca, "tls-server-name": "kube.test"}
    assert _nodes(_kubeconfig(tmp_path / "b", named, {"token": "t"})) == LISTED


def test_error_statuses_carry_the_servers_message(server, pki, tmp_path) -> None:
    url, _ = server
    config = _kubeconfig(tmp_path / "a", {"server": url, "insecure-skip-tls-verify": True}, {})
    client = client_from_config(config)
    api = KubeApi(client)
    try:
        with pytest.raises(ApiException) as forbidden:
            asyncio.run(api.list_events("forbidden"))
        assert described(forbidden.value) == (
            '(403) Forbidden: nodes is forbidden: User "jane" cannot list resource "nodes"'
        )
        # a missing object reads as None
        assert asyncio.run(api.get_lease("bellows-system", "bellows-controller")) is None
        assert asyncio.run(api.get_configmap("default", "absent")) is None
    finally:
        client.close()


def test_kubeconfig_files_merge_as_kubectl_merges_them(tmp_path, monkeypatch) -> None:
    first = _kubeconfig(tmp_path / "first", {"server": "http://one:1"}, {"token": "a"})
    second = _kubeconfig(
        tmp_path / "second",
        {"server": "http://two:2"},
        {"token": "b"},
        **{"current-context": "there"},
        contexts=[
            {"name": "here", "context": {"cluster": "c", "user": "u"}},
            {"name": "there", "context": {"cluster": "c", "user": "u", "namespace": "ml"}},
        ],
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    got = load_configuration()  # the first file's current context, cluster and user win
    assert (got.host, got.api_key["authorization"]) == ("http://one:1", "Bearer a")
    assert load_configuration(context="there").host == "http://one:1"  # "c" is the first's
    assert context_namespace() == "default"
    assert context_namespace(context="there") == "ml"
    with pytest.raises(UnknownContextError) as caught:
        context_namespace(context="nowhere")
    assert str(caught.value) == "'nowhere' is not a context of ['here', 'there']"
    with pytest.raises(KubeconfigError, match="nowhere"):
        load_configuration(context="nowhere")
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent'}:{tmp_path / 'gone'}")
    with pytest.raises(KubeconfigError, match=r"no kubeconfig: none of \$KUBECONFIG=.* exists"):
        load_configuration()


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"server": "api:6443"}, {}, "server 'api:6443' is not a URL"),
        ({"server": "https://a", "certificate-authority": "nope.crt"}, {}, "nope.crt"),
        ({"server": "https://a", "certificate-authority-data": "!!"}, {}, "cannot be used"),
        ({"server": "http://a"}, {"tokenFile": "missing-token"}, "missing-token"),
    ],
)
def test_a_bad_kubeconfig_is_one_line_naming_the_field(cluster, user, message, tmp_path) -> None:
    with pytest.raises(KubeconfigError, match=message) as caught:
        load_configuration(_kubeconfig(tmp_path / "k", cluster, user))
    assert "\n" not in str(caught.value)


def test_in_a_pod_the_service_account_is_used(server, pki, tmp_path, monkeypatch) -> None:
    url, seen = server
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    (tmp_path / "namespace").write_text("team-a\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setattr(kubeconfig, "ACCOUNT", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", url.rsplit(":", 1)[1])
    assert _nodes() == LISTED
    # the scheme's case is the client's own (RFC 7235: either reads the same)
    assert seen[-1]["headers"]["authorization"].lower() == "bearer pod-token"
    assert context_namespace() == "team-a"
    # a kubeconfig given still wins, as kubectl's --kubeconfig does
    config = _kubeconfig(tmp_path / "k", {"server": "http://elsewhere:80"}, {})
    assert load_configuration(config).host == "http://elsewhere:80"
    assert context_namespace(config) == "default"
