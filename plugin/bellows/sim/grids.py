"""A sweep's GRID: checked against its JSON Schema, then crossed into cells.

A GRID (``docs/simulator.md``, *Sweeps*) names traces (generated with the parameters of
``bellows workload generate``, or imported files), cluster sizes, seeds, named policies and
any other ``simulate`` setting; every value given as a list is crossed with the others. The
document is checked against ``grid.schema.json`` (:mod:`bellows.sim.grid_schema`) before
anything else, and the first problem is a :class:`SpecError` naming the key
(``traces[0].generate.minutes``), its value and what would be valid. Numbers then go through
:mod:`bellows.inputs` with the schema's own bounds, and every policy's settings through
:class:`AutoscalerConfig`, so that a GRID that passes here cannot fail for its parameters once
cells run.

Each :class:`Cell` is one simulation: one trace, one cluster, one size, one seed (generated
traces only: the simulator itself draws nothing), one policy with its settings, one horizon.
Its name, the folder its results go to, is built from what the GRID wrote: the trace, the
seed, the size, the policy, and ``key=value`` for each setting written as a list, so that
adding a value to a list leaves the other cells' names, and results, where they were.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, TypedDict

from bellows.autoscaler import AutoscalerConfig, Policy
from bellows.inputs import SpecError, check_float, check_int
from bellows.scaling import (
    ClusterProfile,
    cluster_profile_to_json,
    default_cluster,
    load_cluster_profile,
)
from bellows.sim.grid_schema import bounds, check, schema
from bellows.sim.metrics import settings_summary
from bellows.sim.workloads.generating import (
    DEFAULT_LOAD_HIGH,
    BatchChoice,
    Pattern,
    WorkloadSpec,
)

__all__ = [
    "GENERATE_KEYS",
    "MAX_CELLS",
    "PARAM_COLUMNS",
    "REFERENCES",
    "REFERENCE_DELTA_MIN",
    "SETTING_KEYS",
    "SWEPT_REFERENCES",
    "Cell",
    "ClusterChoice",
    "Grid",
    "Switches",
    "TraceChoice",
    "read_grid",
    "reference_of",
    "run_summary",
    "schema",
    "settings_config",
    "simulator_switches",
]

MAX_CELLS: Final = 100_000
"""Most cells one GRID may cross into (checked before any cell is built)."""

SETTING_KEYS: Final = (
    "mode", "policy", "queue", "delta_min", "early_share", "restart_cost_s", "hysteresis",
    "backfill", "efficiency",
)  # fmt: skip
"""Autoscaler settings a GRID sets for every policy, or a policy for itself (and
``efficiency``: the simulator charges statistical efficiency, :func:`bellows.sim.run`)."""

SWEPT_REFERENCES: Final = ("pollux", "tiresias")
"""The references a GRID's policy may name (its clusters have one GPU type; the schema's)."""

REFERENCES: Final = (*SWEPT_REFERENCES, "gavel")
"""The ``policy`` values that name a reference to compare with, as ``bellows simulate
--policy pollux|tiresias|gavel`` does: the simulator's reimplementation of that scheduler
decides, on the cluster's nodes, every ``delta_min`` (default :data:`REFERENCE_DELTA_MIN`);
``gavel`` needs a cluster of several GPU types (:mod:`bellows.sim.gavel`)."""

REFERENCE_DELTA_MIN: Final = 1.0
"""Minutes between a reference's rounds when ``delta_min`` is not given (its 60 s)."""

GENERATE_KEYS: Final = (
    "pattern", "minutes", "categories", "period_min", "baseline_batch", "load_high"
)  # fmt: skip
"""Parameters of a generated trace (``bellows workload generate``), less the size and seed."""

_KINDS: Final = ("generate", "itp", "pollux", "file")
_NAME: Final = re.compile(r"[^A-Za-z0-9_.+-]")


def _number(where: str, name: str, value: object) -> float:
    b = bounds(name)
    return check_float(where, value, minimum=b["minimum"], maximum=b["maximum"],
                       open_min=bool(b["open"]))  # fmt: skip


