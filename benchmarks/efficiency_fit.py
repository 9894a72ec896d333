"""How well the efficiency model predicts the samples a batch size needs to reach a target.

    python benchmarks/efficiency_fit.py [--data DIR] [--until FRACTION] [--embedded]

For each of the six Pollux models, fits :class:`bellows.scaling.EfficiencyProfile` to the
early part of its validation runs only (rows at or below ``--until`` of the reference run's
last progress, default a third) and prints, per measured batch, the samples the run needed
to first reach the model's target metric (``iteration x batch`` at that row) against the
samples the fit predicts for the progress that run had made there, and the error. The last
column ("same progress") predicts instead from the progress at which the *reference* batch
reached the target: it also tests the premise that quality is a function of progress alone.
``--embedded`` prints the profiles fitted to every row (bellows.scaling.MODEL_EFFICIENCY
embeds them; a test keeps them equal). ``--data`` defaults to ``$BELLOWS_DATA`` or
``../shared/data`` beside the checkout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bellows.cli.data import data_folder, no_data_folder
from bellows.scaling.efficiency import EfficiencyProfile, ValidationRun, fit_efficiency
from bellows.scaling.validation import load_validation_runs

# The metric each model's runs all reach, and which way is better: the Pollux paper's targets
# (OSDI'21 Table 1) where the files hold that metric; yolov3's files hold its validation loss
# (the paper's target is mAP), so its target is a loss that every batch reaches.
TARGETS: dict[str, tuple[float, bool]] = {
    "bert": (88.0, True),  # F1
    "cifar10": (0.94, True),  # top-1 accuracy
    "deepspeech2": (25.0, False),  # word error rate
    "imagenet": (0.75, True),  # top-1 accuracy
    "ncf": (0.69, True),  # hit rate
    "yolov3": (13.0, False),  # validation loss
}
LIMIT = 0.20


def reached(run: ValidationRun, target: float, higher: bool) -> int:
    """The first row whose metric is at or past ``target``."""
    for i, value in enumerate(run.metric):
        if (value >= target) if higher else (value <= target):
            return i
    raise SystemExit(f"batch {run.batch} never reaches {target}")


def fit_until(runs: list[ValidationRun], fraction: float, source: str) -> EfficiencyProfile:
    """The profile fitted to the rows at or below ``fraction`` of the reference's progress."""
    return fit_efficiency(runs, until=fraction * runs[0].progress[-1], source=source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--until", type=float, default=1 / 3)
    parser.add_argument("--embedded", action="store_true")
    args = parser.parse_args(argv)
    data = args.data or data_folder()
    if data is None:
        raise SystemExit(no_data_folder())
    profiles = data / "pollux" / "profiles"
    if args.embedded:
        for model in TARGETS:
            runs = load_validation_runs(profiles / model)
            print(model, fit_efficiency(runs))
        return 0
    print(f"Fitted to rows at or below {args.until:.0%} of the reference run's progress.\n")
    print("| model | target | batch | measured samples | predicted | error | same progress |")
    print("|---|---|---:|---:|---:|---:|---:|")
    worst = worst_same = 0.0
    for model, (target, higher) in TARGETS.items():
        runs = load_validation_runs(profiles / model)
        fit = fit_until(runs, args.until, "")
        at_reference = runs[0].progress[reached(runs[0], target, higher)]
        for run in runs:
            row = reached(run, target, higher)
            measured = run.samples[row]
            predicted = float(fit.samples(run.batch, run.progress[row]))
            same = float(fit.samples(run.batch, at_reference))
            error, error_same = predicted / measured - 1, same / measured - 1
            worst, worst_same = max(worst, abs(error)), max(worst_same, abs(error_same))
            print(
                f"| {model} | {target:g} | {run.batch} | {measured:.4g} | {predicted:.4g} "
                f"| {error:+.1%} | {error_same:+.1%} |"
            )
    print(
        f"\nworst |error| {worst:.1%} (limit {LIMIT:.0%}); at the reference's progress "
        f"{worst_same:.1%}"
    )
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
