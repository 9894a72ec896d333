"""Admission checks the real operators make beyond the CRD schema.

training-operator v1.9 runs a validating webhook for PyTorchJob (name a DNS-1035 label,
replica types Master/Worker, one Master, a container named ``pytorch`` with an image);
mpi-operator v0.8 validates an MPIJob before acting on it (one Launcher, a Worker, images).
Both accept as ``spec.runPolicy.managedBy`` only nothing, their own name or
``kueue.x-k8s.io/multikueue`` (the CRDs' documented values; the schema says only "a string").
The emulated API server refuses such objects at admission with 422, as the webhook does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bellows.emulator.resources import ResourceType
from bellows.emulator.schemas import FieldProblem
from bellows.kube.adapters import kind_named
from bellows.kube.kinds import MULTIKUEUE

__all__ = ["admit"]

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")  # matched whole: "$" passes "x\n"
_RULES = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("Master", "Worker"), "Master", "pytorch"),
    "MPIJob": ("mpiReplicaSpecs", ("Launcher", "Worker"), "Launcher", None),
}


def admit(res: ResourceType, obj: Mapping[str, Any]) -> list[FieldProblem]:
    """Problems the operator's validation finds in ``obj`` (empty for other kinds)."""
    if res.kind not in _RULES:
        return []
    field, allowed, single, container = _RULES[res.kind]
    found: list[FieldProblem] = []
    managers = ("", kind_named(res.kind).manager, MULTIKUEUE)
    run_policy = (obj.get("spec") or {}).get("runPolicy") or {}
    managed_by = run_policy.get("managedBy") if isinstance(run_policy, Mapping) else None
    if managed_by is not None and managed_by not in managers:
        found.append(FieldProblem("spec.runPolicy.managedBy", managed_by, f"one of {managers}"))
    name = obj["metadata"].get("name", "")
    if not isinstance(name, str) or len(name) > 63 or not _DNS1035.fullmatch(name):
        found.append(FieldProblem("metadata.name", name, "a DNS-1035 label (<= 63, [a-z0-9-])"))
    specs = (obj.get("spec") or {}).get(field) or {}
    for rtype, spec in specs.items():
        where = f"spec.{field}.{rtype}"
        if rtype not in allowed:
            found.append(FieldProblem(where, rtype, f"a replica type in {allowed}"))
            continue
        if not isinstance(spec, Mapping):
            found.append(FieldProblem(where, spec, "a replica spec object"))
            continue
        if rtype == single and spec.get("replicas", 1) != 1:
            found.append(FieldProblem(f"{where}.replicas", spec.get("replicas"), "exactly 1"))
        containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            found.append(FieldProblem(f"{where}.template.spec.containers", [], "at least one"))
        if container and not any(
            isinstance(c, Mapping) and c.get("name") == container for c in containers
        ):
            found.append(
                FieldProblem(
                    f"{where}.template.spec.containers",
                    [c.get("name") for c in containers if isinstance(c, Mapping)],
                    f"a container named {container!r}",
                )
            )
        for i, c in enumerate(containers):
            if not isinstance(c, Mapping) or not c.get("image"):
                found.append(
                    FieldProblem(f"{where}.template.spec.containers[{i}].image", None, "an image")
                )
    if "Worker" not in specs:
        found.append(FieldProblem(f"spec.{field}.Worker", None, "a Worker replica spec"))
    if res.kind == "MPIJob" and single not in specs:
        # mpi-operator's ValidateMPIJob: "must have replica type Launcher"
        found.append(FieldProblem(f"spec.{field}.{single}", None, "a Launcher replica spec"))
    return found
