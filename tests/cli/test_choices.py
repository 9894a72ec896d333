"""The values spelled out in :mod:`bellows.cli.choices` equal those they copy."""

from __future__ import annotations

from bellows.autoscaler import Policy
from bellows.bus import EventType, JobKind, Outcome
from bellows.cli import choices
from bellows.emulator.crds import CRDS_ENV
from bellows.profiling.workloads import MAX_CLASSES
from bellows.scaling.profiles import MAX_OVERLAP
from bellows.sim import grids
from bellows.sim.reproduce import EXPERIMENTS
from bellows.sim.workloads import generating
from bellows.sim.workloads.categories import CATEGORIES


def test_choices_match_their_enums() -> None:
    assert tuple(p.value for p in Policy) == choices.POLICIES
    assert grids.REFERENCES == choices.REFERENCES
    assert tuple(p.value for p in generating.Pattern) == choices.PATTERNS
    assert tuple(b.value for b in generating.BatchChoice) == choices.BASELINE_BATCHES
    assert tuple(t.value for t in EventType) == choices.EVENT_TYPES
    assert tuple(k.value for k in JobKind) == choices.JOB_KINDS
    assert tuple(o.value for o in Outcome) == choices.OUTCOMES
    assert tuple(e.key for e in EXPERIMENTS) == choices.EXPERIMENT_KEYS


def test_bounds_match_their_sources() -> None:
    assert choices.MAX_WORKLOAD_MINUTES == generating.MAX_MINUTES
    assert choices.MAX_LOAD_HIGH == generating.MAX_LOAD_HIGH
    assert choices.DEFAULT_LOAD_HIGH == generating.DEFAULT_LOAD_HIGH
    assert len(CATEGORIES) == choices.CATEGORY_COUNT
    assert choices.MAX_CLASSES == MAX_CLASSES
    assert choices.MAX_OVERLAP == MAX_OVERLAP
    assert choices.CRDS_ENV == CRDS_ENV
