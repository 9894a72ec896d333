"""Types of the compiled weighing of candidate batches (``_batches.c``)."""

import numpy as np
import numpy.typing as npt

def best(
    cand: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    t_proc: npt.NDArray[np.float64],
    t_proc_g: npt.NDArray[np.float64],
    t_ar: npt.NDArray[np.float64],
    t_ar_g: npt.NDArray[np.float64],
    lo: npt.NDArray[np.int64],
    hi: npt.NDArray[np.int64],
    feasible: npt.NDArray[np.bool_],
    g: float,
    rate: npt.NDArray[np.float64],
    batch: npt.NDArray[np.int64],
    /,
) -> None: ...
