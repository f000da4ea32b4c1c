"""Learning-rate protocols and the committed table of tuned rates."""

import json

import pytest

from gradeff.axes.optim import OPTIMIZERS
from gradeff.cell.protocols import TABLE_PATH, TunedRate, TunedTable, choose_rate
from gradeff.studies.grid import GRIDS, cells
from gradeff.studies.hparams import hparams_for, method_hparams_for


def _row(**changes):
    row = dict(profile="tiny", model="llm", optimizer="adam", method="full", dataset="causal_lm", lr=3e-3,
               grid=(1e-3, 3e-3, 1e-2), scores=(3.5, 3.4, None), seeds=(0, 1), search="s1")
    return TunedRate(**row | changes)


def test_the_table_round_trips_through_its_json(tmp_path):
    """Rows (None scores, edge flags, tuning-free rows) and provenance come back equal from the file."""
    table = TunedTable().merged([_row(), _row(optimizer="sgd", lr=0.3, at_edge="high"),
                                 _row(optimizer="cgd", lr=1e-3, grid=(), scores=(), seeds=(), tuning_free="why")],
                                "s1", {"command": "scripts/tune_rates.py", "seeds": [0, 1]})
    path = tmp_path / "rates.json"
    table.dump(path)
    again = TunedTable.load(path)
    assert again == table and again.to_json() == path.read_text()
    assert again.lookup("tiny", "llm", "sgd", "full", "causal_lm").at_edge == "high"
    assert again.lookup("tiny", "llm", "sgd", "full", "dtd") is None


def test_merging_replaces_rows_and_drops_provenance_no_row_uses():
    """A later search of the same cell replaces its row; a search no row refers to any more leaves the table."""
    first = TunedTable().merged([_row()], "s1", {"command": "first"})
    second = first.merged([_row(lr=1e-2, search="s2")], "s2", {"command": "second"})
    assert second.lookup("tiny", "llm", "adam", "full", "causal_lm").lr == 1e-2
    assert set(second.searches) == {"s2"}


def test_a_bad_table_is_refused_with_the_reason(tmp_path):
    """A row whose search is missing, an unknown schema, a score count that does not match the grid."""
    good = json.loads(TunedTable().merged([_row()], "s1", {}).to_json())
    with pytest.raises(ValueError, match="unknown searches"):
        TunedTable.from_json(json.dumps(good | {"searches": {}}))
    with pytest.raises(ValueError, match="schema"):
        TunedTable.from_json(json.dumps(good | {"schema": 99}))
    with pytest.raises(ValueError, match="one score per rate"):
        _row(scores=(1.0,))


def test_protocols_choose_the_table_or_the_shared_rate():
    """tuned: the table's rate replaces the shared one, and says where it came from; without a row, or for a
    tuning-free optimizer, the shared rate with the reason; shared: always the shared rate."""
    table = TunedTable().merged([_row(), _row(optimizer="cgd", grid=(), scores=(), tuning_free="line search")],
                                "s1", {})
    axes = dict(profile="tiny", model="llm", method="full", dataset="causal_lm", shared_lr=1e-3, table=table)
    tuned = choose_rate("tuned", optimizer="adam", **axes)
    assert tuned.lr == 3e-3 and tuned.replaces and "search s1" in tuned.source and "seeds 0,1" in tuned.source
    free = choose_rate("tuned", optimizer="cgd", **axes)
    assert free.lr == 1e-3 and not free.replaces and "line search" in free.source
    missing = choose_rate("tuned", optimizer="sgd", **axes)
    assert missing.lr == 1e-3 and "no rate" in missing.source
    shared = choose_rate("shared", optimizer="adam", **axes)
    assert shared.lr == 1e-3 and not shared.replaces
    with pytest.raises(ValueError, match="valid protocols: tuned, shared"):
        choose_rate("best", optimizer="adam", **axes)


