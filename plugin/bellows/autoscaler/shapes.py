"""GPU counts that pack onto nodes (issue 29, item 5): the counts a round may choose.

A job on ``k`` GPUs fits the fewest nodes, ``ceil(k / g)`` on nodes of ``g``, only where the
free GPUs allow; counts that leave odd remainders (3 on nodes of 4, 6 on nodes of 4) leave
holes that the next job of 2 or 4 must straddle, and straddling a node boundary costs the
inter-node link. With ``AutoscalerConfig.node_counts`` a round chooses only *node-shaped*
counts, which tile nodes exactly:

* on one node, the divisors of ``g`` (1, 2, 4 on nodes of 4; 1, 2, 4, 8 on nodes of 8);
* beyond it, whole nodes (multiples of ``g``).

A job none of whose feasible counts is node-shaped (memory or batch bounds allow only 3 GPUs
on nodes of 4) keeps every count it had: it must still be able to run.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["node_shaped", "shape_rows"]


def node_shaped(width: int, gpus_per_node: int) -> npt.NDArray[np.bool_]:
    """``[width + 1]``: whether each GPU count ``0..width`` is node-shaped (0 is not)."""
    k = np.arange(width + 1)
    g = gpus_per_node
    one_node = (k >= 1) & (k <= g) & (g % np.maximum(k, 1) == 0)
    shaped: npt.NDArray[np.bool_] = one_node | ((k > g) & (k % g == 0))
    return shaped


def shape_rows(values: npt.NDArray[np.float64], gpus_per_node: int) -> None:
    """Set the values of counts that are not node-shaped to ``-inf``, in place, in each row
    that keeps a feasible count after it (the others are left whole)."""
    allowed = node_shaped(values.shape[1] - 1, gpus_per_node)
    masked = np.where(allowed, values, -np.inf)
    keeps = np.isfinite(masked).any(axis=1)
    values[keeps] = masked[keeps]
