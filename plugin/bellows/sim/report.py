"""The reproduction report: our numbers beside the paper's, as Markdown, with the figures;
then *Beyond the paper*: paper mode, the event-driven baseline and Bellows mode side by side."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bellows.autoscaler import DEFAULT_RESTART_S
from bellows.scaling import default_cluster, tsf_tables
from bellows.sim.comparing import COLUMNS, POLICIES, PolicyRun, Scenario, Source, detailed, row
from bellows.sim.plots import plot_batches, plot_completed, plot_jct_cdf, plot_usage
from bellows.sim.reproduce import Beyond, Outcome
from bellows.sim.workloads.categories import CATEGORIES, K_MAX
from bellows.sim.workloads.generating import arrival_rates, literal_load_high

__all__ = ["beyond_section", "verdict", "write_figures", "write_report"]

_COMPARABLE = 0.10  # |gain| within 10 % counts as "comparable"


def verdict(outcome: Outcome) -> str:
    """Does the paper's direction hold in our run? One short phrase."""
    claim = outcome.experiment.claim
    el, ba = outcome.summaries
    checks: list[bool] = []
    gain = outcome.jobs_gain
    if claim.jobs_gain is not None and gain is not None:
        if claim.jobs_gain > _COMPARABLE:
            checks.append(gain > _COMPARABLE)
        else:
            checks.append(abs(gain) <= _COMPARABLE)
    if claim.jct_elastic is not None and claim.jct_baseline is not None:
        checks.append((el["avg_jct_min"] or 0.0) < (ba["avg_jct_min"] or 0.0))
    if not checks:
        return "n/a"
    return "holds" if all(checks) else "differs"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:+.0f}%"


