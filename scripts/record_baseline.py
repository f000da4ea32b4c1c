"""Record the CI gate's baseline from this checkout's root: ``gradeff baseline record``
(gradeff/gate/baseline_record.py).

    .venv/bin/python scripts/record_baseline.py                      # baselines/tiny-cpu.jsonl + .perturbed.jsonl
    .venv/bin/python scripts/record_baseline.py --out B.jsonl -- benchmarks/test_grid.py -m "cell(model='llm')"
"""

import os
import sys
from pathlib import Path

from gradeff.cli import main

if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parents[1])
    raise SystemExit(main(["baseline", "record", *sys.argv[1:]]))