def _integer(where: str, name: str, value: object) -> int:
    b = bounds(name)
    return check_int(where, value, minimum=int(b["minimum"]), maximum=int(b["maximum"]))


# ---------------------------------------------------------------- what a GRID expands into
@dataclass(frozen=True)
class TraceChoice:
    """One trace of the GRID (after crossing its generate lists): generated from
    ``params`` (a seed and a size per cell), or read from ``path`` (``kind`` itp, pollux,
    file: a JSON Lines trace). ``tags`` are the generate parameters written as lists."""

    name: str
    kind: str
    params: tuple[tuple[str, Any], ...] = ()
    path: Path | None = None
    first: int | None = None
    gpus: tuple[int, ...] | None = None
    tags: tuple[tuple[str, Any], ...] = ()

    @property
    def generated(self) -> bool:
        return self.kind == "generate"

    def workload(self, gpus: int) -> WorkloadSpec:
        """The generator's spec on a cluster of ``gpus`` (rates scale with the cluster)."""
        p = dict(self.params)
        return WorkloadSpec(
            Pattern(p["pattern"]), p["minutes"], tuple(p["categories"]), gpus,
            baseline_batch=BatchChoice(p["baseline_batch"]), period_min=p["period_min"],
            load_high=p["load_high"],
        )  # fmt: skip


@dataclass(frozen=True)
class ClusterChoice:
    """A cluster profile: the default (Pollux T4) or a file; ``digest`` names its content."""

    name: str
    profile: ClusterProfile = field(compare=False)
    digest: str
    path: Path | None = None


@dataclass(frozen=True)
class Cell:
    """One simulation of the sweep. ``settings`` holds the GRID's autoscaler settings for
    it (keys of :data:`SETTING_KEYS`, as written: ``delta_min`` in minutes); the rest are
    each mode's defaults, as in ``bellows simulate``."""

    name: str
    trace: TraceChoice
    seed: int | None
    gpus: int
    policy: str
    settings: tuple[tuple[str, Any], ...]
    horizon_min: float | None
    cluster: ClusterChoice

    def config(self) -> AutoscalerConfig:
        return settings_config(dict(self.settings))

    def params(self) -> dict[str, Any]:
        """The cell's parameters, as ``sweep.csv`` shows them (settings in effect)."""
        config = self.config()
        reference = reference_of(dict(self.settings))
        p = dict(self.trace.params)
        return {
            "trace": self.trace.name,
            "source": self.trace.kind,
            "path": "" if self.trace.path is None else str(self.trace.path),
            **{k: p.get(k) for k in GENERATE_KEYS},
            "first": self.trace.first,
            "seed": self.seed,
            "gpus": self.gpus,
            "cluster": self.cluster.name,
            "policy": self.policy,
            "mode": reference or config.mode.value,  # as summary.json's mode
            "batch_policy": reference or config.policy.value,
            "queue": config.queue,
            "delta_min": config.delta_s / 60.0,
            "early_share": config.early_share,
            "restart_cost_s": config.restart_s,
            "hysteresis": config.hysteresis,
            "backfill": config.backfill,
            "horizon_min": self.horizon_min,
        }


PARAM_COLUMNS: Final = (
    "trace", "source", "path", *GENERATE_KEYS, "first", "seed", "gpus", "cluster", "policy",
    "mode", "batch_policy", "queue", "delta_min", "early_share", "restart_cost_s",
    "hysteresis", "backfill", "horizon_min",
)  # fmt: skip
"""The parameter columns of ``sweep.csv``, in order (:meth:`Cell.params`)."""


def reference_of(settings: Mapping[str, Any]) -> str | None:
    """The reference (:data:`REFERENCES`) the settings' ``policy`` names, else ``None``."""
    policy = settings.get("policy")
    return policy if policy in REFERENCES else None


