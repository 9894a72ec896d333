"""The live controller on the ``numpy`` path never loads JAX (the path for small clusters:
importing JAX alone costs ~125 MiB of resident memory, see docs/live.md)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    from bellows.cli.main import COMMANDS, load_command
    for name in COMMANDS:  # every command (they load lazily), the controller's included
        load_command(name)
    from bellows.autoscaler import Autoscaler
    from bellows.scaling import default_cluster
    from bellows.service.config import load_config
    from bellows.sim.workloads.generating import WorkloadSpec, generate

    settings = load_config(None, env={"BELLOWS_CONTROLLER_OPTIMIZER": "numpy"}).controller
    assert settings.optimizer.value == "numpy", settings.optimizer
    spec = WorkloadSpec(pattern="high", minutes=60, categories=(1, 2, 3, 4), gpus=64)
    trace = generate(spec, np.random.default_rng(3), cluster=default_cluster())
    auto = Autoscaler(settings.autoscaler_config(), capacity=64, cluster=default_cluster())
    for job in trace[:200]:
        auto.arrive(job.spec, 0.0)
    decisions = auto.step(0.0)
    auto.finish(next(iter(auto.allocations)), 60.0)
    decisions += auto.step(auto.next_round_at() or 600.0)
    assert len(auto.allocations) > 10 and decisions, (len(auto.allocations), decisions)
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "jaxlib")))
    """
)


def test_the_numpy_path_runs_rounds_without_importing_jax() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