def _num(value: Any, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def write_figures(outcomes: Sequence[Outcome], figures: Path) -> dict[str, list[Path]]:
    """Completed-jobs curves for every experiment, GPUs and batches for the large ones."""
    figures.mkdir(parents=True, exist_ok=True)
    out: dict[str, list[Path]] = {}
    for o in outcomes:
        key = o.experiment.key
        el, ba = o.summaries
        paths = [
            plot_completed(
                {"elastic": el["completed_over_time"], "baseline": ba["completed_over_time"]},
                figures / f"{key}-completed.png",
                title=f"{o.experiment.figure}: {o.experiment.title}",
            )
        ]
        if key in {"fig7b", "fig9b"}:
            results = {"elastic": o.elastic, "baseline": o.baseline}
            paths.append(
                plot_usage(
                    results,
                    figures / f"{key}-gpus.png",
                    title=f"{o.experiment.figure}: GPUs in use and jobs waiting",
                )
            )
            paths.append(
                plot_batches(o.elastic, figures / f"{key}-batches.png", title=f"{key} elastic")
            )
        out[key] = paths
    return out


def _row(o: Outcome) -> str:
    el, ba = o.summaries
    e = o.experiment
    return (
        f"| {e.figure} | {e.title} | {e.claim.text} | "
        f"{el['jobs_completed']} / {ba['jobs_completed']} of {el['jobs_total']} "
        f"({_pct(o.jobs_gain)}) | {_num(el['avg_jct_min'])} / {_num(ba['avg_jct_min'])} | "
        f"{_num(el['sjs_efficiency'], 2)} / {_num(ba['sjs_efficiency'], 2)} | "
        f"{_num(el['drop_ratio'], 2)} / {_num(ba['drop_ratio'], 2)} | "
        f"{_num(el['offered_load'], 2)} | **{verdict(o)}** |"
    )


def _scaling_table() -> list[str]:
    """TSF(k) of each elastic category under the JSA's model: best batch, Min-BS, Max-BS."""
    cluster = default_cluster()
    ks = (1, 2, 4, K_MAX)
    lines = [
        "TSF(k) under the JSA's cluster model (`bellows.scaling.default_cluster`), for the "
        "elastic policy's best batch and for the fixed Min-BS / Max-BS baselines:",
        "",
        "| category | policy | " + " | ".join(f"k={k}" for k in ks) + " |",
        "|---|---|" + "---|" * len(ks),
    ]
    for c in (c for c in CATEGORIES.values() if c.elastic):
        for label, batch, fixed in (
            ("elastic", c.b_max, False),
            ("Min-BS", c.b_min, True),
            ("Max-BS", c.b_max, True),
        ):
            job = c.job(f"c{c.number}", batch_size=batch, work=1.0)
            row = tsf_tables([job], cluster, fixed_batch=fixed).values[0]
            cells = " | ".join("-" if not np.isfinite(row[k]) else f"{row[k]:.2f}" for k in ks)
            lines.append(f"| {c.number} ({c.model_name}) | {label} | {cells} |")
    return lines


def _setup(outcomes: Sequence[Outcome]) -> list[str]:
    lines = ["## Setup", ""]
    lines.append("| category | label | model (Pollux, T4) | b_min..b_max | m_max | k_max |")
    lines.append("|---|---|---|---|---|---|")
    for c in CATEGORIES.values():
        k = K_MAX if c.elastic else 4
        lines.append(
            f"| {c.number} | {c.label} | {c.model_name} | {c.b_min}..{c.b_max} | {c.m_max} | "
            f"{k}{'' if c.elastic else ' (fixed)'} |"
        )
    lines += ["", *_scaling_table()]
    first = outcomes[0].experiment.workload if outcomes else None
    lines.append("")
    if first is not None:
        high, _ = arrival_rates(first)
        lines.append(
            f"Arrival rates: high = `load_high * G / E[len]` with `load_high = "
            f"{first.load_high:g}` (e.g. {high * 3600:.0f} jobs/h on {first.gpus} GPUs for "
            f"{first.categories}); low = high / 4. The paper's literal `k_max * lambda` would be "
            f"`load_high = {literal_load_high(first):.2f}` on {first.gpus} GPUs. "
            "Delta = 10 min; both policies run on the same trace."
        )
    return lines


def write_report(
    outcomes: Sequence[Outcome],
    path: Path,
    *,
    figures: Path,
    command: str,
    notes: str,
    beyond: Beyond | None = None,
    drawn: Mapping[str, list[Path]] | None = None,
) -> Path:
    """Write the Markdown report to ``path`` (figures referenced relative to it): the paper's
    experiments in ``outcomes``, then *Beyond the paper* when ``beyond`` is given.

    ``drawn``: figures already drawn while the runs went on, by experiment key
    (:func:`write_figures`) and by :func:`scenario_key` (:func:`scenario_figures`); the
    others are drawn here. The report is the same either way."""
    drawn = drawn or {}
    lines = [
        "# Reproducing the paper's evaluation",
        "",
        f"Generated by `{command}`; every number below comes from that command.",
        "",
    ]
    if outcomes:
        lines += _paper_part(outcomes, path, figures=figures, notes=notes, drawn=drawn)
    if beyond:
        lines += beyond_section(beyond, figures=figures, report=path, drawn=drawn)
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def _paper_part(
    outcomes: Sequence[Outcome],
    path: Path,
    *,
    figures: Path,
    notes: str,
    drawn: Mapping[str, list[Path]],
) -> list[str]:
    todo = [o for o in outcomes if o.experiment.key not in drawn]
    figs = {**drawn, **write_figures(todo, figures)}
    lines = [
        "The paper's experiments run its own autoscaler (paper mode, "
        "`AutoscalerConfig.paper`: rounds every 10 minutes, no restart cost, no backfill, a",
        "queue only where the paper had one). Columns give **elastic / baseline**. Jobs",
        "completed are counted at the end of the arrival window (as the paper reads its",
        "curves); JCT, SJS efficiency and drop ratio cover the whole run. *Verdict* says",
        "whether the paper's direction holds.",
        "",
        *_setup(outcomes),
        "",
        "## Results",
        "",
        "| figure | experiment | paper | jobs completed | avg JCT (min) | SJS eff. "
        "| drop ratio | offered load | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
        *(_row(o) for o in outcomes),
        "",
        notes.strip(),
        "",
        "## Figures",
        "",
    ]
    for o in outcomes:
        for fig in figs[o.experiment.key]:
            lines.append(f"![{o.experiment.figure} {fig.stem}]({_rel(fig, path)})")
        lines.append("")
    return lines


def _rel(fig: Path, report: Path) -> str:
    return (fig.relative_to(report.parent) if fig.is_relative_to(report.parent) else fig).as_posix()


_LABELS = {"paper": "paper mode", "baseline": "event-driven baseline", "bellows": "Bellows mode"}
_COMPACT = ("avg_jct_min", "p99_jct_min", "makespan_min", "utilization")


def _ratios(runs: dict[str, PolicyRun]) -> str:
    mine = runs["bellows"].summary.get("avg_jct_min")
    parts = []
    for other in ("paper", "baseline"):
        theirs = runs[other].summary.get("avg_jct_min")
        if mine and theirs:
            parts.append(f"{mine / theirs:.2f}x {_LABELS[other]}'s")
    return "Bellows mode's avg JCT is " + " and ".join(parts) + "." if parts else ""


def _full_table(runs: dict[str, PolicyRun]) -> list[str]:
    lines = [
        "| policy | " + " | ".join(c.header for c in COLUMNS) + " |",
        "|---|" + "---|" * len(COLUMNS),
    ]
    for policy in POLICIES:
        cells = " | ".join(c.cell(row(runs[policy])) for c in COLUMNS)
        lines.append(f"| {_LABELS[policy]} | {cells} |")
    return lines


def _compact_table(group: Beyond) -> list[str]:
    """One row per trace: each of four figures for paper / baseline / Bellows."""
    columns = [c for c in COLUMNS if c.key in _COMPACT]
    lines = [
        "| trace | GPUs | jobs | "
        + " | ".join(f"{c.header}: paper / baseline / Bellows" for c in columns)
        + " |",
        "|---|---|---|" + "---|" * len(columns),
    ]
    for scenario, runs in group:
        first = runs["bellows"]
        cells = " | ".join(" / ".join(c.cell(row(runs[p])) for p in POLICIES) for c in columns)
        name = scenario.title.split(" (")[0]
        lines.append(f"| {name} | {first.gpus} | {first.summary['jobs_total']} | {cells} |")
    return lines


def scenario_key(scenario: Scenario) -> str:
    """The key of a scenario's figures in :func:`write_report`'s ``drawn``."""
    return f"beyond/{scenario.key}"


def scenario_figures(
    scenario: Scenario, runs: Mapping[str, PolicyRun], figures: Path
) -> list[Path]:
    """A detailed scenario's two figures: job completion times and GPUs in use."""
    figures.mkdir(parents=True, exist_ok=True)
    results = {_LABELS[p]: r.result for p, r in runs.items() if r.result is not None}
    if not results:
        return []
    name = scenario.title.split(" (")[0]
    return [
        plot_jct_cdf(results, figures / f"beyond-{scenario.key}-jct.png",
                     title=f"{name}: job completion times"),
        plot_usage(results, figures / f"beyond-{scenario.key}-usage.png",
                   title=f"{name}: GPUs in use and jobs waiting"),
    ]  # fmt: skip


def beyond_section(
    beyond: Beyond,
    *,
    figures: Path,
    report: Path,
    drawn: Mapping[str, list[Path]] | None = None,
) -> list[str]:
    """The *Beyond the paper* section: a table and two figures per generated trace, per ITP
    replay and for the first Pollux workload; one compact table over every Pollux workload."""
    figures.mkdir(parents=True, exist_ok=True)
    lines = [
        "## Beyond the paper",
        "",
        "The experiments above run the paper's autoscaler. Bellows' default goes further "
        "(`docs/autoscaler.md`): a job that finds free GPUs starts at once, GPUs freed by a "
        "completion go to waiting jobs at once, and only rounds take GPUs from running jobs, "
        "at a price. Here three policies run on the same traces, each **with a queue** and "
        f"each charged **{DEFAULT_RESTART_S:g} s of lost progress per halt** (the simulator "
        "charges it, the optimizer prices it):",
        "",
        "* **paper mode**: the paper's elastic autoscaler (rounds every 10 minutes; every "
        "decision waits for one);",
        "* **event-driven baseline**: the owner's batch size, never changed, on as many GPUs "
        "as it takes, with a round at every arrival and completion (Δ = 0);",
        "* **Bellows mode**: Bellows' default.",
        "",
        "*Idle beside waiting* is the GPU-time left idle while some job waited, as a share of "
        "capacity x time; *over-commit* is the most GPUs held beyond the cluster at any "
        "instant, rebuilt from the run's `jobs.csv` alone; *unfinished* counts jobs neither "
        "finished nor dropped when the run ended. `python benchmarks/policies.py` runs the "
        "400-GPU scenario over three seeds and checks the targets of issue 10.",
        "",
    ]
    drawn = drawn or {}
    pollux = [(s, r) for s, r in beyond if s.source is Source.POLLUX]
    by_scenario = {s.key: (s, r) for s, r in beyond}
    for scenario in detailed([s for s, _ in beyond]):
        runs = by_scenario[scenario.key][1]
        lines += [f"### {scenario.title}", "", *_full_table(runs), "", _ratios(runs), ""]
        figs = drawn.get(scenario_key(scenario))
        for fig in scenario_figures(scenario, runs, figures) if figs is None else figs:
            lines.append(f"![{scenario.key} {fig.stem}]({_rel(fig, report)})")
        lines.append("")
    if pollux:
        lines += [
            "### Every Pollux workload",
            "",
            *_compact_table(pollux),
            "",
        ]
    return lines


NOTES = """
## Where ours differ from the paper, and why

Our categories are fitted to different hardware (Pollux's measurements of six models on
AWS T4 GPUs, four per node, 50 Gb/s between nodes) from the paper's (P100s in a cloud); the
paper's Table I is missing from our copy, so batch ranges follow one rule for every
category (`b_min` = smallest measured per-GPU batch, `b_max = k_max * m_max`). What should
hold is the *direction* of each comparison; the sizes depend on how well the category's
model scales, which the TSF table above shows.

* **Fig. 8(a), Max-BS (gain far below 10x).** At `b_max = 8 * m_max` a baseline job needs
  all 8 of its GPUs, so only 5 run at once on 40 GPUs, and everything arriving while they
  run is dropped at the next round. But ResNet-50 on T4 scales almost linearly at its
  largest batch (TSF(8) = 7.3), so those 5 jobs finish in minutes and the baseline still
  completes a fair share. The paper's 10x needs a category that scales far worse at max
  batch on its cluster. Direction holds; size does not.
* **Fig. 8(b), Min-BS (not "comparable").** The paper saw the Min-BS baseline keep pace
  because small batches fit on one GPU. Ours does fit on one GPU too, but on a T4 ResNet-50
  at 20 samples per GPU processes samples 1.6x slower than at 200 (Min-BS TSF(1) = 0.63),
  so every baseline job runs about 1.6x longer than the elastic one, which picks the best
  batch for its GPU count (the paper's Table II makes the same point).
* **Fig. 8(c) and Fig. 6(a), low arrival (no gain in jobs).** At our low rate (offered load
  about 0.25) nearly every job finds GPUs under both policies, so both complete nearly all
  of them; the elastic policy still wins on SJS efficiency and, with random batches, on JCT.
  The paper's +97 % at low arrival means its low rate still overloaded its baseline: its
  clusters were busier than ours at that rate. With `--load-high 4` (so that the
  low rate offers a load of about 1) the same experiment gives the elastic policy +59 %
  jobs (264 vs 166 of 306, seed 2020). With Max-BS at low load
  (Fig. 8(c)) the baseline already runs every job at its most efficient size (8 GPUs,
  TSF 7.3) so the elastic policy cannot be faster per job; the paper's 16 % came from jobs
  that scale better at larger batches than at the user's.
* **Fig. 7(a), no queue, JCT reversed.** Without a queue, the baseline drops the jobs that
  do not fit at their fixed batch, and the survivors run on several GPUs at large batches,
  so their JCT is short; the elastic policy admits far more jobs by shrinking them to
  fewer GPUs, and each of those runs longer. Jobs completed (+) and SJS efficiency hold;
  the paper's lower elastic JCT without queue does not. With a queue (Fig. 7(b), 9(b)) the
  JCT gap opens the paper's way: the baseline's queue grows through every burst.
* **Fig. 5, categories.** The ordering of gains differs from the paper's (ours is largest
  for the communication-bound category 2): YOLOv3 fits only 16 samples per T4, so a fixed
  random batch (uniform in 4..128) needs several GPUs, where YOLOv3 scales worst
  (TSF(8) = 3.65 at best, table above), while the elastic policy runs it on one GPU at its
  best batch. Category 4 (rigid) is identical under both policies, as in the paper.
* **Queue-mode sizes (Tables III, IV).** On 40 GPUs the paper's shape reproduces closely:
  with a queue the elastic JCT grows by about a third and the baseline's several-fold. On
  400 GPUs our baseline's queue JCT is about 3x the elastic one, the paper's 6x: with our
  calibration the bursty average offered load is about 0.6, and our baseline's jobs scale
  well enough to drain much of the queue in the low phases.

The elastic policy completes at least as many jobs as the baseline in every experiment,
and more wherever the cluster is loaded. No experiment shows the baseline ahead on jobs.
"""
