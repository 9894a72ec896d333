"""Prometheus exposition and the liveness/readiness endpoints, over real HTTP."""

from __future__ import annotations

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bellows.autoscaler.decisions import Reject, Rescale, Start
from bellows.bus import EventType
from bellows.service.health import Health, serving
from bellows.service.metrics import Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_what_the_controller_and_the_bus_report():
    metrics = Metrics()
    metrics.observe_decisions([Start("a", 2, 64), Rescale("b", 1, 32, 4, 128), Reject("c", "x")])
    metrics.observe_round(seconds=0.003, queued=5, running=7, gpus_allocated=38, capacity=40)
    metrics.consumed(EventType.ARRIVED, lag_s=2.5)
    metrics.published(EventType.COMPLETED, duplicate=True)
    metrics.dead_lettered("malformed_json")
    got = samples(metrics)
    assert got[("bellows_decisions_total", (("kind", "start"),))] == 1
    assert got[("bellows_decisions_total", (("kind", "reject"),))] == 1
    assert got[("bellows_rescales_total", ())] == 1
    assert got[("bellows_queue_length", ())] == 5
    assert got[("bellows_gpus_allocated", ())] == 38
    assert got[("bellows_optimizer_seconds_count", ())] == 1
    assert got[("bellows_optimizer_seconds_bucket", (("le", "0.005"),))] == 1
    assert got[("bellows_optimizer_seconds_bucket", (("le", "0.0025"),))] == 0
    assert got[("bellows_event_lag_seconds_sum", (("type", "job.arrived"),))] == 2.5
    assert (
        got[("bellows_events_published_total", (("duplicate", "true"), ("type", "job.completed")))]
        == 1
    )
    assert got[("bellows_events_dead_lettered_total", (("code", "malformed_json"),))] == 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_liveness_follows_heartbeats_and_readiness_follows_checks():
    clock = Clock()
    health = Health(clock, stale_after_s=30)
    beat = health.register_loop("consume")
    health.expect("nats", "state")
    assert health.liveness().ok
    assert not health.readiness().ok
    assert health.readiness().checks == {"nats": "not yet", "state": "not yet"}
    health.set_ready("nats", True)
    health.set_ready("state", True, "rebuilt 12 jobs")
    assert health.readiness().ok
    clock.now = 131.0
    assert not health.liveness().ok
    assert "no heartbeat for 31.0 s" in health.liveness().checks["consume"]
    beat()
    assert health.liveness().ok


async def test_the_endpoints_answer_over_http():
    clock = Clock()
    health = Health(clock, stale_after_s=30)
    health.register_loop("consume")
    health.expect("nats")
    metrics = Metrics()
    metrics.dead_lettered("unknown_type")
    async with (
        serving(health, metrics, host="127.0.0.1", port=0) as url,
        aiohttp.ClientSession() as http,
    ):
        async with http.get(f"{url}/healthz") as response:
            assert response.status == 200
            assert (await response.json())["checks"] == {"consume": "ok"}
        async with http.get(f"{url}/readyz") as response:
            assert response.status == 503
            assert (await response.json())["status"] == "failing"
        health.set_ready("nats", True)
        async with http.get(f"{url}/readyz") as response:
            assert response.status == 200
        async with http.get(f"{url}/metrics") as response:
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain")
            assert (
                'bellows_events_dead_lettered_total{code="unknown_type"} 1.0'
                in await response.text()
            )
        clock.now += 60
        async with http.get(f"{url}/healthz") as response:
            assert response.status == 503


def test_every_skip_reason_is_exported_from_the_start():
    """A dashboard or an alert on ``bellows_jobs_skipped`` finds each reason at 0 before any
    job is skipped, not a missing series."""
    metrics = Metrics()
    for reason in ("managed-by", "queue-unknown"):
        value = metrics.registry.get_sample_value("bellows_jobs_skipped", {"reason": reason})
        assert value == 0.0, reason
