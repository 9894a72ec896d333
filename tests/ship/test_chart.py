"""The Helm chart: lint, render with Helm's engine, validate every object, RBAC, hardening."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.ship import kube_schemas
from tests.ship.chart import CHART, NAMESPACE, by_kind, named, render, render_files

# Value sets that exercise every conditional branch of the templates.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "quickstart": {
        "nats": {"bundled": {"enabled": True}},
        "controller": {"replicas": 1, "podDisruptionBudget": {"enabled": False}},
        "bridge": {"replicas": 1, "podDisruptionBudget": {"enabled": False}},
    },
    "production": {
        "image": {"repository": "registry.example/bellows", "digest": "sha256:" + "a" * 64},
        "imagePullSecrets": [{"name": "pull"}],
        "watchNamespaces": ["team-a", "team-b"],
        "commonLabels": {"cost-center": "ml"},
        "nats": {
            "servers": ["tls://nats-0.nats:4222", "tls://nats-1.nats:4222"],
            "credentials": {"existingSecret": "bellows-nats", "key": "bellows.creds"},
            "tls": {"existingSecret": "bellows-nats-tls", "clientCertificate": True},
        },
        "controller": {
            "capacity": {"gpus": 64},
            "earlyShare": 0.5,
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "tolerations": [{"key": "ml", "operator": "Exists", "effect": "NoSchedule"}],
            "priorityClassName": "system-cluster-critical",
            "serviceAccount": {"annotations": {"iam.example/role": "bellows"}},
        },
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
        "logging": {"format": "console", "level": "debug"},
        "networkPolicy": {
            "metricsFrom": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ],
            "apiServer": {"ports": [6443], "to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}]},
            "nats": {
                "ports": [4222],
                "to": [
                    {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "nats"}}}
                ],
            },
            "extraEgress": [{"ports": [{"port": 3128, "protocol": "TCP"}]}],
        },
    },
    "kueue": {"kueue": {"enabled": True}},
    "kueue-namespaced": {"kueue": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]},
    "trainer": {"trainer": {"enabled": True}},
    "trainer-namespaced": {"trainer": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]},
    "no-leader-election": {
        "networkPolicy": {"enabled": False},
        "leaderElection": {"enabled": False},
        "controller": {"replicas": 1},
        "bridge": {"replicas": 1},
        "rbac": {"create": False},
        "metrics": {"service": {"enabled": False}},
    },
}

# Every (apiGroup, resource) Bellows may touch and the verbs it may use: those
# bellows.kube.client.KubeApi calls (JSON merge patches, never update; the status
# subresource never read apart; Events created, never patched), fewer than KUBEFLOW.md's
# "RBAC a rescaler needs"; leader election needs get/create/update of a Lease.
ALLOWED_VERBS: dict[tuple[str, str], set[str]] = {
    ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "patch"},
    ("kubeflow.org", "mpijobs"): {"get", "list", "watch", "patch"},
    ("batch", "jobs"): {"get", "delete"},
    ("", "events"): {"create"},
    ("", "configmaps"): {"get"},  # with trainer.enabled also the re-creation records (below)
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("", "nodes"): {"list", "watch"},
    ("", "pods"): {"list", "watch"},  # the node view (controller.placement: nodes, default)
    # with kueue.enabled only (docs/kube.md, "Beside Kueue")
    ("kueue.x-k8s.io", "localqueues"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "clusterqueues"): {"get", "list", "watch"},
    ("kueue.x-k8s.io", "resourceflavors"): {"get", "list", "watch"},  # which have a topology
    ("kueue.x-k8s.io", "workloads"): {"get", "list", "watch", "patch"},
    ("", "namespaces"): {"get", "list", "watch"},  # their labels, for namespaceSelector
    # with trainer.enabled only (docs/kube.md, "TrainJob": a resize re-creates the TrainJob)
    # (patch: suspend; delete and create: a resize re-creates it; never update)
    ("trainer.kubeflow.org", "trainjobs"): {"get", "list", "watch", "patch", "create", "delete"},
}
# The re-creation records (trainer.enabled): the verbs KubeApi's list_configmaps,
# get_configmap, write_configmap (create, replace) and delete_configmap use, granted only by
# this Role of the release namespace, where the records live.
RECORDS_ROLE = "bellows-controller-records"
RECORDS_VERBS = {"get", "list", "create", "update", "delete"}


def test_helm_lint_is_clean() -> None:
    report = helm.lint(str(CHART), strict=True, namespace=NAMESPACE)
    assert report["errors"] == []
    # Severity 1 is "info" (e.g. "icon is recommended"); warnings and errors fail.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_object_validates(variant: str) -> None:
    objs = render(VARIANTS[variant])
    assert objs
    for obj in objs:
        kube_schemas.validate(obj)
        assert obj["metadata"]["name"]


def test_default_install_has_every_part() -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in render()}
    for expected in [
        ("Deployment", "bellows-controller"),
        ("Deployment", "bellows-bridge"),
        ("ServiceAccount", "bellows-controller"),
        ("ServiceAccount", "bellows-bridge"),
        ("ConfigMap", "bellows-config"),
        ("Service", "bellows-controller-metrics"),
        ("Service", "bellows-bridge-metrics"),
        ("PodDisruptionBudget", "bellows-controller"),
        ("PodDisruptionBudget", "bellows-bridge"),
        ("Role", "bellows-controller-leader-election"),
        ("ClusterRole", "bellows-controller"),
    ]:
        assert expected in kinds
    assert not any(kind == "ServiceMonitor" for kind, _ in kinds)
    assert ("Deployment", "bellows-nats") not in kinds


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"controler": {"replicas": 1}}, "controler"),
        ({"controller": {"replica": 1}}, "replica"),
        ({"nats": {"tls": {"existingSecret": "x", "caFile": "y"}}}, "caFile"),
        ({"metrics": {"serviceMonitor": {"scrapeInterval": "10s"}}}, "scrapeInterval"),
        ({"podSecurityContext": {"runAsNonroot": True}}, "runAsNonroot"),
        ({"controller": {"policy": "greedy"}}, "policy"),
        ({"controller": {"deltaSeconds": -1}}, "deltaSeconds"),
        ({"controller": {"earlyShare": -0.1}}, "earlyShare"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"watchNamespaces": ["Team_A"]}, "watchNamespaces"),
        ({"nats": {"servers": ["http://nats:4222"]}}, "servers"),
    ],
)
def test_schema_rejects_unknown_keys_and_bad_values(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=message):
        render(values)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"leaderElection": {"enabled": False}}, "controller.replicas=2 needs leaderElection"),
        (
            {"leaderElection": {"enabled": False}, "controller": {"replicas": 1}},
            "bridge.replicas=2 needs leaderElection",
        ),
        ({"nats": {"servers": []}}, "nats.servers is empty"),
        (
            {"leaderElection": {"renewDeadlineSeconds": 15}},
            "renewDeadlineSeconds=15 must be less than leaseDurationSeconds=15",
        ),
    ],
)
def test_chart_refuses_unsafe_combinations(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render(values)


def _rules(objs: list[dict[str, Any]], kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [(o["metadata"]["name"], rule) for o in by_kind(objs, kind) for rule in o["rules"]]


@pytest.mark.parametrize(
    "variant",
    [
        "defaults",
        "production",
        "quickstart",
        "kueue",
        "kueue-namespaced",
        "trainer",
        "trainer-namespaced",
    ],
)
def test_rbac_grants_only_the_listed_verbs(variant: str) -> None:
    objs = render(VARIANTS[variant])
    rules = _rules(objs, "ClusterRole") + _rules(objs, "Role")
    assert rules
    for role, rule in rules:
        assert "nonResourceURLs" not in rule, role
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                allowed = ALLOWED_VERBS.get((group, resource))
                if (group, resource) == ("", "configmaps") and role == RECORDS_ROLE:
                    allowed = RECORDS_VERBS
                assert allowed is not None, f"{role} grants {group}/{resource}"
                assert set(rule["verbs"]) <= allowed, f"{role}: {group}/{resource} {rule}"
                assert "*" not in rule["verbs"]


def test_bridge_only_reads_jobs() -> None:
    for variant in ("defaults", "production"):
        objs = render(VARIANTS[variant])
        for role in by_kind(objs, "ClusterRole") + by_kind(objs, "Role"):
            if role["metadata"]["name"].startswith("bellows-bridge") and not role["metadata"][
                "name"
            ].endswith("leader-election"):
                for rule in role["rules"]:
                    assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_leases_are_namespaced_and_limited_to_own_name() -> None:
    objs = render()
    for name, rule in _rules(objs, "ClusterRole"):
        assert "leases" not in rule["resources"], name
    for component in ("controller", "bridge"):
        role = named(objs, "Role", f"bellows-{component}-leader-election")
        assert role["metadata"]["namespace"] == NAMESPACE
        for rule in role["rules"]:
            if "leases" in rule["resources"] and set(rule["verbs"]) & {"get", "update"}:
                assert rule["resourceNames"] == [f"bellows-{component}"]


def test_watch_namespaces_makes_job_rbac_namespaced() -> None:
    objs = render(VARIANTS["production"])  # watches team-a and team-b, fixed GPU count
    # the node view (controller.placement: nodes, the default) reads the nodes: the one
    # cluster-scoped grant; without it, none
    (nodes,) = by_kind(objs, "ClusterRole")
    assert nodes["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
    ]
    production = copy.deepcopy(VARIANTS["production"])
    production.setdefault("controller", {})["placement"] = "pack"
    packed = render(production)
    assert by_kind(packed, "ClusterRole") == []
    assert by_kind(packed, "ClusterRoleBinding") == []
    job_roles = [
        r for r in by_kind(objs, "Role") if not r["metadata"]["name"].endswith("leader-election")
    ]
    assert sorted((r["metadata"]["name"], r["metadata"]["namespace"]) for r in job_roles) == [
        ("bellows-bridge", "team-a"),
        ("bellows-bridge", "team-b"),
        ("bellows-controller", "team-a"),
        ("bellows-controller", "team-b"),
    ]
    bindings = by_kind(objs, "RoleBinding")
    for binding in bindings:
        (subject,) = binding["subjects"]
        assert subject["namespace"] == NAMESPACE


def test_node_permission_only_when_capacity_is_read_from_nodes() -> None:
    names = {o["metadata"]["name"] for o in by_kind(render(), "ClusterRole")}
    assert "bellows-controller-nodes" in names
    fixed = render({"controller": {"capacity": {"gpus": 16}, "placement": "pack"}})
    assert "bellows-controller-nodes" not in {o["metadata"]["name"] for o in fixed}


@pytest.mark.parametrize("namespaces", [[], ["team-a", "team-b"]])
def test_pods_are_read_only_with_the_node_view_and_only_where_jobs_are(
    namespaces: list[str],
) -> None:
    def pod_rules(values: dict[str, Any]) -> dict[tuple[str, str], Any]:
        objs = render({"watchNamespaces": namespaces, **values})
        return {
            (role["kind"], role["metadata"].get("namespace", "")): rule
            for role in [*by_kind(objs, "ClusterRole"), *by_kind(objs, "Role")]
            for rule in role["rules"]
            if "pods" in rule["resources"]
        }

    for placement in ("pack", "kueue-topology", "none"):
        assert pod_rules({"controller": {"placement": placement}}) == {}
    for gpus in (0, 16):  # nodes are read for the view with a fixed capacity too
        values = {"controller": {"placement": "nodes", "capacity": {"gpus": gpus}}}
        rules = pod_rules(values)
        where = [("Role", ns) for ns in namespaces] or [("ClusterRole", "")]
        assert sorted(rules) == sorted(where)
        for rule in rules.values():
            assert rule == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}
        names = {o["metadata"]["name"] for o in by_kind(render(values), "ClusterRole")}
        assert "bellows-controller-nodes" in names


def _kueue_grants(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], set[str]]:
    """(kind, namespace, resource) -> verbs of every kueue.x-k8s.io rule, by role, and of
    the namespaces (read beside Kueue only)."""
    out: dict[tuple[str, str, str], set[str]] = {}
    for kind in ("ClusterRole", "Role"):
        for role in by_kind(objs, kind):
            for rule in role["rules"]:
                if "kueue.x-k8s.io" not in rule["apiGroups"] and rule["resources"] != [
                    "namespaces"
                ]:
                    continue
                for resource in rule["resources"]:
                    key = (
                        role["metadata"]["name"],
                        role["metadata"].get("namespace", ""),
                        resource,
                    )
                    out.setdefault(key, set()).update(rule["verbs"])
    return out


def test_kueue_permissions_only_when_kueue_is_enabled() -> None:
    read, patch = {"get", "list", "watch"}, {"get", "list", "watch", "patch"}
    for variant in ("defaults", "production", "quickstart"):
        objs = render(VARIANTS[variant])
        assert _kueue_grants(objs) == {}, variant
        assert _config(VARIANTS[variant])["controller"]["kueue"] == {"enabled": False}
    # every namespace: the controller's ClusterRole grants all three, the bridge none
    objs = render(VARIANTS["kueue"])
    assert _kueue_grants(objs) == {
        ("bellows-controller", "", "localqueues"): read,
        ("bellows-controller", "", "clusterqueues"): read,
        ("bellows-controller", "", "resourceflavors"): read,
        ("bellows-controller", "", "workloads"): patch,
        ("bellows-controller", "", "namespaces"): read,
    }
    assert _config(VARIANTS["kueue"])["controller"]["kueue"] == {"enabled": True}
    # watched namespaces: LocalQueues and Workloads per namespace, the cluster-scoped
    # ClusterQueues from a ClusterRole of their own, bound to the controller only
    objs = render(VARIANTS["kueue-namespaced"])
    assert _kueue_grants(objs) == {
        ("bellows-controller", "team-a", "localqueues"): read,
        ("bellows-controller", "team-a", "workloads"): patch,
        ("bellows-controller", "team-b", "localqueues"): read,
        ("bellows-controller", "team-b", "workloads"): patch,
        ("bellows-controller-kueue", "", "clusterqueues"): read,
        ("bellows-controller-kueue", "", "resourceflavors"): read,
        ("bellows-controller-kueue", "", "namespaces"): read,
    }
    (binding,) = [
        b
        for b in by_kind(objs, "ClusterRoleBinding")
        if b["roleRef"]["name"] == "bellows-controller-kueue"
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "bellows-controller", "namespace": NAMESPACE}
    ]
    # no RBAC objects at all when the operator grants them
    assert _kueue_grants(render({**VARIANTS["kueue-namespaced"], "rbac": {"create": False}})) == {}
    with pytest.raises(helm.HelmValuesError, match="enabled"):
        render({"kueue": {"enabled": "yes"}})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_pod_is_hardened(variant: str) -> None:
    for deployment in by_kind(render(VARIANTS[variant]), "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        name = deployment["metadata"]["name"]
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert not pod.get("hostNetwork"), name
        assert not pod.get("hostPID"), name
        assert all("hostPath" not in v for v in pod.get("volumes", [])), name
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["privileged"] is False, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name
            assert container["resources"]["limits"]["memory"], name


def test_deployments_run_the_bellows_subcommands_on_the_mounted_config() -> None:
    objs = render()
    config_map = named(objs, "ConfigMap", "bellows-config")
    for component in ("controller", "bridge"):
        pod = named(objs, "Deployment", f"bellows-{component}")["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"][0] == component
        config_path = container["args"][container["args"].index("--config") + 1]
        mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
        assert config_path == f"{mount['mountPath']}/config.yaml"
        volume = next(v for v in pod["volumes"] if v["name"] == "config")
        assert volume["configMap"]["name"] == config_map["metadata"]["name"]
        assert container["image"] == "bellows:0.1.0"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"metrics": 9090}


def _checksums(values: dict[str, Any]) -> dict[str, str]:
    objs = render(values)
    return {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for d in by_kind(objs, "Deployment")
        if "checksum/config" in d["spec"]["template"]["metadata"].get("annotations", {})
    }


def test_config_change_rolls_the_pods_and_other_changes_do_not() -> None:
    base = _checksums({})
    assert set(base) == {"bellows-controller", "bellows-bridge"}
    changed = _checksums({"controller": {"deltaSeconds": 60}})
    assert all(changed[name] != base[name] for name in base)
    unrelated = _checksums({"controller": {"resources": {"limits": {"memory": "2Gi"}}}})
    assert unrelated == base


def _config(values: dict[str, Any]) -> dict[str, Any]:
    config_map = named(render(values), "ConfigMap", "bellows-config")
    parsed: dict[str, Any] = yaml.safe_load(config_map["data"]["config.yaml"])
    return parsed


def test_config_file_carries_the_values() -> None:
    config = _config(VARIANTS["production"])
    assert config["nats"]["servers"] == VARIANTS["production"]["nats"]["servers"]
    # each component's own file is mounted under the one name the shared file gives
    assert config["nats"]["credentialsFile"] == "/etc/bellows/nats-credentials/nats.creds"
    assert config["namespaces"] == ["team-a", "team-b"]
    assert config["controller"]["capacity"]["gpus"] == 64
    assert config["controller"]["earlyShare"] == 0.5
    assert config["leaderElection"]["namespace"] == NAMESPACE
    assert config["logging"] == {"format": "console", "level": "debug"}
    assert config["nats"]["tls"] == {
        "caFile": "/etc/bellows/nats-tls/ca.crt",
        "certFile": "/etc/bellows/nats-tls/tls.crt",
        "keyFile": "/etc/bellows/nats-tls/tls.key",
    }
    bundled = _config(VARIANTS["quickstart"])
    assert bundled["nats"]["servers"] == [f"nats://bellows-nats.{NAMESPACE}.svc:4222"]
    assert "credentialsFile" not in bundled["nats"]


def test_nats_credentials_come_from_a_secret_and_never_the_config_map() -> None:
    objs = render(VARIANTS["production"])
    assert by_kind(objs, "Secret") == []
    text = json.dumps(named(objs, "ConfigMap", "bellows-config"))
    assert "bellows-nats" not in text  # the Secret's name, let alone its content
    for component in ("controller", "bridge"):
        pod = named(objs, "Deployment", f"bellows-{component}")["spec"]["template"]["spec"]
        secrets = {v["name"]: v["secret"] for v in pod["volumes"] if "secret" in v}
        assert secrets["nats-credentials"]["secretName"] == "bellows-nats"
        assert secrets["nats-credentials"]["defaultMode"] == 0o400
        assert secrets["nats-credentials"]["items"] == [
            {"key": "bellows.creds", "path": "nats.creds"}
        ]
        assert secrets["nats-tls"]["secretName"] == "bellows-nats-tls"
        mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["nats-credentials"]["readOnly"] is True


def test_digest_pins_the_image() -> None:
    objs = render(VARIANTS["production"])
    image = named(objs, "Deployment", "bellows-controller")["spec"]["template"]["spec"][
        "containers"
    ][0]["image"]
    assert image == "registry.example/bellows@sha256:" + "a" * 64


def test_service_monitor_selects_the_metrics_services() -> None:
    objs = render(VARIANTS["production"])
    for monitor in by_kind(objs, "ServiceMonitor"):
        labels = monitor["spec"]["selector"]["matchLabels"]
        matching = [
            s for s in by_kind(objs, "Service") if labels.items() <= s["metadata"]["labels"].items()
        ]
        assert len(matching) == 1
        assert matching[0]["spec"]["ports"][0]["name"] == monitor["spec"]["endpoints"][0]["port"]
        assert monitor["metadata"]["labels"]["release"] == "prom"


def test_pdbs_and_services_select_their_deployments() -> None:
    objs = render()
    for deployment in by_kind(objs, "Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
        component = labels["app.kubernetes.io/component"]
        pdb = named(objs, "PodDisruptionBudget", f"bellows-{component}")
        assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
        service = named(objs, "Service", f"bellows-{component}-metrics")
        assert service["spec"]["selector"].items() <= labels.items()


def test_notes_name_the_namespaces() -> None:
    notes = render_files(VARIANTS["production"])["NOTES.txt"]
    assert "team-a, team-b" in notes
    assert "every namespace" in render_files()["NOTES.txt"]


def test_cluster_profile_from_calibrate_reaches_the_config() -> None:
    from bellows.scaling import (  # noqa: PLC0415
        ClusterProfile,
        LinkCost,
        cluster_profile_to_json,
        parse_cluster_profile,
    )

    measured = ClusterProfile(LinkCost(1e-4, 1e-9), LinkCost(5e-4, 4e-9), 1.5, 8, "calibrate")
    document = cluster_profile_to_json(measured)
    values = {"controller": {"clusterProfile": document}}
    config = _config(values)
    data = named(render(values), "ConfigMap", "bellows-config")["data"]
    # Mounted next to config.yaml, as JSON, where the config file says.
    path = config["controller"]["clusterProfileFile"]
    assert path == "/etc/bellows/config/cluster-profile.json"
    assert parse_cluster_profile(json.loads(data["cluster-profile.json"])) == measured
    assert "clusterProfileFile" not in _config({})["controller"]
    assert _checksums(values) != _checksums({})
    with pytest.raises(helm.HelmValuesError, match="clusterProfile"):
        render({"controller": {"clusterProfile": {"kind": "JobProfile"}}})


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rendered_config_is_what_the_controller_loads(variant: str, tmp_path: Path) -> None:
    from bellows.service.config import load_config  # noqa: PLC0415

    config_map = named(render(VARIANTS[variant]), "ConfigMap", "bellows-config")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    loaded = load_config(path)
    values = VARIANTS[variant]
    core = loaded.controller.autoscaler_config()  # Bellows mode and its defaults
    assert (core.mode.value, core.delta_s, core.restart_s) == ("bellows", 120.0, 60.0)
    assert loaded.leader_election.namespace == NAMESPACE
    assert list(loaded.namespaces) == values.get("watchNamespaces", [])
    assert loaded.controller.kueue.enabled is values.get("kueue", {}).get("enabled", False)
    if "servers" in values.get("nats", {}):
        assert list(loaded.nats.servers) == values["nats"]["servers"]
        assert str(loaded.nats.credentials_file).endswith("nats.creds")
        assert loaded.nats.tls.enabled


def _controller_pod(values: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = named(render(values), "Deployment", "bellows-controller")["spec"][
        "template"
    ]["spec"]
    return pod


def test_compiled_kernels_persist_on_a_volume_the_cache_reads() -> None:
    pod = _controller_pod({})
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "jax-cache")
    assert env["BELLOWS_JAX_CACHE"] == mount["mountPath"]
    volume = next(v for v in pod["volumes"] if v["name"] == "jax-cache")
    assert volume == {"name": "jax-cache", "emptyDir": {"sizeLimit": "512Mi"}}
    claim = {"persistentVolumeClaim": {"claimName": "bellows-jax"}}
    pod = _controller_pod({"controller": {"compileCache": {"volume": claim}}})
    assert next(v for v in pod["volumes"] if v["name"] == "jax-cache") == {
        "name": "jax-cache",
        **claim,
    }
    # off: no volume, and the cache is off rather than pointed at the read-only root
    pod = _controller_pod({"controller": {"compileCache": {"enabled": False}}})
    (container,) = pod["containers"]
    assert {e["name"]: e.get("value") for e in container["env"]}["BELLOWS_JAX_CACHE"] == "off"
    assert all(v["name"] != "jax-cache" for v in pod["volumes"])
    bridge = named(render({}), "Deployment", "bellows-bridge")["spec"]["template"]["spec"]
    assert all(v["name"] != "jax-cache" for v in bridge["volumes"])


def test_the_controller_runs_the_jax_optimizer_by_default() -> None:
    config = yaml.safe_load(named(render(), "ConfigMap", "bellows-config")["data"]["config.yaml"])
    assert config["controller"]["optimizer"] == "auto"


def test_trainjob_permissions_only_when_the_trainer_is_enabled() -> None:
    def grants(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {
            (role, resource)
            for role, rule in _rules(objs, "ClusterRole") + _rules(objs, "Role")
            for resource in rule["resources"]
            if "trainer.kubeflow.org" in rule["apiGroups"]
            or (resource == "configmaps" and "create" in rule["verbs"])
        }

    assert grants(render()) == set()
    assert grants(render(VARIANTS["trainer"])) == {
        ("bellows-bridge", "trainjobs"),
        ("bellows-controller", "trainjobs"),
        (RECORDS_ROLE, "configmaps"),
    }
    config = next(
        o
        for o in render(VARIANTS["trainer"])
        if o["kind"] == "ConfigMap" and "config.yaml" in o.get("data", {})
    )
    assert (
        "trainer:\n    enabled: true" in config["data"]["config.yaml"]
        or "trainer" in config["data"]["config.yaml"]
    )


@pytest.mark.parametrize("variant", ["trainer", "trainer-namespaced"])
def test_configmap_writes_only_in_the_release_namespace(variant: str) -> None:
    """Issue 35: with trainer.enabled and no watchNamespaces the ClusterRole granted create,
    update and delete on every ConfigMap of the cluster, kube-system's included. The records
    now live in the release namespace, and only a Role there may write ConfigMaps; in the
    managed namespaces the controller only reads (the job profiles)."""
    objs = render(VARIANTS[variant])
    writes = {"create", "update", "patch", "delete", "deletecollection", "list", "watch"}
    granted: dict[tuple[str, str, str], set[str]] = {}
    for kind in ("ClusterRole", "Role"):
        for role in by_kind(objs, kind):
            for rule in role["rules"]:
                if "" in rule["apiGroups"] and "configmaps" in rule["resources"]:
                    where = (kind, role["metadata"]["name"], role["metadata"].get("namespace", ""))
                    granted.setdefault(where, set()).update(rule["verbs"])
    writers = {where for where, verbs in granted.items() if verbs & writes}
    assert writers == {("Role", RECORDS_ROLE, NAMESPACE)}, granted
    assert granted[("Role", RECORDS_ROLE, NAMESPACE)] == RECORDS_VERBS
    assert all(verbs == {"get"} for where, verbs in granted.items() if where not in writers)
    (binding,) = [b for b in by_kind(objs, "RoleBinding") if b["metadata"]["name"] == RECORDS_ROLE]
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": RECORDS_ROLE,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "bellows-controller", "namespace": NAMESPACE}
    ]
    # the controller keeps its records where the Role lets it write them
    assert _config(VARIANTS[variant])["controller"]["trainer"] == {
        "enabled": True,
        "recordsNamespace": NAMESPACE,
    }
    # and without the trainer no ConfigMap is writable at all
    assert not any(
        set(rule["verbs"]) - {"get"}
        for _, rule in _rules(render(), "ClusterRole") + _rules(render(), "Role")
        if "configmaps" in rule["resources"]
    )


def test_the_controller_gets_exactly_the_verbs_it_calls() -> None:
    """Not a verb more than bellows.kube.client.KubeApi uses (issue 35 item 7: update on the
    jobs, the status subresources, batch Jobs' list, Events' patch and events.k8s.io were
    granted and never used): the controller's grants, every role merged, with the trainer."""
    objs = render(VARIANTS["trainer"])
    granted: dict[tuple[str, str], set[str]] = {}
    for kind in ("ClusterRole", "Role"):
        for role in by_kind(objs, kind):
            if not role["metadata"]["name"].startswith("bellows-controller"):
                continue
            for rule in role["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert granted == {
        ("kubeflow.org", "pytorchjobs"): {"get", "list", "watch", "patch"},
        ("kubeflow.org", "mpijobs"): {"get", "list", "watch", "patch"},
        ("batch", "jobs"): {"get", "delete"},
        ("", "configmaps"): {"get", "list", "create", "update", "delete"},  # list…: records
        ("", "events"): {"create"},
        ("", "nodes"): {"list", "watch"},
        ("", "pods"): {"list", "watch"},  # the node view (NodeView, watch_pods)
        ("coordination.k8s.io", "leases"): {"get", "create", "update"},
        ("trainer.kubeflow.org", "trainjobs"): {
            "get",
            "list",
            "watch",
            "patch",
            "create",
            "delete",
        },
    }
