"""The live controller's memory and start-up: a real ``bellows controller`` process holding
10,000 jobs (targets: <= 300 MiB resident on the NumPy path, <= 450 MiB on a JAX path, the
default ``auto``), per optimizer path, side by side.

For each capacity and each optimizer path (``controller.optimizer``), from scratch: an
emulated Kubeflow cluster in a child process holds ``--jobs`` opted-in jobs, suspended; a
real nats-server runs; ``bellows bridge`` and ``bellows controller`` run as processes, as
in a deployment (the controller's config: that capacity, that path, Δ = 0.25 s, no leader
election). The controller rebuilds its state from the cluster and starts what fits; then
``--events`` events (alternately a new job and a deleted running one) go through the
bridge and NATS, each waited for until the controller has run its round. Then the
controller's ``/proc/<pid>/status`` is read: the resident set now (``VmRSS``) and at its
peak (``VmHWM``), and how much of it is anonymous memory (heap, stacks) and how much file
pages (shared libraries' code, which the kernel can drop and reload). The controller
compiles its JAX kernels in short-lived child processes (``bellows.service.kernel_child``);
sampled every 50 ms, the children's own peak (``VmHWM``) and the peak of the controller and
its children together (the sum of their proportional sets, ``Pss``: shared pages counted
once, as the container's memory counts them) are given too. The controller's
``bellows_startup_seconds`` give its start-up steps: the rebuild (jobs read), the first
round (the core's step) and the rehearsal (the optimizer meeting the next rounds' shapes).

``--placement nodes`` runs the controller with its node view (``controller.placement:
nodes``): the emulated cluster has the capacity on nodes of 8 GPUs, the started jobs' pods
are stored there, and the controller watches the nodes and every pod (bound issue 37: peak
<= 450 MiB at 10,000 jobs, pods watched).

Each JAX path runs twice on one compilation cache folder (``BELLOWS_JAX_CACHE``, empty at
first): cold, then warm, as a restarted pod on the chart's cache volume (target: first round
and rehearsal <= 2 s warm). ``--no-warm`` runs each once, cold.

Usage: python benchmarks/controller_memory.py [--jobs 10000] [--capacity 64,1250]
                                               [--optimizer numpy,auto] [--events 20]
                                               [--no-warm] [--placement pack|nodes]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from bellows.bus.server import running_nats_server
from bellows.emulator.nodes import uniform_nodes
from bellows.optimizer.solving import METHODS
from bellows.service.config import LoggingSettings, LogLevel
from bellows.service.logging import configure_logging
from controller_latency import NS, ClusterProcess, _client, _make_event, workload

MEMORY_TARGET_MIB = {"numpy": 300.0}  # MiB resident; a JAX path's: JAX_TARGET_MIB
JAX_TARGET_MIB = 450.0
WARM_TARGET_S = 2.0  # first round + rehearsal, with a warm compilation cache
READY_TIMEOUT_S = 900.0  # 10,000 jobs listed, 1,000 of them started: minutes on 2 cores
EVENT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Run:
    """One controller process's memory after its start-up and ``events`` rounds."""

    capacity: int
    optimizer: str
    running: int
    queued: int
    rounds: int
    startup_s: float
    status: dict[str, float]  # MiB: VmRSS, VmHWM, RssAnon, RssFile
    steps: dict[str, float]  # bellows_startup_seconds by step
    cache: str  # "cold", "warm" or "-" (the NumPy path compiles nothing)
    kernels: int  # compiled kernels in the compilation cache folder after the run
    children: dict[str, float]  # MiB, sampled: the children's peak, and with the controller


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: emulated\n"
        f"clusters: [{{name: emulated, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: anonymous, user: {}}]\n"
        "contexts: [{name: emulated, context: {cluster: emulated, user: anonymous}}]\n"
    )
    return path


