"""Search the learning rates of the tuned protocol and write them to the committed table.

    .venv/bin/python scripts/tune_rates.py --profile tiny --grid main
    .venv/bin/python scripts/tune_rates.py --profile tiny --grid peft --models vit_s --datasets cifar100
    .venv/bin/python scripts/tune_rates.py --profile tiny --grid main --strategies accum

For every model × optimizer × method × dataset of the grid, on its ``standard`` strategy and on each of its
strategies that changes the effective batch (accumulation: rows of its own, see
:func:`gradeff.axes.strategies.rate_strategy`; ``--models``, ``--optimizers``, ``--methods``, ``--datasets``,
``--strategies`` narrow it) each rate of a log grid of ``--points`` rates over
``--spread`` decades around the optimizer's centre is trained once per seed (``--seeds``) as a tuning trial, scored
by its final validation loss (mean over the seeds; the test split is never read), and the best rate kept. A best
rate at the grid's edge adds the next rate past that edge, up to ``--widen`` times. The rows replace the table's
rows of the same cells (``gradeff/cell/tuned_rates.json``, or ``--table``); the search's provenance (this command,
seeds, grid, epochs, budget in trials and CPU seconds, code version, date) goes beside them.

Budget: cells × seeds × (points + the widening actually used) trials of the profile's epochs, each a cell's
training and one validation pass; ``--epochs`` and ``--train-samples`` bound it where a profile's cells cost
too much (the search's provenance then says so). ``--workers`` trials run side by side, one core each. Exits 1 if a
chosen rate is still at the
edge of the rates tried (widen further, or accept it knowingly), 0 otherwise.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from gradeff.axes.strategies import rate_strategy
from gradeff.cell.protocols import TABLE_PATH, TunedTable
from gradeff.cell.rate_search import SearchSettings, search_cells, tunable_cells
from gradeff.records.outputs import EXIT_INCOMPLETE_OUTPUT, OutputError
from gradeff.specs.profiles import PROFILES
from gradeff.studies.grid import GRIDS, cells


def _keys(text: str | None) -> list[str] | None:
    return [key for key in text.split(",") if key] if text else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", choices=PROFILES, default="tiny")
    parser.add_argument("--grid", choices=tuple(GRIDS), default="main")
    for axis in ("models", "optimizers", "methods", "datasets", "strategies"):
        parser.add_argument(f"--{axis}", default=None, metavar="KEYS",
                            help=f"comma-separated {axis} (default: the grid's)")
    parser.add_argument("--seeds", default="0,1", help="comma-separated seeds, two or more (default 0,1)")
    parser.add_argument("--points", type=int, default=5, help="rates of the first grid (default 5)")
    parser.add_argument("--spread", type=float, default=2.0, help="decades the first grid spans (default 2)")
    parser.add_argument("--widen", type=int, default=4, help="rates the search may add past an edge (default 4)")
    parser.add_argument("--epochs", type=int, default=None, help="epochs per trial (default: the profile's)")
    parser.add_argument("--train-samples", type=int, default=None,
                        help="training samples per epoch of a trial, at most (default: the profile's)")
    parser.add_argument("--workers", type=int, default=2, help="trials side by side, one core each (default 2)")
    parser.add_argument("--cache", default=None, help="pretrained-backbone cache (default $GRADEFF_CACHE)")
    parser.add_argument("--table", default=str(TABLE_PATH), help=f"the table to update (default {TABLE_PATH})")
    args = parser.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    if len(set(seeds)) < 2:
        parser.error("--seeds: a tuned rate is searched over two or more seeds")
    # The strategies with rates of their own among those asked for (default: the grid's): standard, and accumulation
    # where the grid has it; checkpointing and the budget train standard's steps and read its row.
    strategies = _keys(args.strategies) or GRIDS[args.grid].strategies
    own = tuple(dict.fromkeys(rate_strategy(s) for s in strategies))
    selection = {axis: keys for axis in ("models", "optimizers", "methods", "datasets")
                 if (keys := _keys(getattr(args, axis))) is not None}
    todo = tunable_cells(c for c in cells(args.grid, **selection, strategies=list(own)) if c.strategy in own)
    settings = SearchSettings(profile=args.profile, seeds=seeds, points=args.points, spread=args.spread,
                              widen=args.widen, epochs=args.epochs, train_samples=args.train_samples,
                              cache_dir=args.cache)
    command = shlex.join(["scripts/tune_rates.py", *(argv if argv is not None else sys.argv[1:])])
    print(f"searching {len(todo)} cells at {args.profile}: seeds {seeds}, {args.points} rates over {args.spread} "
          f"decades, widening up to {args.widen}", flush=True)
    rows, search_id, provenance = search_cells(todo, settings, workers=args.workers, command=command)
    table = TunedTable.load(args.table).merged(rows, search_id, provenance)
    try:
        table.dump(args.table)
        written = None
    except OutputError as exc:  # the search's rows are still printed below; the old table stays as it was
        print(f"tune_rates: error: {exc}", file=sys.stderr)
        written = EXIT_INCOMPLETE_OUTPUT
    edges = [row for row in rows if row.at_edge]
    for row in rows:
        scores = ", ".join(f"{lr:.3g}: {'failed' if s is None else f'{s:.4f}'}" for lr, s in zip(row.grid, row.scores))
        state = f"tuning-free ({row.tuning_free})" if row.tuning_free else f"lr {row.lr:.3g}" + (
            f" AT THE {row.at_edge.upper()} EDGE" if row.at_edge else "")
        print(f"{row.model}-{row.optimizer}-{row.method}-{row.dataset}-{row.strategy}: {state}  [{scores}]")
    budget = provenance["budget"]
    print(f"{budget['trials']} trials, {budget['cpu_seconds']} CPU s, {budget['wall_seconds']} s; "
          + (f"written to {args.table} as search {search_id}" if written is None else f"NOT written to {args.table}"))
    return written or (1 if edges else 0)


if __name__ == "__main__":
    sys.exit(main())
