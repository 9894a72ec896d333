"""Workloads for the simulator: the trace format, generated workloads and imported traces."""

from bellows.sim.workloads.traces import (
    TraceError,
    TraceJob,
    fit_trace,
    read_trace,
    schema,
    write_trace,
)

__all__ = ["TraceError", "TraceJob", "fit_trace", "read_trace", "schema", "write_trace"]