def _bellows() -> str:
    """The ``bellows`` console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "bellows"
    return str(script) if script.exists() else "bellows"


@contextlib.contextmanager
def _process(
    args: Sequence[str], log: Path, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            yield process
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _metrics(port: int, *, labelled: bool = False) -> dict[str, float]:
    """The controller's Prometheus samples (names without labels, summed; with ``labelled``,
    ``name{labels}`` each), or {} if not serving."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return {}
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = re.fullmatch(r"([a-z_]+)(\{[^}]*\})? ([-+0-9.eEinfa]+)", line)
        if match:
            name = match[1] + (match[2] or "") if labelled else match[1]
            values[name] = values.get(name, 0.0) + float(match[3])
    return values


def _proc_status(pid: int) -> dict[str, float]:
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            values[key] = int(rest.split()[0]) / 1024
    return values


class Sampler(threading.Thread):
    """Samples the controller and its child processes every ``period_s`` until stopped: the
    children's largest ``VmHWM``, and the largest sum of all their ``Pss`` (MiB)."""

    def __init__(self, pid: int, period_s: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.period_s = pid, period_s
        self.child_peak = self.together_peak = 0.0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.period_s):
            children = _children(self.pid)
            together = sum(_rollup(pid).get("Pss", 0.0) for pid in [self.pid, *children])
            self.together_peak = max(self.together_peak, together)
            for pid in children:
                peak = _status_of(pid).get("VmHWM", 0.0)
                self.child_peak = max(self.child_peak, peak)

    def peaks(self) -> dict[str, float]:
        self.stopped.set()
        self.join()
        return {"children": self.child_peak, "together": self.together_peak}


def _children(pid: int) -> list[int]:
    pids = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            pids += [int(child) for child in task.read_text().split()]
    return pids


