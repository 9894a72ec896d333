"""Every CEL rule (``x-kubernetes-validations``) of the pinned Trainer, Kueue and Kubeflow v1
CRDs compiles in :mod:`bellows.emulator.cel` and is evaluated by cel-expr-python: on a value
it accepts and on one it rejects (the write fails with the rule's message).

The CRDs are read from the workspace's ``shared/data/crds`` at test time. A rule that a new
pin brings and the table below lacks fails the test, as does a case of a rule no CRD has.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from bellows.emulator.cel import CelError, Rules, compile_rule

Case = tuple[Any, Any]  # (self, oldSelf); oldSelf is None for a rule that does not name it


def _wl(spec: Mapping[str, Any], *conditions: str, **status: Any) -> dict[str, Any]:
    """A Workload with ``spec`` and the conditions named (``status: "True"``)."""
    conds = [{"type": kind, "status": "True"} for kind in conditions]
    return {"spec": dict(spec), "status": {"conditions": conds, **status}}


_PCR = {"group": "scheduling.k8s.io", "kind": "PriorityClass", "name": "high"}
_WPC = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"}
_QR = "QuotaReserved"
_SRC = "scheduling.k8s.io/priorityclass"
_TOL = "self.all(x, "  # the tolerations rules all start so


def _ref(**change: str) -> dict[str, str]:
    return {**_PCR, **change}


def _no_borrowing_without(cohort: str) -> str:
    """ClusterQueue's rule: no ``borrowingLimit`` without a cohort (the field's name)."""
    return (
        f"!has(self.{cohort}) && has(self.resourceGroups) ? self.resourceGroups.all(rg, "
        "rg.flavors.all(f, f.resources.all(r, !has(r.borrowingLimit)))) : true"
    )


def _borrowing_cases(cohort: str) -> tuple[list[Case], list[Case]]:
    def groups(**quota: int) -> list[dict[str, Any]]:
        return [{"flavors": [{"resources": [quota]}]}]

    return (
        [({"resourceGroups": groups(nominalQuota=1)}, None),
         ({cohort: "c", "resourceGroups": groups(borrowingLimit=1)}, None)],
        [({"resourceGroups": groups(borrowingLimit=1)}, None)],
    )  # fmt: skip


# rule text -> (cases it accepts, cases it rejects)
CASES: dict[str, tuple[list[Case], list[Case]]] = {
    # Trainer: TrainJob, TrainingRuntime, ClusterTrainingRuntime
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    "self.replicatedJobs.exists(x, has(x.dependsOn)))": (
        [({"replicatedJobs": [{"name": "a", "dependsOn": [{"name": "b"}]}]}, None),
         ({"startupPolicy": {"startupPolicyOrder": "InOrder"}, "replicatedJobs": [{}]}, None)],
        [({"startupPolicy": {"startupPolicyOrder": "InOrder"},
           "replicatedJobs": [{"name": "a", "dependsOn": []}]}, None)],
    ),
    "!self.exists(c, c == 'node')": ([(["a", "b"], None), ([], None)], [(["a", "node"], None)]),
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
    ".filter(x, x).size() <= 1": (
        [({"torch": {}}, None), ({}, None)], [({"torch": {}, "flux": {}}, None)],
    ),
    "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')": (
        [("", None), ("s3://bucket/model", None)],
        [("bucket/model", None), ("s3://bucket\n", None), ("s3://", None)],
    ),
    "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']": (
        [("kueue.x-k8s.io/multikueue", None)], [("example.com/mine", None)],
    ),
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')": (
        [({"metadata": {"name": "job-1"}}, None)],
        [({"metadata": {"name": "1job"}}, None), ({"metadata": {"name": "job\n"}}, None),
         ({"metadata": {}}, None)],
    ),
    "size(self.metadata.name) <= 63": (
        [({"metadata": {"name": "a" * 63}}, None)], [({"metadata": {"name": "a" * 64}}, None)],
    ),
    "has(self.lastUpdatedTime)": (
        [({"lastUpdatedTime": "2025-01-01T00:00:00Z"}, None)], [({"progress": 1}, None)],
    ),
    "self >= 1": ([(1, None), (8, None)], [(0, None), (-1, None)]),
    "self == oldSelf": (
        [({"numNodes": 2}, {"numNodes": 2}), ("a", "a")],
        [({"numNodes": 3}, {"numNodes": 2}), ("b", "a")],
    ),
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)": (
        [({"templates": [{"metadata": {}}, {"metadata": {"namespace": ""}}]}, None)],
        [({"templates": [{"metadata": {"namespace": "other"}}]}, None)],
    ),
    # Kueue: ClusterQueue
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) &&  "
    "self.borrowWithinCohort.policy != 'Never')": (
        [({"reclaimWithinCohort": "Any", "borrowWithinCohort": {"policy": "LowerPriority"}},
          None),
         ({"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "Never"}}, None)],
        [({"reclaimWithinCohort": "Never", "borrowWithinCohort": {"policy": "LowerPriority"}},
          None)],
    ),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && "
    "self.whenCanPreempt == 'TryNextFlavor')": (
        [({"whenCanBorrow": "Borrow"}, None),
         ({"preference": "BorrowingOverPreemption", "whenCanBorrow": "TryNextFlavor",
           "whenCanPreempt": "TryNextFlavor"}, None)],
        [({"preference": "BorrowingOverPreemption", "whenCanBorrow": "Borrow",
           "whenCanPreempt": "TryNextFlavor"}, None)],
    ),
    _no_borrowing_without("cohort"): _borrowing_cases("cohort"),  # v1beta1
    _no_borrowing_without("cohortName"): _borrowing_cases("cohortName"),  # v1beta2
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": (
        [({"coveredResources": ["cpu", "memory"],
           "flavors": [{"resources": [{"name": "cpu"}, {"name": "memory"}]}]}, None)],
        [({"coveredResources": ["cpu", "memory"], "flavors": [{"resources": [{"name": "cpu"}]}]},
          None)],
    ),
    # Kueue: LocalQueue
    "!has(oldSelf.clusterName) || !has(self.clusterName) || "
    "oldSelf.clusterName == self.clusterName": (
        [({"clusterName": "a"}, {"clusterName": "a"}), ({"clusterName": "b"}, {})],
        [({"clusterName": "b"}, {"clusterName": "a"})],
    ),
    # Kueue: ResourceFlavor
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        [([{"key": "k"}, {"effect": "NoExecute"}], None)], [([{"effect": "Sometimes"}], None)],
    ),
    _TOL + "!has(x.key) ? x.operator == 'Exists' : true)": (
        [([{"operator": "Exists"}, {"key": "k", "operator": "Equal"}], None)],
        [([{"operator": "Equal", "value": "v"}], None), ([{}], None)],
    ),
    _TOL + "!has(x.operator) || x.operator in ['Equal', 'Exists'])": (
        [([{"key": "k"}, {"key": "k", "operator": "Exists"}], None)],
        [([{"key": "k", "operator": "In"}], None)],
    ),
    _TOL + "has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": (
        [([{"operator": "Exists"}, {"key": "k", "value": "v"}], None)],
        [([{"operator": "Exists", "value": "v"}], None)],
    ),
    _TOL + "has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": (
        [([{"key": "k"}, {"effect": "NoExecute", "tolerationSeconds": 30}], None)],
        [([{"effect": "NoSchedule", "tolerationSeconds": 30}], None),
         ([{"tolerationSeconds": 30}], None)],
    ),
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": (
        [([{"key": "k", "effect": "NoSchedule"}], None), ([], None)],
        [([{"key": "k", "effect": "Never"}], None), ([{"key": "k"}], None)],
    ),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": (
        [({}, None), ({"topologyName": "t", "nodeLabels": {"zone": "a"}}, None)],
        [({"topologyName": "t", "nodeLabels": {}}, None), ({"topologyName": "t"}, None)],
    ),
    "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && "
    "(!has(self.nodeLabels) || self.nodeLabels == oldSelf.nodeLabels))": (
        [({"nodeLabels": {"a": "1"}}, {}),
         ({"topologyName": "t", "nodeLabels": {"a": "1"}},
          {"topologyName": "t", "nodeLabels": {"a": "1"}})],
        [({"topologyName": "t", "nodeLabels": {"a": "2"}},
          {"topologyName": "t", "nodeLabels": {"a": "1"}}),
         ({"topologyName": "t"}, {"topologyName": "t", "nodeLabels": {"a": "1"}})],
    ),
    "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && "
    "(!has(self.tolerations) || self.tolerations == oldSelf.tolerations))": (
        [({"tolerations": [{"key": "k"}]}, {}),
         ({"topologyName": "t", "tolerations": [{"key": "k"}]},
          {"topologyName": "t", "tolerations": [{"key": "k"}]})],
        [({"topologyName": "t", "tolerations": [{"key": "j"}]},
          {"topologyName": "t", "tolerations": [{"key": "k"}]}),
         ({"topologyName": "t", "tolerations": [{"key": "k"}]}, {"topologyName": "t"})],
    ),
    "!has(oldSelf.topologyName) || (has(self.topologyName) && "
    "self.topologyName == oldSelf.topologyName)": (
        [({"topologyName": "t"}, {}), ({"topologyName": "t"}, {"topologyName": "t"})],
        [({"topologyName": "u"}, {"topologyName": "t"}), ({}, {"topologyName": "t"})],
    ),
    # Kueue: Workload
    "((has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'Admitted' && c.status == 'True')) && (has(self.status) && "
    "has(self.status.conditions) && self.status.conditions.exists(c, c.type == 'Admitted' && "
    "c.status == 'True')))?((has(oldSelf.spec.maximumExecutionTimeSeconds)?oldSelf.spec"
    ".maximumExecutionTimeSeconds:0) ==  (has(self.spec.maximumExecutionTimeSeconds)?self.spec"
    ".maximumExecutionTimeSeconds:0)):true": (
        [(_wl({"maximumExecutionTimeSeconds": 5}, "Admitted"),
          _wl({"maximumExecutionTimeSeconds": 5}, "Admitted")),
         (_wl({"maximumExecutionTimeSeconds": 6}), _wl({"maximumExecutionTimeSeconds": 5},
                                                       "Admitted"))],
        [(_wl({"maximumExecutionTimeSeconds": 6}, "Admitted"),
          _wl({"maximumExecutionTimeSeconds": 5}, "Admitted")),
         (_wl({}, "Admitted"), _wl({"maximumExecutionTimeSeconds": 5}, "Admitted"))],
    ),
    "((has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True')) && (has(self.status) && "
    "has(self.status.conditions) && self.status.conditions.exists(c, c.type == 'QuotaReserved' "
    "&& c.status == 'True'))) ? ((has(oldSelf.spec.queueName) == has(self.spec.queueName)) && "
    "(!has(oldSelf.spec.queueName) || oldSelf.spec.queueName == self.spec.queueName)) : true": (
        [(_wl({"queueName": "q"}, _QR), _wl({"queueName": "q"}, _QR)),
         (_wl({"queueName": "r"}), _wl({"queueName": "q"}, _QR))],
        [(_wl({"queueName": "r"}, _QR), _wl({"queueName": "q"}, _QR)),
         (_wl({}, _QR), _wl({"queueName": "q"}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(oldSelf.spec"
    ".priorityClassRef) && has(self.spec.priorityClassRef) && self.spec.priorityClassRef.group "
    "== 'scheduling.k8s.io' && self.spec.priorityClassRef.kind == 'PriorityClass') ? oldSelf"
    ".spec.priorityClassRef.name == self.spec.priorityClassRef.name : true": (
        [(_wl({"priorityClassRef": _PCR}), _wl({"priorityClassRef": _PCR}, _QR)),
         (_wl({"priorityClassRef": _ref(name="low")}), _wl({"priorityClassRef": _PCR})),
         (_wl({"priorityClassRef": {**_WPC, "name": "low"}}),
          _wl({"priorityClassRef": _WPC}, _QR))],
        [(_wl({"priorityClassRef": _ref(name="low")}), _wl({"priorityClassRef": _PCR}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(oldSelf.spec"
    ".priorityClassRef) && has(self.spec.priorityClassRef)) ? oldSelf.spec.priorityClassRef"
    ".group == self.spec.priorityClassRef.group : true": (
        [(_wl({"priorityClassRef": _ref(name="x")}), _wl({"priorityClassRef": _PCR}, _QR))],
        [(_wl({"priorityClassRef": _WPC}), _wl({"priorityClassRef": _PCR}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(oldSelf.spec"
    ".priorityClassRef) && has(self.spec.priorityClassRef)) ? oldSelf.spec.priorityClassRef"
    ".kind == self.spec.priorityClassRef.kind : true": (
        [(_wl({"priorityClassRef": _PCR}), _wl({"priorityClassRef": _PCR}, _QR))],
        [(_wl({"priorityClassRef": _ref(kind="Other")}), _wl({"priorityClassRef": _PCR}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(oldSelf.spec"
    ".priorityClassSource) && has(self.spec.priorityClassSource) && (self.spec"
    ".priorityClassSource != 'kueue.x-k8s.io/workloadpriorityclass') && has(oldSelf.spec"
    ".priorityClassName) && has(self.spec.priorityClassName)) ? (oldSelf.spec.priorityClassName "
    "== self.spec.priorityClassName) : true": (
        [(_wl({"priorityClassSource": _SRC, "priorityClassName": "a"}),
          _wl({"priorityClassSource": _SRC, "priorityClassName": "a"}, _QR)),
         (_wl({"priorityClassSource": "kueue.x-k8s.io/workloadpriorityclass",
               "priorityClassName": "b"}),
          _wl({"priorityClassSource": _SRC, "priorityClassName": "a"}, _QR))],
        [(_wl({"priorityClassSource": _SRC, "priorityClassName": "b"}),
          _wl({"priorityClassSource": _SRC, "priorityClassName": "a"}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True') && has(oldSelf.spec"
    ".priorityClassSource) && has(self.spec.priorityClassSource)) ? (oldSelf.spec"
    ".priorityClassSource == self.spec.priorityClassSource) : true": (
        [(_wl({"priorityClassSource": _SRC}), _wl({"priorityClassSource": _SRC}, _QR)),
         (_wl({"priorityClassSource": "other"}), _wl({"priorityClassSource": _SRC}))],
        [(_wl({"priorityClassSource": "other"}), _wl({"priorityClassSource": _SRC}, _QR))],
    ),
    "(has(oldSelf.status) && has(oldSelf.status.conditions) && oldSelf.status.conditions"
    ".exists(c, c.type == 'QuotaReserved' && c.status == 'True')) ? (!has(oldSelf.spec"
    ".priorityClassRef) && !has(self.spec.priorityClassRef)) || (has(oldSelf.spec"
    ".priorityClassRef) && has(self.spec.priorityClassRef)) : true": (
        [(_wl({"priorityClassRef": _PCR}), _wl({"priorityClassRef": _PCR}, _QR)),
         (_wl({}), _wl({}, _QR)), (_wl({"priorityClassRef": _PCR}), _wl({}))],
        [(_wl({"priorityClassRef": _PCR}), _wl({}, _QR)),
         (_wl({}), _wl({"priorityClassRef": _PCR}, _QR))],
    ),
    "(self.group == 'kueue.x-k8s.io') ? self.kind == 'WorkloadPriorityClass' : true": (
        [(_WPC, None), (_PCR, None)], [({**_WPC, "kind": "PriorityClass"}, None)],
    ),
    "(self.group == 'scheduling.k8s.io') ? self.kind == 'PriorityClass' : true": (
        [(_PCR, None), (_WPC, None)], [(_ref(kind="WorkloadPriorityClass"), None)],
    ),
    "has(self.status) && has(self.status.conditions) && self.status.conditions.exists(c, "
    "c.type == 'QuotaReserved' && c.status == 'True') && has(self.status.admission) ? "
    "size(self.spec.podSets) == size(self.status.admission.podSetAssignments) : true": (
        [(_wl({"podSets": [{}, {}]}, _QR, admission={"podSetAssignments": [{}, {}]}), None),
         (_wl({"podSets": [{}, {}]}, admission={"podSetAssignments": [{}]}), None),
         ({"spec": {"podSets": [{}]}}, None)],
        [(_wl({"podSets": [{}, {}]}, _QR, admission={"podSetAssignments": [{}]}), None)],
    ),
    "!has(self.clusterName) || (!has(self.nominatedClusterNames) || "
    "(has(self.nominatedClusterNames) && size(self.nominatedClusterNames) == 0))": (
        [({"clusterName": "a"}, None), ({"clusterName": "a", "nominatedClusterNames": []}, None),
         ({"nominatedClusterNames": ["a", "b"]}, None)],
        [({"clusterName": "a", "nominatedClusterNames": ["b"]}, None)],
    ),
    "!has(self.podCounts.individual) || size(self.podCounts.individual) == self.domainCount": (
        [({"domainCount": 2, "podCounts": {"individual": [1, 2]}}, None),
         ({"domainCount": 2, "podCounts": {"universal": 1}}, None)],
        [({"domainCount": 3, "podCounts": {"individual": [1, 2]}}, None)],
    ),
    "!has(self.priorityClassRef) || has(self.priority)": (
        [({}, None), ({"priorityClassRef": _PCR, "priority": 10}, None)],
        [({"priorityClassRef": _PCR}, None)],
    ),
    "[has(self.universal),has(self.individual)].filter(x,x==true).size() == 1": (
        [({"universal": "a"}, None), ({"individual": {"roots": ["a"]}}, None)],
        [({}, None), ({"universal": "a", "individual": {"roots": ["a"]}}, None)],
    ),
    "has(self.universal) != has(self.individual)": (
        [({"universal": 1}, None), ({"individual": [1]}, None)],
        [({}, None), ({"universal": 1, "individual": [1]}, None)],
    ),
    "has(self.minCount) ? self.minCount <= self.count : true": (
        [({"count": 2}, None), ({"count": 4, "minCount": 2}, None)],
        [({"count": 2, "minCount": 3}, None)],
    ),
    "has(self.priorityClassName) ? has(self.priority) : true": (
        [({}, None), ({"priorityClassName": "p", "priority": 1}, None)],
        [({"priorityClassName": "p"}, None)],
    ),
    "self.slices.all(x, size(x.valuesPerLevel) == size(self.levels))": (
        [({"levels": ["zone", "host"], "slices": [{"valuesPerLevel": [{}, {}]}]}, None)],
        [({"levels": ["zone", "host"], "slices": [{"valuesPerLevel": [{}]}]}, None)],
    ),
    "self.valuesPerLevel.all(x, !has(x.individual) || size(x.individual.roots) == "
    "self.domainCount)": (
        [({"domainCount": 2, "valuesPerLevel": [{"universal": "a"},
                                                 {"individual": {"roots": ["a", "b"]}}]}, None)],
        [({"domainCount": 2, "valuesPerLevel": [{"individual": {"roots": ["a"]}}]}, None)],
    ),
}  # fmt: skip


def _rules_of(schema: Any, place: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(place, entry)`` of every ``x-kubernetes-validations`` entry under ``schema``."""
    if not isinstance(schema, Mapping):
        return
    for entry in schema.get("x-kubernetes-validations") or ():
        yield place, entry
    for key, sub in (schema.get("properties") or {}).items():
        yield from _rules_of(sub, f"{place}.{key}")
    yield from _rules_of(schema.get("additionalProperties"), f"{place}.*")
    yield from _rules_of(schema.get("items"), f"{place}[]")


