"""The plain-HTTP reads of ``bellows status`` (``bellows.kube.listing``): the kubeconfig read
as kubectl reads it, and TLS, tokens and client certificates against a real HTTPS server
(a CA, a server and a client certificate made for the test)."""

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
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bellows.kube import listing
from bellows.kube.errors import NotFoundError
from bellows.kube.listing import ApiError, ConfigError, ListingApi, NeedsClient, endpoint

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
        self.seen.append({"path": self.path, "headers": dict(self.headers), "peer": peer})
        if self.path.startswith("/api/v1/nodes"):
            status, body = 200, NODES
        elif self.path.startswith("/forbidden"):
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


def _get(config: Path, path: str = "/api/v1/nodes", context: str | None = None) -> Any:
    api = ListingApi(endpoint(config, context))
    try:
        return api.get(path)
    finally:
        api.close()


def test_a_token_over_tls_with_the_ca_as_data_or_file(server, pki, tmp_path) -> None:
    url, seen = server
    data = {"server": url, "certificate-authority-data": _b64(pki["ca.crt"])}
    assert _get(_kubeconfig(tmp_path / "a", data, {"token": "s3cret"})) == NODES
    assert seen[-1]["headers"]["Authorization"] == "Bearer s3cret"
    # relative file names are read beside the kubeconfig, as kubectl reads them
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    (tmp_path / "certs" / "token").write_text("from-a-file\n")
    files = {"server": url, "certificate-authority": "certs/ca.crt"}
    assert _get(_kubeconfig(tmp_path / "b", files, {"tokenFile": "certs/token"})) == NODES
    assert seen[-1]["headers"]["Authorization"] == "Bearer from-a-file"
    # without the CA the server's certificate is refused; skipping verification is allowed
    with pytest.raises(ssl.SSLCertVerificationError):
        _get(_kubeconfig(tmp_path / "c", {"server": url}, {"token": "t"}))
    insecure = {"server": url, "insecure-skip-tls-verify": True}
    assert _get(_kubeconfig(tmp_path / "d", insecure, {"token": "t"})) == NODES


def test_a_client_certificate_as_data_or_files(server, pki, tmp_path) -> None:
    url, seen = server
    ca = {"server": url, "certificate-authority": str(pki["ca.crt"])}
    user = {
        "client-certificate-data": _b64(pki["client.crt"]),
        "client-key-data": _b64(pki["client.key"]),
    }
    assert _get(_kubeconfig(tmp_path / "a", ca, user)) == NODES
    assert seen[-1]["peer"]["subject"] == ((("commonName", "jane"),),)
    assert "Authorization" not in seen[-1]["headers"]
    files = {"client-certificate": str(pki["client.crt"]), "client-key": str(pki["client.key"])}
    assert _get(_kubeconfig(tmp_path / "b", ca, files)) == NODES
    assert seen[-1]["peer"]["subject"] == ((("commonName", "jane"),),)
    basic = {"username": "jane", "password": "pw"}
    assert _get(_kubeconfig(tmp_path / "c", ca, basic)) == NODES
    assert seen[-1]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"jane:pw").decode()


@pytest.mark.parametrize("server", ["named"], indirect=True)
def test_tls_server_name_checks_the_certificate_for_that_name(server, pki, tmp_path) -> None:
    url, _ = server
    ca = {"server": url, "certificate-authority": str(pki["ca.crt"])}
    with pytest.raises(ssl.SSLCertVerificationError):
        _get(_kubeconfig(tmp_path / "a", ca, {"token": "t"}))
    named = {**ca, "tls-server-name": "kube.test"}
    assert _get(_kubeconfig(tmp_path / "b", named, {"token": "t"})) == NODES


def test_error_statuses_carry_the_servers_message(server, pki, tmp_path) -> None:
    url, _ = server
    config = _kubeconfig(tmp_path / "a", {"server": url, "insecure-skip-tls-verify": True}, {})
    with pytest.raises(ApiError) as forbidden:
        _get(config, "/forbidden")
    assert forbidden.value.status == 403
    assert str(forbidden.value) == (
        '(403) Forbidden: nodes is forbidden: User "jane" cannot list resource "nodes"'
    )
    with pytest.raises(NotFoundError):
        _get(config, "/apis/kubeflow.org/v1/pytorchjobs")
    api = ListingApi(endpoint(config))
    try:  # a missing object reads as None; several requests share one kept-alive connection
        assert asyncio.run(api.get_lease("bellows-system", "bellows-controller")) is None
        pages = asyncio.run(_all(api.list_nodes()))
        assert pages == [(NODES["items"], "7")]
    finally:
        api.close()


async def _all(pages: Any) -> list[Any]:
    return [page async for page in pages]


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
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'absent'}:{second}")
    got = endpoint()  # the first file's current context, cluster and user win
    assert (got.server, got.headers, got.tls) == (
        "http://one:1",
        {"Authorization": "Bearer a"},
        None,
    )
    assert endpoint(context="there").server == "http://one:1"  # cluster "c" is the first's
    config = listing.read_kubeconfig()
    assert config.context("there")[1]["namespace"] == "ml"
    with pytest.raises(ConfigError) as caught:
        endpoint(context="nowhere")
    assert "no context 'nowhere' (contexts: ['here', 'there'])" in str(caught.value)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="none of"):
        endpoint()


@pytest.mark.parametrize(
    ("cluster", "user"),
    [
        ({}, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}),
        ({}, {"auth-provider": {"name": "oidc"}}),
        ({"proxy-url": "http://proxy:3128"}, {"token": "t"}),
    ],
    ids=["exec", "auth-provider", "proxy-url"],
)
def test_credentials_only_the_client_implements_fall_back_to_it(cluster, user, tmp_path) -> None:
    config = _kubeconfig(tmp_path / "k", {"server": "https://api:6443", **cluster}, user)
    with pytest.raises(NeedsClient):
        endpoint(config)


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({"server": "api:6443"}, {}, "server 'api:6443' is not a URL"),
        ({"server": "https://a", "certificate-authority": "nope.crt"}, {}, "nope.crt"),
        ({"server": "https://a", "certificate-authority-data": "!!"}, {}, "not base64"),
        ({"server": "http://a"}, {"tokenFile": "missing-token"}, "user.tokenFile"),
    ],
)
def test_a_bad_kubeconfig_is_one_line_naming_the_field(cluster, user, message, tmp_path) -> None:
    with pytest.raises(ConfigError, match=message):
        endpoint(_kubeconfig(tmp_path / "k", cluster, user))


def test_in_a_pod_the_service_account_is_used(pki, tmp_path, monkeypatch) -> None:
    (tmp_path / "token").write_text("pod-token\n")
    (tmp_path / "ca.crt").write_bytes(pki["ca.crt"].read_bytes())
    monkeypatch.setattr(listing, "ACCOUNT", tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    got = endpoint()
    assert got.server == "https://10.0.0.1:443"
    assert got.headers == {"Authorization": "Bearer pod-token"}
    assert got.tls is not None
    # a kubeconfig given still wins, as kubectl's --kubeconfig does
    config = _kubeconfig(tmp_path / "k", {"server": "http://elsewhere:80"}, {})
    assert endpoint(config).server == "http://elsewhere:80"
