"""The values and bounds some flags offer, spelled out so that ``--help`` imports no engine.

A command's options are built when its module is imported, and ``bellows <command> --help``
must stay under half a second (``benchmarks/cli_startup.py``). The enums and limits these
copy live in modules that import NumPy, JAX, matplotlib or the NATS client; importing them
would cost seconds. ``tests/cli/test_choices.py`` checks every value here against the one it
copies, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Final

# bellows.autoscaler.Policy
POLICIES: Final = ("elastic", "baseline")
# bellows.sim.grids.REFERENCES (simulate --policy, a GRID's policy)
REFERENCES: Final = ("pollux", "tiresias", "gavel")
# bellows.sim.workloads.generating: Pattern, BatchChoice, MAX_MINUTES, MAX_LOAD_HIGH,
# DEFAULT_LOAD_HIGH; len(bellows.sim.workloads.categories.CATEGORIES)
PATTERNS: Final = ("low", "high", "bursty")
BASELINE_BATCHES: Final = ("max", "min", "random")
MAX_WORKLOAD_MINUTES: Final = 525_600.0
MAX_LOAD_HIGH: Final = 1_000.0
DEFAULT_LOAD_HIGH: Final = 1.0
CATEGORY_COUNT: Final = 4
# bellows.bus: EventType, JobKind, Outcome
EVENT_TYPES: Final = ("job.arrived", "job.completed")
JOB_KINDS: Final = ("PyTorchJob", "MPIJob", "TrainJob")
OUTCOMES: Final = ("Succeeded", "Failed", "Deleted")
# the keys of bellows.sim.reproduce.EXPERIMENTS, in order
EXPERIMENT_KEYS: Final = (
    "fig8a", "fig8b", "fig8c", "fig5a", "fig5b", "fig5c", "fig5d", "fig6a", "fig6b", "fig7a",
    "fig7b", "fig9a", "fig9b",
)  # fmt: skip
# bellows.emulator.crds.CRDS_ENV
CRDS_ENV: Final = "BELLOWS_CRDS"
# bellows.profiling.workloads.MAX_CLASSES; bellows.scaling.profiles.MAX_OVERLAP
MAX_CLASSES: Final = 16_777_216
MAX_OVERLAP: Final = 16.0