# What a reference takes, as `simulate --policy pollux|tiresias` does: a key at one value
# only (a queue, Bellows mode, no early trigger), a key at any value, nothing else
_REFERENCE_ONLY: Final = {"mode": "bellows", "queue": True, "early_share": None}
_REFERENCE_TAKES: Final = frozenset(
    {"policy", "delta_min", "restart_cost_s", "efficiency", "objective", "restart_growth"}
)
_REFERENCE_WORDS: Final = {"mode": "'bellows'", "queue": "true", "early_share": "null (off)"}


def _check_reference(reference: str, settings: Mapping[str, Any]) -> None:
    """:class:`SpecError` for the first setting ``reference`` does not take (the key, its
    value, and what the reference does take)."""
    takes = (
        f"the {reference.title()} reference keeps a queue, rounds every delta_min (default "
        f"{REFERENCE_DELTA_MIN:g}) and places jobs on nodes; it takes delta_min, restart_cost_s "
        "and efficiency (mode 'bellows', queue true, early_share null), nothing else"
    )
    for key, value in settings.items():
        if key == "objective" and reference == "gavel" and value != "speedup":
            raise SpecError(key, value, "'speedup' or none with policy gavel (Gavel maximises "
                            "the sum of normalised throughputs)")  # fmt: skip
        if key in _REFERENCE_TAKES:
            continue
        if key in _REFERENCE_ONLY:
            only = _REFERENCE_ONLY[key]
            if value is only or (isinstance(value, str) and value == only):
                continue
            valid = f"{_REFERENCE_WORDS[key]} with policy {reference} ({takes})"
        else:
            valid = f"no {key} with policy {reference} ({takes})"
        raise SpecError(key, value, valid)


class Switches(TypedDict):
    """Keyword arguments of :func:`bellows.sim.run` that a policy decides."""

    nodes: bool
    pollux: bool
    tiresias: bool
    gavel: bool


def simulator_switches(policy: str, *, nodes: bool = False) -> Switches:
    """The switches of :func:`bellows.sim.run` for ``policy`` (a GRID's, or ``simulate
    --policy``): a reference runs its own policy, on the cluster's nodes; another policy on
    nodes only when ``nodes`` (``simulate --placement nodes``)."""
    reference = policy if policy in REFERENCES else None
    return Switches(nodes=nodes or reference is not None, pollux=reference == "pollux",
                    tiresias=reference == "tiresias", gavel=reference == "gavel")  # fmt: skip


def run_summary(
    summary: Mapping[str, Any], config: AutoscalerConfig, policy: str
) -> dict[str, Any]:
    """``summary.json`` as ``bellows simulate`` writes it (a sweep's cells the same): the
    run's ``summary``, its settings, and a reference's name as its ``policy``."""
    out = dict(summary) | settings_summary(config)
    if policy in REFERENCES:
        out["policy"] = policy
    return out


def settings_config(settings: Mapping[str, Any]) -> AutoscalerConfig:
    """The autoscaler config of GRID settings, as ``bellows simulate`` builds it from flags:
    each mode's defaults (``mode: paper`` is ``--paper``), then what was given. A reference
    (``policy: pollux|tiresias``) is the elastic core's settings, rounds every
    :data:`REFERENCE_DELTA_MIN` unless ``delta_min`` says otherwise; a setting it does not
    take is a :class:`SpecError` naming it."""
    reference = reference_of(settings)
    if reference is not None:
        _check_reference(reference, settings)
    policy = Policy.ELASTIC if reference else Policy(settings.get("policy", Policy.ELASTIC))
    given: dict[str, Any] = {"policy": policy}
    if "early_share" in settings or reference is not None:  # a reference has no early round
        given["early_share"] = settings.get("early_share")
    keys = (
        "queue", "hysteresis", "backfill", "min_runtime_s", "node_counts", "objective",
        "restart_growth", "remaining_exponent",
    )  # fmt: skip
    for key in keys:
        if key in settings:
            given[key] = settings[key]
    if "restart_cost_s" in settings:  # the GRID key (and flag) of the default restart_s
        given["restart_s"] = settings["restart_cost_s"]
    if "delta_min" in settings:
        given["delta_s"] = settings["delta_min"] * 60.0
    elif reference is not None:
        given["delta_s"] = REFERENCE_DELTA_MIN * 60.0
    paper = settings.get("mode", "bellows") == "paper"
    return AutoscalerConfig.paper(**given) if paper else AutoscalerConfig(**given)