def _rollup(pid: int) -> dict[str, float]:
    """``/proc/<pid>/smaps_rollup`` in MiB ({} if the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) / 1024
    return values


def _status_of(pid: int) -> dict[str, float]:
    try:
        return _proc_status(pid)
    except OSError:
        return {}


def _wait(what: str, ready: Any, process: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        if process.poll() is not None:
            raise RuntimeError(f"the controller exited ({process.returncode}):\n{log.read_text()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {limit:.0f} s; the log:\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


async def _measure(  # noqa: PLR0917 - one case's settings, named where they are set
    jobs: int,
    capacity: int,
    optimizer: str,
    events: int,
    seed: int,
    cache: Path,
    label: str,
    placement: str = "pack",
) -> Run:
    trace = workload(jobs + events, seed)
    env = {**os.environ, "BELLOWS_JAX_CACHE": str(cache)}
    nodes = uniform_nodes(-(-capacity // 8), 8) if placement == "nodes" else None
    with (
        ClusterProcess(jobs, jobs + events, seed, gpu_nodes=nodes) as url,
        tempfile.TemporaryDirectory() as tmp,
    ):
        async with running_nats_server() as nats:
            port = _free_port()
            settings = [
                f"nats.servers={nats.url}",
                f"kubernetes.kubeconfig={_kubeconfig(Path(tmp) / 'kubeconfig', url)}",
                "kubernetes.inCluster=false",
                "leaderElection.enabled=false",
                f"namespaces={NS}",
                "logging.level=warning",
                f"controller.capacity.gpus={capacity}",
                f"controller.optimizer={optimizer}",
                "controller.deltaSeconds=0.25",
                "controller.queue=true",
                f"controller.placement={placement}",
            ]
            flags = [arg for s in settings for arg in ("--set", s)]
            bridge = [_bellows(), "bridge", *flags, "--set", f"metrics.port={_free_port()}"]
            controller = [_bellows(), "controller", *flags, "--set", f"metrics.port={port}"]
            log = Path(tmp) / "controller.log"
            with (
                _process(bridge, Path(tmp) / "bridge.log", env),
                _process(controller, log, env) as process,
            ):
                started = time.monotonic()
                sampler = Sampler(process.pid)
                sampler.start()

                def rounds() -> float:
                    return _metrics(port).get("bellows_rounds_total", 0.0)

                await asyncio.to_thread(
                    _wait, "no first round", lambda: rounds() >= 1, process, log, READY_TIMEOUT_S
                )
                startup_s = time.monotonic() - started
                custom = k8s.CustomObjectsApi(_client(url))
                for i in range(events):
                    before = rounds()
                    await _make_event(custom, trace, jobs, i)
                    await asyncio.to_thread(
                        _wait, f"event {i} not applied", lambda b=before: rounds() > b,  # type: ignore[misc]
                        process, log, EVENT_TIMEOUT_S,
                    )  # fmt: skip
                await asyncio.sleep(1.0)
                seen = _metrics(port)
                steps = {
                    key.split('"')[1]: value
                    for key, value in _metrics(port, labelled=True).items()
                    if key.startswith("bellows_startup_seconds{")
                }
                status = _proc_status(process.pid)
                children = sampler.peaks()
    return Run(
        capacity=capacity,
        optimizer=optimizer,
        running=int(seen.get("bellows_running_jobs", 0)),
        queued=int(seen.get("bellows_queue_length", 0)),
        rounds=int(seen.get("bellows_rounds_total", 0)),
        startup_s=startup_s,
        status=status,
        steps=steps,
        cache=label,
        kernels=sum(1 for _ in cache.glob("*-cache")),
        children=children,
    )


def _step(steps: dict[str, float], name: str) -> str:
    return f"{steps[name]:.3f}" if name in steps else "n/a"


def _csv(kind: Any) -> Any:
    def parse(text: str) -> list[Any]:
        return [kind(part) for part in text.split(",") if part]

    return parse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--capacity", type=_csv(int), default=[64, 1250])
    parser.add_argument("--optimizer", type=_csv(str), default=["numpy", "auto"])
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--no-warm", action="store_true", help="JAX paths once, cold")
    parser.add_argument("--placement", choices=["pack", "nodes"], default="pack")
    args = parser.parse_args()
    bad = [o for o in args.optimizer if o not in METHODS]
    if bad:
        parser.error(f"--optimizer {bad[0]!r}: expected one of {', '.join(METHODS)}")
    configure_logging(LoggingSettings(level=LogLevel.ERROR))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    runs = []
    for capacity in args.capacity:
        for optimizer in args.optimizer:
            labels = (
                ["-"] if optimizer == "numpy" else ["cold"] if args.no_warm else ["cold", "warm"]
            )
            with tempfile.TemporaryDirectory(prefix="bellows-jax-") as cache:
                for label in labels:
                    runs.append(asyncio.run(_measure(
                        args.jobs, capacity, optimizer, args.events, args.seed, Path(cache), label,
                        args.placement,
                    )))  # fmt: skip
    print(f"\nbellows controller process holding {args.jobs} jobs, after start-up and "
          f"{args.events} events, placement {args.placement}; MiB; start-up steps in s "
          "(bellows_startup_seconds)")  # fmt: skip
    print("| GPUs | optimizer | cache | running / queued | to first round | rebuild | first round "
          "| rehearsal | kernels | RSS | peak | anon | file | peak / target "
          "| children's peak | with children |")  # fmt: skip
    print("|---" * 16 + "|")
    for run in runs:
        s, t = run.status, run.steps
        target = MEMORY_TARGET_MIB.get(run.optimizer, JAX_TARGET_MIB)
        print(
            f"| {run.capacity} | {run.optimizer} | {run.cache} | {run.running} / {run.queued} | "
            f"{run.startup_s:.1f} | {_step(t, 'rebuild')} | {_step(t, 'first-round')} | "
            f"{_step(t, 'rehearsal')} | {run.kernels} | "
            f"{s['VmRSS']:.1f} | {s['VmHWM']:.1f} | {s['RssAnon']:.1f} | {s['RssFile']:.1f} | "
            f"**{s['VmHWM'] / target:.2f}** | {_mib(run.children['children'])} | "
            f"{run.children['together']:.1f} |"
        )


def _mib(value: float) -> str:
    return f"{value:.1f}" if value else "-"


if __name__ == "__main__":
    main()
