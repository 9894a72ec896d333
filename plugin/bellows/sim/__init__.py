"""Discrete-event simulator of the paper's Section IV, its workloads, metrics and plots.

``bellows.sim.run(trace, gpus=..., config=..., cluster=...)`` drives the same autoscaler core
the live controller runs and returns a :class:`SimResult`.
"""

from bellows.sim.engine import CapacityChange, RunStats, SimResult, SimulationError, run

__all__ = ["CapacityChange", "RunStats", "SimResult", "SimulationError", "run"]
