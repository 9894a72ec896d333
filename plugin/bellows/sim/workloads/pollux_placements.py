"""A Pollux model's measured placements as a job profile carries them (issue 36).

The artifact's profile folders (``../shared/data/pollux/profiles/<model>/``) hold step times
measured on several GPUs: ``placements.csv`` (up to 16 GPUs on nodes of 4, each row naming
its GPUs per node) and ``scalability.csv`` (larger placements spread over 6 to 16 nodes).
:func:`pollux_placements` reads them into the rows a profile document's ``placements``
carries (:func:`bellows.scaling.placement_steps.measured_placements`: the placements packed
on the fewest nodes, and the spread ones beyond 16 GPUs), as ``bellows jsa fit --placements
--scalability`` writes them.
"""

from __future__ import annotations

from pathlib import Path

from bellows.jobs import MeasuredPlacement
from bellows.scaling import load_placements, load_scalability
from bellows.scaling.placement_steps import measured_placements

__all__ = ["pollux_placements"]


def pollux_placements(folder: Path, per_node: int = 4) -> tuple[MeasuredPlacement, ...]:
    """The measured placements of the model in ``folder`` (module docstring)."""
    return measured_placements(
        load_placements(folder / "placements.csv"), per_node,
        load_scalability(folder / "scalability.csv"),
    )  # fmt: skip
