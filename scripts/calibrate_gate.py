"""Judge the runs of ``scripts/calibrate_gate.sh`` against their baseline with the gate's time rule.

    .venv/bin/python scripts/calibrate_gate.py DIR [--rule KEY=VALUE ...]

DIR holds ``baseline.jsonl``, ``same-N.jsonl`` (unchanged reruns) and ``slow-N.jsonl`` (every step
made 2x slower). Prints, per run, the cells the time rule flags; then false positives (unchanged
cells flagged as regressions) and false negatives (slowed cells not flagged), counted in cells and in
runs, and the ratio of each kind of run per model family. ``--rule ratio=1.4`` tries other settings.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from dataclasses import fields, replace
from pathlib import Path

from gradeff.gate.rules import REGRESSION, TimeRule
from gradeff.records.store import latest_by_cell, read_records


def _runs(directory: Path, kind: str) -> list[Path]:
    return sorted(directory.glob(f"{kind}-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--rule", action="append", default=[], metavar="KEY=VALUE", help="a TimeRule setting")
    args = parser.parse_args(argv)
    rule = TimeRule()
    types = {f.name: f.type for f in fields(TimeRule)}
    for setting in args.rule:
        key, _, value = setting.partition("=")
        rule = replace(rule, **{key: {"float": float, "int": int}[types[key]](value)})
    baseline = latest_by_cell(read_records(args.directory / "baseline.jsonl"))
    print(f"rule: {rule}")
    counts = {}
    families: dict[str, dict[str, list[int]]] = {"same": defaultdict(lambda: [0, 0]),
                                                 "slow": defaultdict(lambda: [0, 0])}
    ratios: dict[str, dict[str, list[float]]] = {"same": defaultdict(list), "slow": defaultdict(list)}
    for kind in ("same", "slow"):
        cells = runs = wrong_cells = wrong_runs = 0
        for path in _runs(args.directory, kind):
            current = latest_by_cell(read_records(path))
            flagged, wrong = [], []
            for cell, before in baseline.items():
                if cell not in current or current[cell].status != "ok" or before.status != "ok":
                    continue
                row = rule.compare(before, current[cell])
                ratios[kind][before.model].append(row.ratio)
                regression = row.verdict == REGRESSION
                flagged += [cell] if regression else []
                # An unchanged cell flagged, or a slowed one let through, is the rule's mistake.
                if regression == (kind == "same"):
                    wrong.append(f"{cell} ×{row.ratio:.2f} ({row.note})")
                families[kind][before.model][0] += regression == (kind == "same")
                families[kind][before.model][1] += 1
                cells += 1
            runs += 1
            wrong_cells += len(wrong)
            # A run is judged as the gate judges it: one flagged cell fails it.
            run_wrong = bool(flagged) if kind == "same" else len(wrong) > 0
            wrong_runs += run_wrong
            print(f"{path.name}: {len(flagged)} of {len(current)} cells flagged" + "".join(f"\n    {w}" for w in wrong))
        counts[kind] = (wrong_cells, cells, wrong_runs, runs)
    fp, fn = counts["same"], counts["slow"]
    print(f"false positives: {fp[0]} of {fp[1]} unchanged cells, {fp[2]} of {fp[3]} unchanged runs failed")
    print(f"false negatives: {fn[0]} of {fn[1]} slowed cells passed, {fn[2]} of {fn[3]} slowed runs with a "
          "slowed cell let through")
    for kind, what in (("same", "false positives"), ("slow", "false negatives")):
        print(f"{what} by model: " + ", ".join(f"{model} {wrong} of {total}"
                                             for model, (wrong, total) in families[kind].items()))
    for kind, by_model in ratios.items():
        for model, values in by_model.items():
            print(f"{kind} {model}: ratio min {min(values):.2f}, median {statistics.median(values):.2f}, "
                  f"max {max(values):.2f} (n={len(values)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
