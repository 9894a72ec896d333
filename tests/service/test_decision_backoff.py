"""A decision the cluster keeps refusing is retried with a backoff, never in a busy loop, and
its owner is told once (issue 35, item 4); the other jobs are driven meanwhile."""

from __future__ import annotations

from kubernetes.client.rest import ApiException

from bellows.autoscaler import Autoscaler, AutoscalerConfig, Decision
from bellows.emulator import EmulatedCluster
from bellows.kube import Actuator, JobReader, KubeApi, Outcome
from bellows.scaling import default_cluster
from bellows.service.controller import Controller
from bellows.service.observing import ControllerObserver
from bellows.service.settling import FAILURES_TOLD, RETRY_BACKOFF_S
from bellows.twin.replay import job_manifest
from tests.hostile.test_journal_trust import _create, _events, _honest
from tests.service.livecluster import NS, crds


class Refusing(Actuator):
    """Every decision about ``job`` fails as an admission webhook's 422 would."""

    def __init__(self, api: KubeApi, job: str) -> None:
        super().__init__(api)
        self.job, self.calls = job, 0

    async def apply(self, decision: Decision, *, done: float | None = None) -> Outcome:
        if decision.job == self.job:
            self.calls += 1
            raise ApiException(status=422, reason="denied by a webhook")
        return await super().apply(decision, done=done)


class Counting(ControllerObserver):
    def __init__(self) -> None:
        self.failed: list[str] = []

    def decision_failed(self, decision: Decision) -> None:
        self.failed.append(decision.job)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_a_refused_decision_backs_off_and_is_told_once() -> None:
    trace = _honest(3)
    async with EmulatedCluster(crds=crds(), compression=60.0, namespaces=(NS,)) as kube:
        names = []
        for i, job in enumerate(trace):
            ref, body = job_manifest(job, 2 * i, namespace=NS)
            names.append((ref.key, body["metadata"]["name"]))
            _create(kube, body)
        api = KubeApi(kube.api_client())
        bad_key, bad_name = names[0]
        actuator = Refusing(api, bad_key)
        clock, observer = Clock(), Counting()
        controller = Controller(
            api=api,
            autoscaler=Autoscaler(AutoscalerConfig(), capacity=16, cluster=default_cluster()),
            actuator=actuator,
            reader=JobReader(api, namespace=NS),
            now=clock,
            wall_to_clock=lambda _: clock.t,
            observer=observer,
        )
        await controller.rebuild()  # its first round starts all three
        assert actuator.calls == 1
        for _, name in names[1:]:
            assert controller.held.get(f"pytorchjob/{NS}/{name}", 0) >= 1
        for _ in range(50):  # retried as keep_house does, as fast as it can: no call
            await controller.retry_pending()
        assert actuator.calls == 1
        first, longest = RETRY_BACKOFF_S
        waits = []
        for _ in range(12):
            before = actuator.calls
            while actuator.calls == before:  # the clock moves on a second at a time
                clock.t += 1.0
                await controller.retry_pending()
            waits.append(clock.t)
        gaps = [b - a for a, b in zip([0.0, *waits], waits, strict=False)]
        assert gaps[0] == first
        assert gaps == sorted(gaps)  # doubling ...
        assert max(gaps) <= longest  # ... up to the longest
        assert len(observer.failed) == actuator.calls
        told = [e for e in _events(kube, bad_name) if e.get("reason") == "DecisionFailed"]
        assert len(told) == 1
        assert f"{FAILURES_TOLD} times in a row" in str(
            told[0].get("message") or told[0].get("note")
        )
        assert bad_key in {d.job for d in controller.pending}
