"""The optimizer: exact GPU allocation (a multiple-choice knapsack DP) and FIFO admission.

Works on value tables only (``values[j, k]``: worth of ``k`` GPUs for job ``j``), so it knows
nothing of jobs, batches or the autoscaler. ``allocate`` is the contract of DESIGN.md §5;
``admit`` is what the autoscaler calls each round (``best_count``: its answer for a lone
candidate). ``method="numpy"`` runs the lean NumPy engine (:mod:`bellows.optimizer.windowed`)
and never imports JAX; the JAX paths import it when they first run. ``*_reference`` are the
plain NumPy float64 DPs the tests check every path against. ``allocate_typed`` gives each job
a GPU type and a count of it, exactly (:mod:`bellows.optimizer.typed`, issue 39).
"""

from bellows.optimizer.admission import admit
from bellows.optimizer.errors import Infeasible
from bellows.optimizer.reference import admit_reference, allocate_reference
from bellows.optimizer.results import Admission
from bellows.optimizer.solving import Method, allocate
from bellows.optimizer.typed import TypedAllocation, allocate_typed, allocate_typed_reference
from bellows.optimizer.windowed import best_count

__all__ = [
    "Admission",
    "Infeasible",
    "Method",
    "TypedAllocation",
    "admit",
    "admit_reference",
    "allocate",
    "allocate_reference",
    "allocate_typed",
    "allocate_typed_reference",
    "best_count",
]