@dataclass(frozen=True)
class Grid:
    """The cells of a GRID, in its order; ``swept`` names the parameters written as lists."""

    cells: tuple[Cell, ...]
    swept: tuple[str, ...]


def _as_list(value: object) -> tuple[list[Any], bool]:
    """``(values, written as a list)``."""
    return (list(value), True) if isinstance(value, list) else ([value], False)


def _categories(value: object) -> tuple[list[Any], bool]:
    """``categories`` is a list itself: a list of lists crosses."""
    if isinstance(value, list) and value and isinstance(value[0], list):
        return list(value), True
    return [value], False


def _tag(key: str, value: object) -> str:
    if isinstance(value, bool):
        text = "on" if value else "off"
    elif isinstance(value, float):
        text = f"{value:g}"
    elif isinstance(value, list):
        text = "+".join(str(v) for v in value)
    else:
        text = str(value)
    return f"{key}={_NAME.sub('_', text)}"


def _file(base: Path, where: str, text: str) -> Path:
    path = (base / Path(text).expanduser()).resolve()
    if not path.is_file():
        raise SpecError(where, text, f"an existing file (relative to {base})")
    return path


def _stem(path: Path) -> str:
    return _NAME.sub("_", path.stem)[:40] or "trace"


_GENERATE_DEFAULTS: Final = {  # those of bellows workload generate
    "categories": [1, 2, 3, 4],
    "period_min": next(f.default for f in fields(WorkloadSpec) if f.name == "period_min"),
    "baseline_batch": BatchChoice.RANDOM.value,
    "load_high": DEFAULT_LOAD_HIGH,
}


def _generated(index: int, entry: Mapping[str, Any]) -> Iterator[TraceChoice]:
    where = f"traces[{index}].generate"
    gen = entry["generate"]
    choices: list[tuple[str, list[Any], bool]] = []
    defaults = _GENERATE_DEFAULTS
    for key in GENERATE_KEYS:
        raw = gen.get(key, defaults.get(key))
        values, listed = _categories(raw) if key == "categories" else _as_list(raw)
        choices.append((key, values, listed))
    base = entry.get("name") or (gen["pattern"] if isinstance(gen["pattern"], str) else "gen")
    for combo in itertools.product(*(values for _, values, _ in choices)):
        params = dict(zip(GENERATE_KEYS, combo, strict=True))
        for key in ("minutes", "period_min"):
            params[key] = _number(f"{where}.{key}", "minutes", params[key])
        params["load_high"] = _number(f"{where}.load_high", "load_high", params["load_high"])
        params["categories"] = [
            check_int(f"{where}.categories", c, minimum=1, maximum=4) for c in params["categories"]
        ]
        tags = tuple((k, params[k]) for k, _, listed in choices if listed)
        name = "-".join([base, *(_tag(k, v) for k, v in tags)])
        yield TraceChoice(name, "generate", tuple(params.items()), tags=tags)


def _traces(document: Mapping[str, Any], base: Path) -> list[TraceChoice]:
    out: list[TraceChoice] = []
    for index, entry in enumerate(document["traces"]):
        first = entry.get("first")
        first = None if first is None else _integer(f"traces[{index}].first", "first", first)
        gpus = None
        if "gpus" in entry:
            listed, _ = _as_list(entry["gpus"])
            gpus = tuple(_integer(f"traces[{index}].gpus", "gpus", g) for g in listed)
        if "generate" in entry:
            made = [
                TraceChoice(t.name, t.kind, t.params, first=first, gpus=gpus, tags=t.tags)
                for t in _generated(index, entry)
            ]
        else:
            kind = next(k for k in _KINDS if k in entry)
            path = _file(base, f"traces[{index}].{kind}", entry[kind])
            name = entry.get("name") or (_stem(path) if kind == "file" else f"{kind}-{_stem(path)}")
            made = [TraceChoice(name, kind, path=path, first=first, gpus=gpus)]
        out.extend(made)
    seen: dict[str, int] = {}
    for trace in out:
        if trace.name in seen:
            raise SpecError(
                "traces.name", trace.name, "a name given to one trace only (set 'name' on each)"
            )
        seen[trace.name] = 1
    return out


