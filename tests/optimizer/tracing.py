"""Counting JAX's traces (a retrace means a recompile) and XLA backend compiles through
JAX's own monitoring events, on any thread, while registered: no counter kept in the
kernels' module."""

from __future__ import annotations

from typing import Any

import jax

TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class JaxEvents:
    """``with JaxEvents(name) as seen:`` counts the JAX monitoring events ``name`` inside."""

    def __init__(self, event: str) -> None:
        self.event = event
        self.count = 0

    def __call__(self, event: str, seconds: float, **_: Any) -> None:
        if event == self.event:
            self.count += 1

    def __enter__(self) -> JaxEvents:
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *_: object) -> None:
        jax.monitoring.unregister_event_duration_listener(self)


def Traces() -> JaxEvents:
    """The jaxpr traces JAX makes."""
    return JaxEvents(TRACE_EVENT)


def BackendCompiles() -> JaxEvents:
    """The XLA backend compiles JAX runs."""
    return JaxEvents(BACKEND_COMPILE_EVENT)
