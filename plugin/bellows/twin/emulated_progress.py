"""The emulated jobs' training helpers: progress reports from the emulated cluster to NATS.

What ``examples/training/elastic.py``'s ``ProgressReporter`` publishes from rank 0 of a real
job, :class:`EmulatedReporter` publishes for every job the emulated operators run: once per
start a ``job.started`` with the restart it paid (the emulated cluster's restart cost), and
every ``interval_s`` real seconds a ``job.progress`` with the samples seen and the job's
*true* step time (:attr:`bellows.emulator.Progress.step_seconds`, which differs from
its annotation when the cluster was given ``true_speed``). A job that made no step since its
last report reports nothing, as a real helper between steps. With ``noise`` (the
statistical efficiency of a job's model, by namespace and name: e.g. a Pollux model's
:data:`~bellows.scaling.MODEL_EFFICIENCY`), each ``job.progress`` of such a job carries the
gradient statistics its helper would measure (payload version 2): ``gradSqr`` 1 and
``gradVar`` the model's noise scale at the job's batch and progress, the samples it trained
at each batch weighted by the model's efficiency (reference samples, as the controller counts
them; the emulated cluster itself still runs a job until its samples reach its work).
Publishing never stops the loop: a refused or lost report is logged and the next one comes.

With ``through_pods``, a job reports as its pods would, through the endpoint its pod
template names: ``BELLOWS_PROGRESS_URL`` and ``BELLOWS_PROGRESS_INBOX`` (literal or from the
namespace's Secret, as the controller injects them: :mod:`bellows.kube.progress_env`),
``BELLOWS_PROGRESS_PREFIX``, ``BELLOWS_JOB_NAMESPACE`` and ``BELLOWS_JOB_NAME``; a job
whose pods have no URL reports nothing. A job that trains at goodput (the emulated cluster
knows its efficiency) reports the noise scale at its progress toward its work.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import nats
import structlog
from nats.aio.client import Client
from nats.js.client import JetStreamContext

from bellows.bus.progress import (
    MAX_GRAD_STAT,
    ProgressEvent,
    ProgressType,
    encode_progress,
    progress_subject,
)
from bellows.emulator import EmulatedCluster, Progress
from bellows.emulator.store import ApiError, Store
from bellows.inputs import brief
from bellows.kube.adapters import KINDS, TRAINJOB
from bellows.kube.progress_env import PROGRESS_ENV_NAMES
from bellows.scaling import EfficiencyProfile

__all__ = ["EmulatedReporter", "pod_env"]

URL, INBOX, PREFIX, JOB_NAMESPACE, JOB_NAME = PROGRESS_ENV_NAMES

_log = structlog.get_logger("bellows.emulator")


class EmulatedReporter:
    """Publishes what each emulated job's training helper would (see the module docstring)."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        js: JetStreamContext | None,
        *,
        prefix: str,
        restart_s: float,
        interval_s: float = 0.2,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        noise: Callable[[str, str], EfficiencyProfile | None] | None = None,
        through_pods: bool = False,
    ) -> None:
        if cluster.operator is None:
            raise ValueError("the emulated cluster runs no operator: no job trains")
        if js is None and not through_pods:
            raise ValueError("no JetStream context and not through_pods: nowhere to report")
        self._through_pods = through_pods
        self._connections: dict[tuple[str, str], Client] = {}
        self._envs: dict[tuple[str, int], dict[str, str]] = {}  # (uid, restarts) -> its pods' env
        self._cluster = cluster
        self._operator = cluster.operator
        self._js = js
        self._prefix = prefix
        self._restart_s = restart_s
        self._interval_s = interval_s
        self._now = now
        self._noise = noise
        self._starts: dict[str, int] = {}  # uid -> restarts already reported
        self._resumed: dict[str, tuple[int, int]] = {}  # uid -> a start seen, at what samples
        self._samples: dict[str, int] = {}  # uid -> samples of the last report
        self._progress: dict[str, tuple[int, float]] = {}  # uid -> samples, reference samples
        self.published = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Report every ``interval_s`` until ``stop``."""
        try:
            while not stop.is_set():
                await self.report_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._interval_s)
        finally:
            for client in self._connections.values():
                with contextlib.suppress(Exception):
                    await client.close()
            self._connections.clear()

    async def report_once(self) -> None:
        """One round of reports from every running emulated job."""
        store = self._cluster.store
        trainer = self._cluster.trainer
        sources = [(kind, self._operator.progress) for kind in KINDS]
        if trainer is not None:
            sources.append((TRAINJOB, trainer.progress))
        for kind, progress_of in sources:
            resource = store.resources[f"{kind.group}/{kind.version}/{kind.plural}"]
            for obj in store.list_objects(resource, None)[0]:
                meta = obj["metadata"]
                progress = progress_of(meta["uid"])
                if progress is None:
                    continue
                where = await self._where(obj, progress.restarts)
                if where is None:
                    continue
                js, prefix, namespace, name = where
                for event in self._events(namespace, name, meta["uid"], progress):
                    await self._publish(js, prefix, event)

    def _pod_env(self, obj: dict[str, Any], restarts: int) -> dict[str, str]:
        """:func:`pod_env` of ``obj``'s pods of its ``restarts``-th start, read once: a pod
        reads its env when it starts (a rescale's new pods, the new env)."""
        key = (obj["metadata"]["uid"], restarts)
        env = self._envs.get(key)
        if env is None:
            env = self._envs[key] = pod_env(self._cluster.store, obj)
            self._envs.pop((key[0], restarts - 1), None)
        return env

    async def _where(
        self, obj: dict[str, Any], restarts: int
    ) -> tuple[JetStreamContext, str, str, str] | None:
        """Where ``obj``'s helper reports in its ``restarts``-th run, with the prefix and the
        job it names (``None``: its pods have no endpoint)."""
        meta = obj["metadata"]
        if not self._through_pods:
            assert self._js is not None
            return self._js, self._prefix, meta["namespace"], meta["name"]
        env = self._pod_env(obj, restarts)
        url, namespace, name = (env.get(n) for n in (URL, JOB_NAMESPACE, JOB_NAME))
        if not url or not namespace or not name:
            return None
        inbox = env.get(INBOX) or "_INBOX"
        client = self._connections.get((url, inbox))
        if client is None:
            try:
                client = self._connections[url, inbox] = await nats.connect(
                    url, inbox_prefix=inbox.encode(), connect_timeout=2,
                    max_reconnect_attempts=1,
                )  # fmt: skip
            except Exception as err:  # an endpoint down: as a pod, report nothing
                _log.warning("emulator.progress_not_connected", job=name, error=brief(err))
                return None
        return client.jetstream(), env.get(PREFIX) or "bellows", namespace, name

    def _events(
        self, namespace: str, name: str, uid: str, progress: Progress
    ) -> list[ProgressEvent]:
        gpus, batch = progress.gpus, progress.batch
        if gpus is None or batch is None or progress.step_seconds is None:
            return []  # stopped: no helper runs
        samples = int(progress.samples)
        common = (namespace, name, self._now(), samples, gpus, batch)
        out = []
        if self._starts.get(uid) != progress.restarts:
            # as the helper does, at the first step it finishes after the start: not while
            # the restart is still being paid (no sample since it resumed)
            restarts, resumed = self._resumed.get(uid, (progress.restarts, samples))
            if restarts != progress.restarts:
                resumed = samples
            self._resumed[uid] = (progress.restarts, resumed)
            self._samples[uid] = samples
            if samples <= resumed:
                return []
            del self._resumed[uid]
            self._starts[uid] = progress.restarts
            return [ProgressEvent(ProgressType.STARTED, *common, restart_s=self._restart_s)]
        last = self._samples.get(uid)
        if last is not None and samples > last:
            steps = max(1, round((samples - last) / batch))
            sqr, var = self._gradients(namespace, name, uid, batch, samples, at=progress.done)
            out.append(
                ProgressEvent(
                    ProgressType.PROGRESS,
                    *common,
                    step_seconds=progress.step_seconds,
                    steps=steps,
                    grad_sqr=sqr,
                    grad_var=var,
                )
            )
        self._samples[uid] = samples
        return out

    def _gradients(
        self, namespace: str, name: str, uid: str, batch: int, samples: int, *, at: float | None
    ) -> tuple[float | None, float | None]:
        """``(gradSqr, gradVar)`` of a job whose model is known, at ``samples`` seen, the
        samples since the last call trained at ``batch``, or at progress ``at`` when the
        emulated cluster counts it (``(None, None)``: no model)."""
        model = None if self._noise is None else self._noise(namespace, name)
        if model is None:
            return None, None
        if at is not None:  # it trains at goodput: the cluster's own count
            done = at
        else:
            seen, done = self._progress.get(uid, (0, 0.0))
            done = float(model.progress_after(batch, done, max(0, samples - seen)))
        self._progress[uid] = (samples, done)
        phi = float(model.noise_scale_at(batch, max(done, 1.0)))
        return 1.0, min(phi, MAX_GRAD_STAT)

    async def _publish(self, js: JetStreamContext, prefix: str, event: ProgressEvent) -> None:
        subject = progress_subject(prefix, event.namespace, event.name)
        try:
            await js.publish(subject, encode_progress(event), timeout=2.0)
            self.published += 1
        except Exception as err:  # a lost report costs the job nothing, as with the helper
            _log.warning("emulator.progress_not_published", job=event.name, error=brief(err))


def pod_env(store: Store, obj: Mapping[str, Any]) -> dict[str, str]:
    """The progress env of ``obj``'s training pods as a pod would see it: the first pod
    template container (or TrainJob trainer) whose env names ``BELLOWS_PROGRESS_URL``, each
    entry's value, or the key of the namespace's Secret it refers to (absent when the Secret
    or key is missing, as an ``optional`` reference)."""
    namespace = obj["metadata"]["namespace"]
    for entries in _env_lists(obj.get("spec")):
        named = {e.get("name"): e for e in entries if isinstance(e, Mapping)}
        if URL not in named:
            continue
        out: dict[str, str] = {}
        for name in PROGRESS_ENV_NAMES:
            value = _value(store, namespace, named.get(name))
            if value is not None:
                out[name] = value
        return out
    return {}


def _env_lists(node: Any) -> list[list[Any]]:
    """Every ``env`` list under ``node``, depth first."""
    if isinstance(node, Mapping):
        found = [node["env"]] if isinstance(node.get("env"), list) else []
        for key, child in node.items():
            if key != "env":
                found += _env_lists(child)
        return found
    if isinstance(node, list):
        return [env for child in node for env in _env_lists(child)]
    return []


def _value(store: Store, namespace: str, entry: Mapping[str, Any] | None) -> str | None:
    if entry is None:
        return None
    if "value" in entry:
        return str(entry["value"])
    ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
    try:
        secret = store.get(store.resources["v1/secrets"], namespace, str(ref.get("name", "")))
    except ApiError:  # an optional reference to a Secret not there: unset
        return None
    data = secret.get("data") or {}
    encoded = data.get(ref.get("key"))
    return None if encoded is None else base64.b64decode(encoded).decode()