def test_accumulation_reads_its_own_row_and_the_other_strategies_the_standard_one():
    """accum trains a 4× batch in 4× fewer steps: its own tuned row; checkpointing trains standard's very steps:
    standard's row. Without an accum row, standard's, and the source says so."""
    table = TunedTable().merged([_row(lr=3e-3), _row(lr=1e-2, strategy="accum")], "s1", {})
    axes = dict(profile="tiny", model="llm", optimizer="adam", method="full", dataset="causal_lm", shared_lr=1e-3,
                table=table)
    assert choose_rate("tuned", strategy="accum", **axes).lr == 1e-2
    assert "tuned on accum" in choose_rate("tuned", strategy="accum", **axes).source
    assert choose_rate("tuned", strategy="checkpoint", **axes).lr == 3e-3
    assert choose_rate("tuned", strategy="standard", **axes).lr == 3e-3
    only_standard = TunedTable().merged([_row(lr=3e-3)], "s1", {})
    fallback = choose_rate("tuned", strategy="accum", **axes | {"table": only_standard})
    assert fallback.lr == 3e-3 and "no accum row" in fallback.source
    assert table.lookup("tiny", "llm", "adam", "full", "causal_lm", "checkpoint").lr == 3e-3


def test_the_committed_table_covers_the_main_grid_at_tiny_inside_its_grids():
    """Every main-study cell has a tiny row of its own rate strategy (standard's, accumulation's own): a searched
    rate strictly inside the rates tried over two or more seeds, or the optimizer's own reason to have none; every
    row's search has its provenance."""
    from gradeff.axes.strategies import rate_strategy

    table = TunedTable.load(TABLE_PATH)
    for cell in cells("main"):
        row = table.lookup("tiny", cell.model, cell.optimizer, cell.method, cell.dataset, cell.strategy)
        assert row is not None and row.strategy == rate_strategy(cell.strategy), cell.id
        if OPTIMIZERS[cell.optimizer].tuning_free:
            assert row.tuning_free == OPTIMIZERS[cell.optimizer].tuning_free
            continue
        assert row.at_edge is None and min(row.grid) < row.lr < max(row.grid), cell.id
        assert len(set(row.seeds)) >= 2 and row.lr in row.grid
        assert table.searches[row.search]["command"].startswith("scripts/tune_rates.py")
    assert GRIDS["main"].strategies[0] == "standard"


def test_a_tuned_cell_trains_at_the_table_rate_and_says_so(monkeypatch):
    """The runner's rate: the table's under tuned (the method's scale folded in), the shared one under shared."""
    from gradeff.cell.config import RunConfig
    from gradeff.cell.plan import plan_cell
    from gradeff.studies.grid import Cell

    cell = Cell("vit_s", "adamw", "standard", method="lora", dataset="cifar100", grid="peft")
    table = TunedTable().merged([_row(model="vit_s", optimizer="adamw", method="lora", dataset="cifar100",
                                      lr=2e-3)], "s1", {})
    monkeypatch.setattr("gradeff.cell.protocols._LOADED", {TABLE_PATH: table})
    hp, method_hp, rate = plan_cell(cell, RunConfig(protocol="tuned")).settings
    assert hp.lr * method_hp.lr_scale == 2e-3 and method_hp.lr_scale == 1.0 and "tuned table" in rate.source
    hp, method_hp, rate = plan_cell(cell, RunConfig(protocol="shared")).settings
    shared = hparams_for("vit_s", "tiny", dataset="cifar100").lr * method_hparams_for("lora", "vit_s", "tiny").lr_scale
    assert hp.lr * method_hp.lr_scale == shared and rate.source.startswith("shared")


def test_cg_has_no_rate_to_tune():
    """Why CG is tuning-free: its line search brackets away whatever first step lr gives — from 1e-2 to 10, three
    decades, its first 8 steps on the llm's task are the same steps, to the last digit of the loss. (From the
    shared 1e-3 the first bracket starts lower and its path differs: over a whole tiny llm cell, final losses from
    1e-3 to 10 lie within 1.1 % of each other.)"""
    from gradeff.cell.config import RunConfig
    from gradeff.cell.run import run_cell
    from gradeff.studies.grid import Cell

    # A third of an epoch's samples (8 steps) keeps the two runs cheap; the line search acts from the first step.
    losses = [run_cell(Cell("llm", "cgd", "standard"), RunConfig(epochs=1, device="cpu", lr=lr, train_samples=256)
                       ).summary.final_loss for lr in (1e-2, 10.0)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert OPTIMIZERS["cgd"].tuning_free and not any(OPTIMIZERS[k].tuning_free for k in OPTIMIZERS if k != "cgd")
