"""Where users read a job's current fit: the ``bellows.io/fit`` annotation and ``bellows jsa
current``, against the emulated API server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from click.testing import CliRunner
from kubernetes import client as k8s

from bellows.cli.main import main
from bellows.emulator import EmulatedCluster
from bellows.kube import KubeApi
from bellows.scaling import JobProfile, default_cluster, parse_job_profile
from bellows.scaling.online import refit_profile
from bellows.scaling.profiles import DEFAULT_PRIOR
from bellows.service.progress_loop import fit_annotator, fit_text, read_fit
from bellows.twin.replay import job_manifest
from tests.service.livecluster import NS, crds, jobs


async def test_the_fit_written_on_the_job_is_what_bellows_jsa_current_prints(
    tmp_path: Path,
) -> None:
    fit = refit_profile(DEFAULT_PRIOR, default_cluster(), {(4, 256): 0.9, (2, 128): 0.7})
    text = fit_text(fit, 41.5)
    async with EmulatedCluster(crds=crds(), operator=False, namespaces=(NS,)) as kube:
        api = KubeApi(kube.api_client())
        ref, body = job_manifest(jobs(1, seed=3)[0], 0, namespace=NS)
        group, version = body["apiVersion"].split("/")
        custom = k8s.CustomObjectsApi(api.api_client)
        await asyncio.to_thread(
            custom.create_namespaced_custom_object,
            group, version, NS, ref.kind.lower() + "s", body,
        )  # fmt: skip
        key = f"{ref.kind.lower()}/{NS}/{body['metadata']['name']}"
        assert await read_fit(api, key) is None  # nothing learned yet
        await fit_annotator(api)(key, text)
        await fit_annotator(api)(f"{ref.kind.lower()}/{NS}/gone", text)  # deleted: skipped
        stored = await read_fit(api, key)
        assert stored is not None
        assert (stored.step, stored.effective_weights) == (
            fit.profile.step,
            fit.profile.effective_weights,
        )
        assert "41.5 s" in stored.source
        config = kube.write_kubeconfig(tmp_path / "kubeconfig", NS)
        runner = CliRunner()
        shown = await asyncio.to_thread(
            runner.invoke, main, ["jsa", "current", key, "--kubeconfig", str(config)]
        )
        assert shown.exit_code == 0, shown.output
        head, _, document = shown.output.partition("\n")
        assert head == f"{key}: {stored.source}"
        printed: JobProfile = parse_job_profile(json.loads(document))
        assert printed == stored
        missing = await asyncio.to_thread(
            runner.invoke, main, ["jsa", "current", "tfjob/x/y", "--kubeconfig", str(config)]
        )
        assert missing.exit_code != 0
        assert "<kind>/<namespace>/<name>" in missing.output
