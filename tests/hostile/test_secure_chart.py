"""Secure defaults of the chart: NetworkPolicies around every pod, generated NATS passwords
that never reach a ConfigMap, bounded streams, and refusals of settings that would undo them.

The objects are rendered by Helm's engine and validated against the Kubernetes schemas in
tests/ship; here is what they allow.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from bellows.bus.settings import NatsSettings
from bellows.service.config import load_config
from tests.ship import kube_schemas
from tests.ship.chart import NAMESPACE, by_kind, named, render

BUNDLED: dict[str, Any] = {"nats": {"bundled": {"enabled": True}}}


def _labels(objs: list[dict[str, Any]], component: str) -> dict[str, str]:
    deployment = named(objs, "Deployment", f"bellows-{component}")
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return bool(selector["matchLabels"].items() <= labels.items())


def _ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(p["port"], p["protocol"]) for p in rule["ports"]}


@pytest.mark.parametrize("values", [{}, BUNDLED], ids=["own-nats", "bundled"])
def test_every_pod_has_a_network_policy_by_default(values: dict[str, Any]) -> None:
    objs = render(values)
    policies = by_kind(objs, "NetworkPolicy")
    for deployment in by_kind(objs, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        (policy,) = [p for p in policies if _selects(p["spec"]["podSelector"], labels)]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        kube_schemas.validate(policy)
    assert by_kind(render({"networkPolicy": {"enabled": False}, **BUNDLED}), "NetworkPolicy") == []


def test_only_the_controller_and_the_bridge_reach_the_bundled_nats() -> None:
    objs = render(BUNDLED)
    policy = named(objs, "NetworkPolicy", "bellows-nats")["spec"]
    client, monitor = policy["ingress"]
    assert _ports(client) == {(4222, "TCP")}
    peers = client["from"]
    assert all(set(peer) == {"podSelector"} for peer in peers)  # no namespace, no IP block
    allowed = {
        c
        for c in ("controller", "bridge")
        for p in peers
        if _selects(p["podSelector"], _labels(objs, c))
    }
    assert allowed == {"controller", "bridge"}
    assert len(peers) == 2
    assert _ports(monitor) == {(8222, "TCP")}  # monitoring, for the scrapers of metricsFrom
    assert policy["egress"] == []  # one server: it connects nowhere


@pytest.mark.parametrize("component", ["controller", "bridge"])
def test_components_accept_only_scrapes_and_connect_only_to_dns_api_and_nats(
    component: str,
) -> None:
    objs = render(BUNDLED)
    policy = named(objs, "NetworkPolicy", f"bellows-{component}")["spec"]
    (ingress,) = policy["ingress"]
    assert _ports(ingress) == {(9090, "TCP")}
    assert ingress["from"] == [{"namespaceSelector": {}}]  # the documented default
    dns, api, nats = policy["egress"]
    assert _ports(dns) == {(53, "UDP"), (53, "TCP")}
    assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}
    assert _ports(api) == {(443, "TCP"), (6443, "TCP")}
    assert _ports(nats) == {(4222, "TCP")}
    (nats_peer,) = nats["to"]
    nats_pod = named(objs, "Deployment", "bellows-nats")["spec"]["template"]["metadata"]["labels"]
    assert _selects(nats_peer["podSelector"], nats_pod)
    # your own NATS: its ports, anywhere (or where networkPolicy.nats.to says)
    own = named(render(), "NetworkPolicy", f"bellows-{component}")["spec"]["egress"][2]
    assert own == {"ports": [{"port": 4222, "protocol": "TCP"}]}


def test_metrics_closed_when_no_scraper_is_allowed() -> None:
    objs = render({"networkPolicy": {"metricsFrom": []}, **BUNDLED})
    for name in ("bellows-controller", "bellows-bridge"):
        assert named(objs, "NetworkPolicy", name)["spec"]["ingress"] == []
    assert len(named(objs, "NetworkPolicy", "bellows-nats")["spec"]["ingress"]) == 1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"nats": {"servers": ["nats://nats.nats.svc:4333"]}},
            "port 4333 is not in networkPolicy.nats.ports",
        ),
        ({"nats": {"servers": ["wss://nats.example:443"]}}, "port 443 is not in"),
        (
            {"nats": {"bundled": {"enabled": True, "maxFileStore": "300M"}}},
            "do not fit in nats.bundled.maxFileStore=300M",
        ),
        (
            {
                "nats": {
                    "bundled": {"enabled": True},
                    "credentials": {"existingSecret": "mine", "key": "k"},
                }
            },
            "the bundled server has its own users",
        ),
    ],
)
def test_chart_refuses_settings_that_would_break_or_undo_the_defaults(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(values)


def test_a_port_listed_in_the_policy_is_accepted() -> None:
    values = {
        "nats": {"servers": ["nats://a:4333", "tls://b"]},
        "networkPolicy": {"nats": {"ports": [4333, 4222], "to": []}},
    }
    egress = named(render(values), "NetworkPolicy", "bellows-controller")["spec"]["egress"]
    assert _ports(egress[2]) == {(4333, "TCP"), (4222, "TCP")}


def _passwords(objs: list[dict[str, Any]]) -> dict[str, str]:
    secret = named(objs, "Secret", "bellows-nats-auth")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_bundled_nats_passwords_are_generated_strong_and_only_in_the_secret() -> None:
    first, second = render(BUNDLED), render(BUNDLED)
    passwords = _passwords(first)
    assert set(passwords) == {"controller-password", "bridge-password"}
    for password in passwords.values():
        # a letter first: nats-server parses an env value like a config value
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]{39}", password)
    assert len(set(passwords.values())) == 2
    assert _passwords(second) != passwords  # random per install (upgrades keep them: lookup)
    for config_map in by_kind(first, "ConfigMap"):
        text = json.dumps(config_map)
        assert not any(p in text for p in passwords.values())
    auth = named(first, "ConfigMap", "bellows-nats")["data"]["auth.conf"]
    referenced = set(re.findall(r"\$(NATS_[A-Z]+_PASSWORD)", auth))
    (nats,) = named(first, "Deployment", "bellows-nats")["spec"]["template"]["spec"]["containers"]
    given = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in nats["env"]}
    assert referenced == set(given) == {"NATS_CONTROLLER_PASSWORD", "NATS_BRIDGE_PASSWORD"}
    assert {ref["name"] for ref in given.values()} == {"bellows-nats-auth"}


def test_an_existing_secret_replaces_the_generated_one() -> None:
    objs = render({"nats": {"bundled": {"enabled": True, "auth": {"existingSecret": "mine"}}}})
    assert by_kind(objs, "Secret") == []
    names = {
        var["valueFrom"]["secretKeyRef"]["name"]
        for deployment in by_kind(objs, "Deployment")
        for container in deployment["spec"]["template"]["spec"]["containers"]
        for var in container["env"]
        if "secretKeyRef" in var.get("valueFrom", {})
    }
    assert names == {"mine"}


@pytest.mark.parametrize("component", ["controller", "bridge"])
def test_each_component_logs_in_as_itself_with_its_own_reply_subjects(
    component: str, tmp_path
) -> None:
    objs = render(BUNDLED)
    (container,) = named(objs, "Deployment", f"bellows-{component}")["spec"]["template"]["spec"][
        "containers"
    ]
    env: dict[str, str] = {}
    for var in container["env"]:
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var.get("valueFrom", {}):
            assert var["valueFrom"]["secretKeyRef"]["key"] == f"{component}-password"
            env[var["name"]] = "Pfrom-the-secret-0000"
    path = tmp_path / "config.yaml"
    path.write_text(named(objs, "ConfigMap", "bellows-config")["data"]["config.yaml"])
    nats = load_config(path, env=env).nats
    assert nats.user == f"bellows-{component}"
    assert nats.auth_method == "user-password"
    assert nats.inbox_prefix == f"_INBOX_bellows.{component}"


def test_stream_limits_reach_the_config_and_bound_the_disk() -> None:
    limits = {
        "maxBytes": 64 << 20,
        "maxMessages": 5000,
        "maxAgeSeconds": 3600,
        "deadLetterMaxBytes": 8 << 20,
        "deadLetterMaxMessages": 100,
    }
    objs = render({"nats": {"limits": limits}})
    config = yaml.safe_load(named(objs, "ConfigMap", "bellows-config")["data"]["config.yaml"])
    assert {k: config["nats"][k] for k in limits} == limits
    defaults = yaml.safe_load(named(render(), "ConfigMap", "bellows-config")["data"]["config.yaml"])
    settings = NatsSettings()
    assert defaults["nats"]["maxBytes"] == settings.max_bytes == 256 << 20
    assert defaults["nats"]["deadLetterMaxBytes"] == settings.dead_letter_max_bytes
    assert defaults["nats"]["maxMessages"] == settings.max_messages
    with pytest.raises(helm.HelmValuesError, match="maxBytes"):
        render({"nats": {"limits": {**limits, "maxBytes": 0}}})


def test_namespace_of_every_object_is_the_release_namespace() -> None:
    for obj in render(BUNDLED):
        if obj["kind"] not in {"ClusterRole", "ClusterRoleBinding"}:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]["name"]