def _crd_rules(folder: Path) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    """CRD file (relative to ``folder``) -> ``(version and place, entry)`` of all its rules,
    in every version it has."""
    out: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for path in sorted(folder.rglob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        found = out.setdefault(str(path.relative_to(folder)), [])
        for version in crd["spec"]["versions"]:
            schema = version["schema"]["openAPIV3Schema"]
            found.extend(_rules_of(schema, version["name"]))
    return out


@pytest.fixture(scope="module")
def crd_rules(shared_data: Path) -> dict[str, list[tuple[str, Mapping[str, Any]]]]:
    return _crd_rules(shared_data / "crds")


def test_every_rule_of_the_pinned_crds_is_evaluated_by_the_library(
    crd_rules: dict[str, list[tuple[str, Mapping[str, Any]]]],
) -> None:
    problems: list[str] = []
    seen: set[str] = set()
    for name, found in crd_rules.items():
        for place, entry in found:
            text = entry["rule"]
            seen.add(text)
            where = f"{name} {place}: {text!r}"
            try:
                rule = compile_rule(entry)
            except CelError as err:
                problems.append(f"{where} does not compile: {err}")
                continue
            if text not in CASES:
                problems.append(f"{where} has no cases in CASES")
                continue
            accepts, rejects = CASES[text]
            assert accepts, text
            assert rejects, text  # every pinned rule can fail
            for value, old in accepts:
                if not rule.holds(value, old):
                    problems.append(f"{where} rejects {value!r} (old {old!r})")
            for value, old in rejects:
                if rule.holds(value, old):
                    problems.append(f"{where} accepts {value!r} (old {old!r})")
                elif rule.message_for(value, old) != entry["message"]:
                    problems.append(f"{where} says {rule.message_for(value, old)!r}")
    problems.extend(f"CASES has {text!r}, which no CRD has" for text in CASES.keys() - seen)
    assert not problems, "\n".join(problems)


def test_the_trainer_and_kueue_crds_have_rules(
    crd_rules: dict[str, list[tuple[str, Mapping[str, Any]]]],
) -> None:
    counts = {name: len(found) for name, found in crd_rules.items()}
    assert counts["trainer-v2.3.0/trainer.kubeflow.org_trainjobs.yaml"] == 19
    assert counts["kueue-v0.19.2/workloads.yaml"] == 37  # v1beta1 14, v1beta2 23
    assert sum(counts.values()) == 109


def test_a_rule_fails_at_its_place_in_the_trainjob_schema(shared_data: Path) -> None:
    path = shared_data / "crds" / "trainer-v2.3.0" / "trainer.kubeflow.org_trainjobs.yaml"
    crd = yaml.safe_load(path.read_text())
    rules = Rules(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    job = {"spec": {"runtimeRef": {"name": "torch"}, "managedBy": "example.com/mine"}}
    message = (
        "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue"
        " if set"
    )
    assert ("spec.managedBy", "example.com/mine", message) in rules.violations(job, None)


def test_message_expression_words_the_rejection() -> None:
    rule = compile_rule(
        {"rule": "self.size() <= 2", "message": "too long",
         "messageExpression": "'has ' + string(self.size()) + ' items'"}
    )  # fmt: skip
    assert rule.holds([1, 2])
    assert not rule.holds([1, 2, 3])
    assert rule.message_for([1, 2, 3]) == "has 3 items"
    blank = compile_rule({"rule": "false", "message": "m", "messageExpression": "' '"})
    assert blank.message_for(1) == "m"  # a blank messageExpression: the message, as the server
    with pytest.raises(CelError):
        compile_rule({"rule": "true", "messageExpression": "1 + 1"})  # not a string
    with pytest.raises(CelError):
        compile_rule({"rule": "self.size()"})  # not a bool


def test_kubernetes_strings_extension_and_re2() -> None:
    assert compile_rule({"rule": "self.lowerAscii().indexOf('b') == 1"}).holds("AB")
    assert not compile_rule({"rule": "self.matches('(?=a)')"}).holds("a")  # RE2: no lookahead
    assert not compile_rule({"rule": "self.matches('^a$')"}).holds("a\n")  # Go's $
