"""Calibrate `gradeff ab` on this machine: false alarms on unchanged code, misses on a known slowdown.

Runs the A/B of CI's cells (``.ci/ab-cells``) several times against HEAD itself (unchanged) and against revisions
whose every optimizer step is made x1.10 and x1.25 slower (``tests/gate/slowdown_plugin.py``, spinning: the extra
time is CPU work, as a slower code path's would be), the cases interleaved run by run so that the machine's load
changes hit each alike; optionally under a competing load of its own (``--load stress``: ``stress-ng --cpu 2``, else
two busy Python processes). Each run's verdicts and raw slice times go to ``DIR/<load>-<case>-<i>.json`` with the
load average around it; ``--summary`` prints the table of docs/gate.md from whatever runs are there (an interrupted
calibration resumes: a run whose file exists is not run again), re-judged at each ``--thresholds`` and, from the
first rounds of each run, at each ``--rounds-at``.

    .venv/bin/python scripts/calibrate_ab.py --runs 20 --load stress [--dir results/calibrate-ab]
    .venv/bin/python scripts/calibrate_ab.py --summary --thresholds 0.03,0.05

The slowed revisions are commits made here (in a temporary worktree, never on a branch) on top of HEAD, with
``gradeff/cell/loop.py``'s ``optimizer_step`` wrapped by the plugin; they are removed with their refs at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {"unchanged": None, "x1.10": 1.10, "x1.25": 1.25}
REF = "refs/gradeff-calibration/"


def _slowed(factor: float) -> str:
    """What a slowed commit appends to gradeff/cell/loop.py: every optimizer step ``factor`` times slower, spinning."""
    sys.path.insert(0, str(ROOT))
    from tests.gate.injection import loader_source  # noqa: PLC0415 - importable once the root is on sys.path

    return loader_source("slowdown_plugin",
                         f'optimizer_step = _load_slowdown_plugin().slowed(optimizer_step, {factor}, "spin")',
                         comment=f"Calibration of `gradeff ab` (scripts/calibrate_ab.py): every optimizer step made "
                                 f"{factor}x slower, spinning.")


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def ci_cells() -> list[str]:
    lines = (ROOT / ".ci" / "ab-cells").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def slowed_commit(base: str, factor: float) -> str:
    """A commit on top of ``base`` whose optimizer steps are ``factor`` times slower (kept by a ref of its own)."""
    folder = Path(tempfile.mkdtemp(prefix="gradeff-calibrate-"))
    tree = folder / "tree"
    try:
        git("worktree", "add", "--detach", "--quiet", str(tree), base)
        loop = tree / "gradeff" / "cell" / "loop.py"
        loop.write_text(loop.read_text(encoding="utf-8") + _slowed(factor), encoding="utf-8")
        subprocess.run(["git", "-C", str(tree), "-c", "user.name=calibration", "-c", "user.email=calibration@localhost",
                        "commit", "--quiet", "--no-verify", "-am", f"calibration: optimizer steps x{factor} slower"],
                       check=True)
        commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True, capture_output=True,
                                text=True).stdout.strip()
        git("update-ref", f"{REF}x{factor}", commit)
        return commit
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            git("worktree", "remove", "--force", str(tree))
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def competing_load(kind: str):
    """Two busy processes for the duration (``stress``), or nothing (``none``)."""
    if kind == "none":
        yield
        return
    if shutil.which("stress-ng"):
        procs = [subprocess.Popen(["stress-ng", "--cpu", "2", "--quiet"], stdout=subprocess.DEVNULL)]
    else:
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_once(path: Path, base: str, current: str, args: argparse.Namespace) -> None:
    before, started = load_average(), time.time()
    command = [sys.executable, "-m", "gradeff", "ab", base, "--current", current, "--cells", ",".join(args.cells),
               "--rounds", str(args.rounds), "--slice-steps", str(args.slice_steps), "--json", str(path)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if not path.exists():
        print(f"calibrate: run failed (exit {proc.returncode}): {proc.stderr[-1500:]}", file=sys.stderr)
        return
    data = json.loads(path.read_text(encoding="utf-8"))
    data["calibration"] = {"load": args.load, "load_before": before, "load_after": load_average(),
                           "started": started, "exit": proc.returncode}
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")


def measure(args: argparse.Namespace) -> None:
    base = git("rev-parse", "HEAD")
    args.dir.mkdir(parents=True, exist_ok=True)
    revisions = {}
    try:
        for case in args.cases:
            revisions[case] = base if CASES[case] is None else slowed_commit(base, CASES[case])
        with competing_load(args.load):
            for i in range(1, args.runs + 1):
                for case in args.cases:
                    path = args.dir / f"{args.load}-{case}-{i}.json"
                    if path.exists():
                        continue
                    print(f"calibrate: {args.load} {case} run {i} of {args.runs} ({time.strftime('%H:%M:%S')}, "
                          f"load {load_average():.1f})", flush=True)
                    run_once(path, base, revisions[case], args)
    finally:
        for case, factor in CASES.items():
            if factor is not None and case in revisions:
                with contextlib.suppress(subprocess.CalledProcessError):
                    git("update-ref", "-d", f"{REF}x{factor}")


def _interval(logs: list[float]) -> tuple[float, float, float]:
    from scipy import stats

    mean = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def _rejudged(cell: dict, rounds: int | None) -> tuple[float, float, float] | None:
    """A cell's ratio and interval from its first ``rounds`` rounds (all: as judged), on the run's clock."""
    if rounds is None:
        return (cell["ratio"], cell["low"], cell["high"]) if cell["ratio"] is not None else None
    clock = 3 if cell.get("clock", "cpu") == "cpu" else 2
    by_round: dict[int, dict[str, list[float]]] = {}
    for side, r, _seconds, _cpu, steps in cell["slices"]:
        value = _cpu if clock == 3 else _seconds
        if r < rounds and value and steps:
            by_round.setdefault(r, {}).setdefault(side, []).append(value / steps)
    logs = [math.log(statistics.fmean(s["current"]) / statistics.fmean(s["base"])) for s in by_round.values()
            if "current" in s and "base" in s]
    return _interval(logs) if len(logs) >= 2 else None


def summary(args: argparse.Namespace) -> None:
    runs = sorted(args.dir.glob("*.json"))
    if not runs:
        print(f"calibrate: no runs in {args.dir}")
        return
    by_key: dict[tuple[str, str], list[dict]] = {}
    for path in runs:
        data = json.loads(path.read_text(encoding="utf-8"))
        load, case, _ = path.stem.rsplit("-", 2)
        by_key.setdefault((load, case), []).append(data)
    print("| load | case | rounds | threshold | runs | load average | run time | ratio per cell (range) | "
          "median min. detectable | false alarms: cells, runs | misses: cells |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (load, case), datas in sorted(by_key.items(), key=lambda kv: (kv[0][0], list(CASES).index(kv[0][1]))):
        loads = [d["calibration"]["load_before"] for d in datas] + [d["calibration"]["load_after"] for d in datas]
        seconds = [d["seconds"] for d in datas]
        for rounds in [None, *args.rounds_at]:
            for threshold in args.thresholds:
                judged = [[_rejudged(c, rounds) for c in d["cells"]] for d in datas]
                cells = [j for run in judged for j in run if j is not None]
                alarms = [[j for j in run if j is not None and j[1] > 1 + threshold] for run in judged]
                detectable = [(1 + threshold) * r / lo for r, lo, _ in cells]
                flagged = sum(len(a) for a in alarms)
                shown_rounds = rounds or datas[0]["settings"]["rounds"]
                scale = shown_rounds / datas[0]["settings"]["rounds"]
                if case == "unchanged":
                    verdict = (f"{flagged} of {len(cells)}, {sum(bool(a) for a in alarms)} of {len(datas)} runs", "")
                else:
                    verdict = ("", f"{len(cells) - flagged} of {len(cells)}")
                print(f"| {load} | {case} | {shown_rounds} | {threshold:.0%} | {len(datas)} | "
                      f"{min(loads):.1f} - {max(loads):.1f} | {statistics.median(seconds) * scale:.0f} s "
                      f"(max {max(seconds) * scale:.0f} s) | "
                      f"x{min(c[0] for c in cells):.3f} - x{max(c[0] for c in cells):.3f} | "
                      f"x{statistics.median(detectable):.3f} | {verdict[0]} | {verdict[1]} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each case (default 5)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    parser.add_argument("--load", choices=("none", "stress"), default="none",
                        help="stress: add two busy processes during the runs (default none)")
    parser.add_argument("--dir", type=Path, default=ROOT / "results" / "calibrate-ab")
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--slice-steps", type=int, default=4)
    parser.add_argument("--cells", default=None, help="comma-separated cell ids (default: .ci/ab-cells)")
    parser.add_argument("--summary", action="store_true", help="only print the table of the runs in --dir")
    parser.add_argument("--thresholds", default="0.05", help="thresholds the summary judges at (default 0.05)")
    parser.add_argument("--rounds-at", default="", help="also judge each run on its first N rounds (e.g. 8,12)")
    args = parser.parse_args(argv)
    args.cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case {', '.join(unknown)}; cases: {', '.join(CASES)}")
    args.cells = args.cells.split(",") if args.cells else ci_cells()
    args.thresholds = [float(t) for t in args.thresholds.split(",")]
    args.rounds_at = [int(r) for r in args.rounds_at.split(",") if r]
    os.chdir(ROOT)
    if not args.summary:
        measure(args)
    summary(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
