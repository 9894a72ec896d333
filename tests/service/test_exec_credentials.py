"""The controller and the bridge against an API server that authenticates every request,
with their client made as the processes make it (``kube_api_client`` from the configured
kubeconfig) from a kubeconfig whose user is an ``exec`` credential plugin (issue 38 item 3:
one client, the official one, and its auth plugins for every command)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from bellows.service.config import KubernetesSettings
from bellows.service.runner import kube_api_client
from tests.exec_plugin import exec_user
from tests.service.livecluster import NS, jobs, live

pytestmark = pytest.mark.slow

TOKEN = "t0ken-from-the-plugin"


async def test_the_controller_and_bridge_run_on_an_exec_credential_plugin(tmp_path: Path) -> None:
    async with live(tokens=[TOKEN]) as stack:
        config = stack.kube.kubeconfig(NS)
        config["users"][0]["user"], runs = exec_user(tmp_path, TOKEN)
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        settings = KubernetesSettings(kubeconfig=path)
        stack.start_bridge(client=kube_api_client(settings))
        stack.start_controller("controller", client=kube_api_client(settings))
        names = await stack.submit(jobs(2, seed=9))
        await stack.all_done(names)
        stack.alive()
        stack.witness.check(names)
        assert runs.read_text().count("ran") >= 2  # each process's client ran the plugin
        # the server does refuse a client without the token: the plugin is what let them in
        config["users"][0]["user"] = {}
        bare = tmp_path / "bare"
        bare.write_text(yaml.safe_dump(config))
        client = kube_api_client(KubernetesSettings(kubeconfig=bare))
        try:
            with pytest.raises(ApiException) as refused:
                await asyncio.to_thread(k8s.CoreV1Api(client).list_namespace)  # the loop serves
            assert refused.value.status == 401
        finally:
            client.close()
