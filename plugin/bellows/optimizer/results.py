"""What admission returns: the rows placed, their GPUs and the objective."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Admission"]


@dataclass(frozen=True)
class Admission:
    """The outcome of :func:`bellows.optimizer.admit`.

    * ``admitted``: row indices placed, the required rows first, then admitted candidates in
      arrival order.
    * ``gpus``: int64 ``[n]`` GPUs per row of ``values``, 0 for rows not admitted.
    * ``objective``: the sum of ``values[j, gpus[j]]`` over the admitted rows (the optimum
      over that set).
    """

    admitted: tuple[int, ...]
    gpus: npt.NDArray[np.int64]
    objective: float
