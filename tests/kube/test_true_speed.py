"""The emulated cluster trains a job at its true speed, which its annotation may get wrong."""

from __future__ import annotations

from bellows.autoscaler.decisions import Rescale, Start
from bellows.kube import Actuator, PyTorchJobKind, keys
from bellows.scaling import default_cluster
from bellows.scaling.online import ProgressLog, ProgressReport, SpeedFactors, refit_log
from bellows.scaling.timing import local_batch, processing_seconds

from .conftest import condition, wait_for
from .test_actuator import TORCH, submit

NAME = "resnet50-imagenet"
TRUTH = SpeedFactors(compute=0.8, communication=1.4)  # compute 25 % faster, Allreduce 40 % slower


def _step(profile, gpus: int, batch: int) -> float:  # type: ignore[no-untyped-def]
    cluster = default_cluster()
    compute = processing_seconds(profile.step, local_batch(gpus, batch))
    return cluster.combine(compute, cluster.allreduce_seconds(profile.effective_weights, gpus))


def test_jobs_train_at_their_true_speed_and_the_online_fit_learns_it(on_cluster, examples):
    configmap = examples["ConfigMap"]["data"][keys.DEFAULT_PROFILE_KEY]
    prior = keys.parse_profile_text("profile.json", configmap)

    async def scenario(cluster, api):
        kind = PyTorchJobKind()
        uid = (await submit(api, examples))["metadata"]["uid"]
        actuator = Actuator(api)
        log = ProgressLog()
        before = (0, 0)
        for decision in (Start(TORCH, 2, 256), Rescale(TORCH, 2, 256, 4, 512),
                         Rescale(TORCH, 4, 512, 8, 512)):  # fmt: skip
            await actuator.apply(decision)
            await wait_for(
                api, kind, "default", NAME,
                lambda o, gpus=decision.gpus: condition(o, "Running")
                and cluster.operator.progress(uid).gpus == gpus,
            )  # fmt: skip
            now = cluster.operator.progress(uid)
            assert (now.gpus, now.batch) != before
            before = (now.gpus, now.batch)
            truth = _step(TRUTH.apply(prior), now.gpus, now.batch)
            assert now.step_seconds is not None
            assert abs(now.step_seconds / truth - 1) < 1e-6  # trains at the true speed ...
            assert abs(_step(prior, now.gpus, now.batch) / truth - 1) > 0.05  # ... not the prior's
            # what the job's helper reports from this run
            assert (
                log.add(ProgressReport(now.gpus, now.batch, now.step_seconds, now.samples)) is None
            )

        fit = refit_log(prior, default_cluster(), log)
        for gpus, batch in [(2, 256), (4, 512), (8, 512), (1, 128), (6, 384), (8, 1024)]:
            truth = _step(TRUTH.apply(prior), gpus, batch)
            assert abs(_step(fit.profile, gpus, batch) / truth - 1) <= 0.05, (gpus, batch)

    on_cluster(scenario, compression=1.0, true_speed=lambda ns, name: TRUTH)
