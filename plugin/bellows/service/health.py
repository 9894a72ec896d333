"""Liveness and readiness, and the HTTP server of ``/healthz``, ``/readyz`` and ``/metrics``.

:class:`Health` holds the state, read from an injected clock: each loop of the process
(the consume loop, the watch) registers and beats; it is *alive* while every loop beat
within ``stale_after_s``. It is *ready* once every readiness check has been set true (NATS
connected, state rebuilt from the cluster, …). :func:`serving` runs the aiohttp server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from aiohttp import web

from bellows.service.metrics import CONTENT_TYPE_LATEST, Metrics

__all__ = ["Health", "Probe", "serving"]


@dataclass(frozen=True)
class Probe:
    """The answer of one probe: whether it passes and why, check by check."""

    ok: bool
    checks: dict[str, str]


class Health:
    """Heartbeats of the process's loops and its readiness checks."""

    def __init__(self, clock: Callable[[], float], *, stale_after_s: float = 60.0) -> None:
        self._clock = clock
        self._stale_after_s = stale_after_s
        self._beats: dict[str, float] = {}
        self._ready: dict[str, tuple[bool, str]] = {}

    def register_loop(self, name: str) -> Callable[[], None]:
        """Watch loop ``name`` from now on; returns its heartbeat function."""
        self._beats[name] = self._clock()

        def beat() -> None:
            self._beats[name] = self._clock()

        return beat

    def expect(self, *names: str) -> None:
        """Declare readiness checks that start out failing (``not yet``)."""
        for name in names:
            self._ready.setdefault(name, (False, "not yet"))

    def set_ready(self, name: str, ok: bool, reason: str = "") -> None:
        """Mark one readiness check passing or failing, with a reason for the probe's body."""
        self._ready[name] = (ok, reason or ("ok" if ok else "failing"))

    def liveness(self) -> Probe:
        now = self._clock()
        checks: dict[str, str] = {}
        ok = True
        for name, last in sorted(self._beats.items()):
            age = now - last
            if age > self._stale_after_s:
                ok = False
                checks[name] = f"no heartbeat for {age:.1f} s (limit {self._stale_after_s:g} s)"
            else:
                checks[name] = "ok"
        return Probe(ok, checks)

    def readiness(self) -> Probe:
        checks = {name: reason for name, (_, reason) in sorted(self._ready.items())}
        ok = all(passing for passing, _ in self._ready.values())
        return Probe(ok, checks)


def _probe_response(probe: Probe) -> web.Response:
    return web.json_response(
        {"status": "ok" if probe.ok else "failing", "checks": probe.checks},
        status=200 if probe.ok else 503,
    )


def make_app(health: Health, metrics: Metrics) -> web.Application:
    """The aiohttp application of the three endpoints."""

    async def healthz(_: web.Request) -> web.Response:
        return _probe_response(health.liveness())

    async def readyz(_: web.Request) -> web.Response:
        return _probe_response(health.readiness())

    async def metrics_endpoint(_: web.Request) -> web.Response:
        response = web.Response(body=metrics.exposition())
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    return app


@contextlib.asynccontextmanager
async def serving(health: Health, metrics: Metrics, *, host: str, port: int) -> AsyncIterator[str]:
    """Serve the endpoints on ``host:port`` (0: a free port); yields the base URL."""
    runner = web.AppRunner(make_app(health, metrics), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        server = site._server  # the bound socket is the only source of the chosen port
        sockets = getattr(server, "sockets", None) or []
        bound = sockets[0].getsockname()[1] if sockets else port
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        yield f"http://{shown}:{bound}"
    finally:
        await runner.cleanup()
