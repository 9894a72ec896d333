"""A sweep's GRID: checked against its JSON Schema before anything runs, errors naming the key,
its value and what is valid; then crossed into named cells."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bellows.autoscaler import Mode, Policy
from bellows.cli import params
from bellows.cli.main import main
from bellows.inputs import SpecError
from bellows.jobs import MAX_GPUS, MAX_RESTART_S
from bellows.sim.grids import REFERENCES, SWEPT_REFERENCES, read_grid, schema
from bellows.sim.workloads import generating

GEN = {"generate": {"pattern": "bursty", "minutes": 60}}


def _error(document: object, tmp_path: Path) -> SpecError:
    with pytest.raises(SpecError) as caught:
        read_grid(document, base=tmp_path)
    return caught.value


@pytest.mark.parametrize(
    ("document", "field", "value", "valid"),
    [
        ({"traces": [GEN], "gpus": 8, "sedes": [1]}, "sedes", [1], "one of the keys"),
        (
            {"traces": [{"generate": {"pattern": "burst", "minutes": 60}}], "gpus": 8},
            "traces[0].generate.pattern", "burst", "one of 'low', 'high', 'bursty'",
        ),
        (
            {"traces": [{"generate": {"pattern": "low", "minutes": -5}}], "gpus": 8},
            "traces[0].generate.minutes", -5, "a number > 0 and <= 525600",
        ),
        ({"traces": [GEN], "gpus": [8, 0]}, "gpus[1]", 0, "an integer in [1, 65536]"),
        (
            {"traces": [GEN], "gpus": 8, "policies": {"p": {"delta_min": "x"}}},
            "policies.p.delta_min", "x", "a number in [0, 10080]",
        ),
        (
            {"traces": [GEN], "gpus": 8, "policies": {"p": {"delta_mins": 3}}},
            "policies.p.delta_mins", 3, "one of the keys backfill, delta_min",
        ),
        (
            {"traces": [{"generate": {"minutes": 60}}], "gpus": 8},
            "traces[0].generate.pattern", None, "the key is required",
        ),
        ({"traces": [], "gpus": 8}, "traces", [], "at least 1 item"),
        ({"traces": [GEN], "gpus": 8, "seeds": [1, 1]}, "seeds", [1, 1], "without repeated"),
        ({"traces": [GEN]}, "traces[0].gpus", None, "a cluster size, here or in 'gpus'"),
        (
            {"traces": [GEN], "gpus": 8, "policies": {"p": {"early_share": 1.5}}},
            "policies.p.early_share", 1.5, "a share in [0, 1] (0: off)",
        ),
        ({"traces": [{"itp": "missing.csv"}], "gpus": 8}, "traces[0].itp", "missing.csv",
         "an existing file"),
        ([1, 2], "<grid>", [1, 2], "an object"),
        # a reference (simulate --policy pollux|tiresias) takes what simulate lets it take
        ({"traces": [GEN], "gpus": 8, "policy": "polux"}, "policy", "polux",
         "one of 'elastic', 'baseline', 'pollux', 'tiresias'"),
        ({"traces": [GEN], "gpus": 8, "policies": {"p": {"policy": "pollux", "mode": "paper"}}},
         "policies.p.mode", "paper", "'bellows' with policy pollux"),
        ({"traces": [GEN], "gpus": 8, "policies": {"p": {"policy": "pollux", "queue": False}}},
         "policies.p.queue", False, "true with policy pollux"),
        ({"traces": [GEN], "gpus": 8, "policies": {"t": {"policy": "tiresias", "hysteresis": 2}}},
         "policies.t.hysteresis", 2, "no hysteresis with policy tiresias"),
        ({"traces": [GEN], "gpus": 8, "backfill": True, "policy": ["elastic", "tiresias"]},
         "backfill", True, "no backfill with policy tiresias"),  # where the GRID wrote it
        ({"traces": [GEN], "gpus": 8, "policies": {"p": {"policy": "pollux", "early_share": 0.5}}},
         "policies.p.early_share", 0.5, "null (off) with policy pollux"),
    ],
)  # fmt: skip
def test_a_bad_grid_names_the_key_the_value_and_what_is_valid(
    tmp_path: Path, document: object, field: str, value: object, valid: str
) -> None:
    error = _error(document, tmp_path)
    assert error.field == field
    assert error.value == value
    assert valid in error.valid, error.valid


def test_the_cli_checks_the_grid_before_running_anything(tmp_path: Path) -> None:
    grid = tmp_path / "grid.yaml"
    grid.write_text("traces:\n  - generate: {pattern: bursty, minutes: 60}\ngpus: [8, -1]\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["sweep", str(grid), "--out", str(out)])
    assert result.exit_code == 1
    assert "gpus[1]=-1 is invalid: expected a cluster size: an integer in [1, 65536]" in (
        result.output
    )
    assert not (out / "cells").exists()


def _bound(name: str) -> dict[str, Any]:
    spec: dict[str, Any] = schema()["$defs"][name]
    return next((s for s in spec.get("anyOf", ()) if "maximum" in s), spec)


@pytest.mark.parametrize(
    ("name", "maximum"),
    [
        ("gpus", MAX_GPUS),
        ("seed", params.MAX_SEED),
        ("minutes", generating.MAX_MINUTES),
        ("load_high", generating.MAX_LOAD_HIGH),
        ("delta_min", params.MAX_DELTA_MIN),
        ("restart_cost_s", MAX_RESTART_S),
        ("hysteresis", params.MAX_HYSTERESIS),
        ("horizon_min", params.MAX_HORIZON_MIN),
    ],
)
def test_the_schema_bounds_are_those_of_the_commands_it_crosses(name: str, maximum: float) -> None:
    assert _bound(name)["maximum"] == maximum


def test_the_schema_choices_are_the_enums() -> None:
    defs = schema()["$defs"]
    assert set(defs["mode"]["enum"]) == {m.value for m in Mode}
    assert set(defs["policy"]["enum"]) == {p.value for p in Policy} | set(SWEPT_REFERENCES)
    assert set(REFERENCES) - set(SWEPT_REFERENCES) == {"gavel"}  # several GPU types only
    assert set(defs["pattern"]["enum"]) == {p.value for p in generating.Pattern}
    assert set(defs["baseline_batch"]["enum"]) == {b.value for b in generating.BatchChoice}


def test_lists_cross_and_name_the_cells(tmp_path: Path) -> None:
    grid = read_grid(
        {
            "traces": [{"generate": {"pattern": "bursty", "minutes": 60, "load_high": [1, 2]}}],
            "gpus": [8, 16],
            "seeds": [1, 2],
            "policies": {"bellows": {"delta_min": [1, 2]}, "paper": {"mode": "paper"}},
        },
        base=tmp_path,
    )
    assert len(grid.cells) == 2 * 2 * 2 * (2 + 1)
    assert grid.swept == ("load_high", "delta_min", "gpus")
    names = [c.name for c in grid.cells]
    assert len(set(names)) == len(names)
    assert "bursty-load_high=2-s1-g16-bellows-delta_min=2" in names
    assert "bursty-load_high=1-s2-g8-paper" in names
    paper = next(c for c in grid.cells if c.policy == "paper")
    assert paper.config().mode is Mode.PAPER
    assert paper.config().delta_s == 600.0
    bellows = next(c for c in grid.cells if c.name.endswith("delta_min=1"))
    assert bellows.config().delta_s == 60.0
