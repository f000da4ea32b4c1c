#!/usr/bin/env bash
# Measure the time rule's false positives and false negatives on this machine: record the CI slice
# once as a baseline, then RUNS times unchanged and RUNS times with every optimizer step made 2x
# slower (tests/gate/slowdown_plugin.py), alternating so that load changes hit both kinds alike,
# and judge every run against the baseline with the gate's default rules.
#
#   bash scripts/calibrate_gate.sh [RUNS] [DIR] [KINDS]   (default 5 runs, results/calibration, "same slow")
#
# An existing complete DIR/baseline.jsonl (or run file) is kept, so an interrupted calibration
# resumes; KINDS=same and KINDS=slow in two shells record both kinds at once (then run it once more
# with both kinds to get the verdicts).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
dir="${2:-results/calibration}"
kinds="${3:-same slow}"
factor="${GRADEFF_CALIBRATE_FACTOR:-2}"
mkdir -p "$dir"
# One torch thread, as in CI's gate: on a shared machine two spinning OpenMP threads turn a neighbour's
# burst into a 10-100x slower epoch, noise no time rule can see through.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
slice=(benchmarks/test_grid.py --gradeff-optimizers adam,cgd -q -p no:cacheprovider --benchmark-disable)

record() {  # record FILE [env...]: run the slice into FILE unless it is already complete
    local file="$1"; shift
    if [ -f "$file" ] && [ "$(wc -l < "$file")" -ge 24 ]; then return; fi
    rm -f "$file"
    # A failing cell is the gate's business, not a reason to stop measuring.
    env "$@" .venv/bin/python -m pytest "${slice[@]}" --gradeff-results "$file" >/dev/null || true
}

record "$dir/baseline.jsonl"
for i in $(seq 1 "$runs"); do
    echo "calibrate: run $i of $runs ($(date -u +%H:%M:%S))"
    case " $kinds " in *" same "*) record "$dir/same-$i.jsonl" ;; esac
    case " $kinds " in *" slow "*) record "$dir/slow-$i.jsonl" GRADEFF_SLOWDOWN="$factor" PYTHONPATH=tests/gate \
        PYTEST_ADDOPTS="-p slowdown_plugin" ;; esac
done
if [ "$kinds" = "same slow" ]; then
    .venv/bin/python scripts/calibrate_gate.py "$dir"
fi
