"""A Pollux reference policy for the simulator (issue 29, item 6): used only to compare.

Our own reimplementation of the policy that Pollux (Qiao et al., "Pollux: Co-adaptive
Cluster Scheduling for Goodput-Optimized Deep Learning", OSDI'21) publishes, from the paper
and its public artifact, not Pollux's code: every ``interval_s`` (60 s) it re-allocates
every job's GPUs, per node, to maximise the power mean (p = -1) of the jobs' goodput
speedups over their fair share, each move discounted by the restart factor; see
:mod:`bellows.sim.pollux.policy` and docs/simulator.md for what is simplified.
"""

from bellows.sim.pollux.policy import POLLUX_INTERVAL_S, PolluxPolicy, Retune

__all__ = ["POLLUX_INTERVAL_S", "PolluxPolicy", "Retune"]
