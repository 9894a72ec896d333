"""``bellows status`` options as kubectl has them (issue 38 item 4): ``-o name``,
``-l/--selector``, ``-w/--watch``, and ``--kind`` of a kind whose CRD is not installed."""

from __future__ import annotations

import asyncio
import copy
import os
import sys
import time

from bellows.autoscaler.decisions import Start
from bellows.kube import Actuator

from .test_statuses import _cli, _create

MPI_GROUP = "mpijob.kubeflow.org"


def _labelled(examples, name, **labels):
    body = copy.deepcopy(examples["MPIJob"])
    body["metadata"]["name"] = name
    body["metadata"]["labels"] = labels
    return body


def test_output_name_and_a_label_selector_as_kubectl(on_cluster, examples, tmp_path):
    async def scenario(cluster, api):
        await _create(api, _labelled(examples, "ml-a", team="ml", tier="prod"))
        await _create(api, _labelled(examples, "ml-b", team="ml", tier="dev"))
        await _create(api, _labelled(examples, "web-a", team="web"))
        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        named = await _cli("--kubeconfig", config, "-o", "name")
        assert named.exit_code == 0, named.output
        assert named.output.splitlines() == [f"{MPI_GROUP}/{n}" for n in ("ml-a", "ml-b", "web-a")]
        ml = await _cli("--kubeconfig", config, "-o", "name", "-l", "team=ml,tier!=dev")
        assert ml.output.splitlines() == [f"{MPI_GROUP}/ml-a"]
        nobody = await _cli("--kubeconfig", config, "-o", "name", "-l", "team=none")
        assert (nobody.exit_code, nobody.output) == (0, "")  # as kubectl: no line at all
        table = await _cli("--kubeconfig", config, "--selector", "team in (web)")
        assert [line.split()[1] for line in table.output.splitlines()[2:]] == ["web-a"]
        bad = await _cli("--kubeconfig", config, "-l", "team in ml")
        assert bad.exit_code == 1
        assert bad.output.startswith("Error: cannot read the jobs: (400) Bad Request")

    on_cluster(scenario, limit_s=60.0)


def test_a_kind_asked_for_whose_crd_is_not_installed_says_so(on_cluster, examples, tmp_path):
    async def scenario(cluster, api):
        await _create(api, _labelled(examples, "job-a"))
        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        shown = await _cli("--kubeconfig", config, "--kind", "trainjob")
        assert shown.exit_code == 1, shown.output
        assert shown.output.strip() == (
            "Error: cannot read the jobs: the TrainJob CRD (trainjobs.trainer.kubeflow.org, "
            "trainer.kubeflow.org/v1alpha1) is not installed on this cluster: no TrainJob can "
            "exist here (kubectl get crd trainjobs.trainer.kubeflow.org)"
        )
        everything = await _cli("--kubeconfig", config)  # no kind named: the kinds served
        assert everything.exit_code == 0, everything.output
        assert "job-a" in everything.output

    on_cluster(scenario, limit_s=60.0)


async def _line(stream: asyncio.StreamReader, deadline: float) -> str:
    left = deadline - time.monotonic()
    assert left > 0, "no line before the deadline"
    return (await asyncio.wait_for(stream.readline(), left)).decode()


def test_watch_prints_a_row_again_when_its_job_changes(on_cluster, examples, tmp_path):
    """A whole ``bellows status -w`` process: the table, then the row of the job Bellows
    started (its state, GPUs and reason), and nothing for a job that did not change."""

    async def scenario(cluster, api):
        await _create(api, _labelled(examples, "still"))
        await _create(api, _labelled(examples, "moves"))
        config = str(cluster.write_kubeconfig(tmp_path / "kubeconfig", "default"))
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bellows.cli.main", "status", "-w", "--kubeconfig", config,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        assert process.stdout is not None
        deadline = time.monotonic() + 40.0
        try:
            first = [await _line(process.stdout, deadline) for _ in range(4)]
            assert first[0].startswith("cluster: ")
            assert [line.split()[1] for line in first[2:]] == ["moves", "still"]
            await Actuator(api).apply(
                Start("mpijob/default/moves", 2, 256, reason="started into free GPUs")
            )
            again = await _line(process.stdout, deadline)
            assert again.split()[:3] == ["MPIJob", "moves", "running"], again
            assert "started into free GPUs" in again
        finally:
            process.terminate()
            await asyncio.wait_for(process.wait(), 20.0)
        rest = (await process.stdout.read()).decode()
        assert "still" not in rest, rest  # the job that did not change is not printed again

    on_cluster(scenario, limit_s=90.0)
