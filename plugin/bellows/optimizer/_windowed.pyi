"""Types of the compiled layers (``_windowed.c``)."""

from typing import Any

import numpy as np
import numpy.typing as npt

def run(
    rows: npt.NDArray[np.float64],
    lo: npt.NDArray[np.int64],
    hi: npt.NDArray[np.int64],
    firsts: npt.NDArray[np.int64],
    lasts: npt.NDArray[np.int64],
    starts: npt.NDArray[np.int64],
    choices: npt.NDArray[np.unsignedinteger[Any]],
    gpus: npt.NDArray[np.int64],
    /,
) -> tuple[bool, float]: ...