def _clusters(document: Mapping[str, Any], base: Path) -> tuple[list[ClusterChoice], bool]:
    if "cluster" not in document:
        profile = default_cluster()
        return [ClusterChoice("default", profile, _digest(profile))], False
    paths, listed = _as_list(document["cluster"])
    out = []
    for text in paths:
        path = _file(base, "cluster", text)
        profile = load_cluster_profile(path)
        out.append(ClusterChoice(_stem(path), profile, _digest(profile), path))
    if len({c.name for c in out}) != len(out):
        raise SpecError("cluster", paths, "files with different names")
    return out, listed


def _digest(profile: ClusterProfile) -> str:
    text = json.dumps(cluster_profile_to_json(profile), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_SETTING_BOUNDS: Final = {"delta_min": "delta_min", "restart_cost_s": "restart_cost_s",
                          "hysteresis": "hysteresis"}  # fmt: skip


def _setting(where: str, key: str, value: Any) -> Any:
    """One setting's value through :mod:`bellows.inputs` (the schema has checked its type)."""
    if key in _SETTING_BOUNDS:
        return _number(where, _SETTING_BOUNDS[key], value)
    if key == "early_share" and value is not None:
        return check_float(where, value, minimum=0.0, maximum=1.0)
    return value


Settings = tuple[tuple[str, Any], ...]


@dataclass(frozen=True)
class _PolicyChoice:
    """A named policy: each crossing of its settings, and the keys written as lists."""

    name: str
    combos: tuple[Settings, ...]
    listed: tuple[str, ...]


def _policy_cells(document: Mapping[str, Any]) -> list[_PolicyChoice]:
    """Each policy with its crossed settings and the keys it crosses (written as lists)."""
    policies = document.get("policies") or {"bellows": {}}
    out = []
    for name, own in policies.items():
        merged = {k: (f"{k}", document[k]) for k in SETTING_KEYS if k in document}
        merged.update({k: (f"policies.{name}.{k}", v) for k, v in own.items()})
        keys: list[str] = []
        lists: list[list[Any]] = []
        listed: list[str] = []
        for key in SETTING_KEYS:
            if key not in merged:
                continue
            where, raw = merged[key]
            values, as_list = _as_list(raw)
            keys.append(key)
            lists.append([_setting(where, key, v) for v in values])
            if as_list:
                listed.append(key)
        combos = tuple(tuple(zip(keys, c, strict=True)) for c in itertools.product(*lists))
        for combo in combos:
            try:
                settings_config(dict(combo))
            except SpecError as err:
                if err.field in merged:  # where the GRID wrote it: here or at the top
                    raise SpecError(merged[err.field][0], err.value, err.valid) from None
                raise err.within(f"policies.{name}") from None
        out.append(_PolicyChoice(str(name), combos, tuple(listed)))
    return out


def _horizons(document: Mapping[str, Any]) -> tuple[list[Any], bool]:
    values, listed = _as_list(document.get("horizon_min"))
    checked = [
        v if v is None or v == "window" else _number("horizon_min", "horizon_min", v)
        for v in values
    ]
    return checked, listed


def _count(
    traces: Sequence[TraceChoice],
    *,
    clusters: int,
    gpus: Sequence[int],
    seeds: int,
    policies: Sequence[_PolicyChoice],
    horizons: int,
) -> int:
    per_trace = sum(len(p.combos) for p in policies) * horizons * clusters
    return sum(len(t.gpus or gpus) * (seeds if t.generated else 1) * per_trace for t in traces)


def read_grid(document: object, *, base: Path) -> Grid:
    """The cells of ``document`` (a parsed GRID), in GRID order; relative paths are read
    from ``base``. :class:`SpecError` names the first bad key, its value and what is valid."""
    check(document)
    assert isinstance(document, dict)  # the schema says so
    if _generate_count(document) > MAX_CELLS:
        raise SpecError("traces", "generate lists", f"at most {MAX_CELLS} traces once crossed")
    traces = _traces(document, base)
    gpus_listed, gpus_as_list = _as_list(document["gpus"]) if "gpus" in document else ([], False)
    gpus = [_integer("gpus", "gpus", g) for g in gpus_listed]
    for index, trace in enumerate(traces):
        if not (trace.gpus or gpus):
            raise SpecError(f"traces[{index}].gpus", None, "a cluster size, here or in 'gpus'")
    seeds_listed, _ = _as_list(document.get("seeds", [1]))
    seeds = [_integer("seeds", "seed", s) for s in seeds_listed]
    clusters, clusters_listed = _clusters(document, base)
    policies = _policy_cells(document)
    horizons, horizons_listed = _horizons(document)
    total = _count(
        traces, clusters=len(clusters), gpus=gpus, seeds=len(seeds), policies=policies,
        horizons=len(horizons),
    )  # fmt: skip
    if total > MAX_CELLS:
        raise SpecError("<grid>", f"{total} cells", f"a grid of at most {MAX_CELLS} cells")
    cells: list[Cell] = []
    for trace, cluster in itertools.product(traces, clusters):
        crossed = itertools.product(trace.gpus or gpus, seeds if trace.generated else [None])
        for (size, seed), policy in itertools.product(crossed, policies):
            cells.extend(
                _cell(
                    trace, cluster=cluster, gpus=size, seed=seed, policy=policy.name,
                    settings=combo, horizon=horizon, tags=policy.listed,
                    horizon_tag=horizons_listed, cluster_tag=clusters_listed,
                )
                for combo, horizon in itertools.product(policy.combos, horizons)
            )  # fmt: skip
    names = [c.name for c in cells]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise SpecError("<grid>", dup, "cells with different names (two traces or policies alike)")
    swept = [k for t in traces for k, _ in t.tags]
    swept += [k for p in policies for k in p.listed]
    if gpus_as_list or any(t.gpus and len(t.gpus) > 1 for t in traces):
        swept.append("gpus")
    if horizons_listed:
        swept.append("horizon_min")
    if clusters_listed:
        swept.append("cluster")
    return Grid(tuple(cells), tuple(dict.fromkeys(swept)))


def _generate_count(document: Mapping[str, Any]) -> int:
    total = 0
    for entry in document["traces"]:
        count = 1
        for key, value in (entry.get("generate") or {}).items():
            if key == "categories":
                count *= len(_categories(value)[0])
            elif isinstance(value, list):
                count *= len(value)
        total += count
    return total


def _cell(
    trace: TraceChoice,
    *,
    cluster: ClusterChoice,
    gpus: int,
    seed: int | None,
    policy: str,
    settings: Settings,
    horizon: Any,
    tags: Sequence[str],
    horizon_tag: bool,
    cluster_tag: bool,
) -> Cell:
    if horizon == "window":
        horizon = dict(trace.params)["minutes"] if trace.generated else None
    parts = [trace.name] + ([f"s{seed}"] if seed is not None else []) + [f"g{gpus}", policy]
    values = dict(settings)
    parts += [_tag(key, values[key]) for key in tags]
    if horizon_tag:
        parts.append(_tag("horizon_min", "all" if horizon is None else horizon))
    if cluster_tag:
        parts.append(_tag("cluster", cluster.name))
    name = "-".join(parts)
    if len(name) > 160:  # folder names stay short enough for every file system
        name = f"{name[:140]}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"
    return Cell(name, trace, seed, gpus, policy, settings, horizon, cluster)
