#!/usr/bin/env python3
"""Lint and render charts/bellows with Helm's engine, for machines without the helm binary.

Uses helm-python-sdk (the Helm Go SDK behind a C ABI; in the project's dev extra). The
output is what ``helm template`` prints, so it can be piped to ``kubectl apply -f -``::

    python hack/render_chart.py --lint
    python hack/render_chart.py -f my-values.yaml --namespace bellows-system > bellows.yaml

Values files are merged left to right over the chart's defaults, as with ``helm -f``.
Exit status 1: lint found warnings or errors, or the values broke the schema.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "bellows"


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", "--values", type=Path, action="append", default=[])
    parser.add_argument("--namespace", default="bellows-system")
    parser.add_argument("--release", default="bellows")
    parser.add_argument("--lint", action="store_true", help="lint instead of rendering")
    args = parser.parse_args(argv)
    values: dict[str, Any] = {}
    for path in args.values:
        _merge(values, yaml.safe_load(path.read_text()) or {})
    if args.lint:
        report = helm.lint(str(CHART), values, strict=True, namespace=args.namespace)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        for message in report["messages"]:
            print(f"[{message['severity']}] {message['path']}: {message['error']}")
        for error in report["errors"]:
            print(f"error: {error}")
        print(f"1 chart linted, {len(problems) + len(report['errors'])} problems")
        return 1 if problems or report["errors"] else 0
    try:
        with helm.Chart.load(str(CHART)) as chart:
            files = chart.render(
                values, name=args.release, namespace=args.namespace, is_install=True
            )
    except (helm.HelmValuesError, helm.HelmRenderError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for path, text in sorted(files.items()):
        if path.endswith(".yaml") and text.strip():
            sys.stdout.write(f"---\n# Source: {path}\n{text.strip()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
