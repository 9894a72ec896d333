"""Which engines one core runs its optimizer and its JSA tables on, passed in by its owner.

Every path gives the same decisions; what differs is speed. ``rent`` holds ``auto``'s choice
between the NumPy engine and JAX and the compile-ahead worker
(:class:`bellows.optimizer.solving.RentRule`): the live controller's runner makes one for
the process, starts its worker (``RentRule.in_background``) and passes it to every pool's
core; a core made without one (the simulator's) makes its own, with no worker. The two
flags choose the compiled C parts where they are built (the DP's layers, the TSF batch
weighing) or their NumPy versions, bit for bit the same (the tests run both).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bellows.optimizer.solving import RentRule

__all__ = ["Engines"]


@dataclass(frozen=True)
class Engines:
    """The optimizer's rent rule (and worker) and the choice of compiled parts."""

    rent: RentRule = field(default_factory=RentRule)
    compiled_layers: bool = True  # the DP's compiled layers (bellows.optimizer._windowed)
    compiled_weighing: bool = True  # the TSF tables' compiled weighing (bellows.scaling._batches)

    def __deepcopy__(self, memo: dict[int, object]) -> Engines:
        """A copy of a core runs on the same engines: the rule and its worker are shared
        (a what-if compiles for the core it copies), never duplicated."""
        return self
