"""The terminal summary: one table per grid, PEFT rows read by accuracy, pretraining reported once."""

from gradeff.pytest import summary
from gradeff.pytest.summary import summary_lines
from gradeff.records.results import CellRecord, EpochRecord, Summary
from gradeff.studies.grid import GRIDS


def _record(cell, *, grid="main", status="ok", accuracy=None, weights=None, **axes):
    epochs = (EpochRecord(epoch=0, loss=2.0, seconds=0.5, optimizer_steps=8, closure_calls=8, samples=64, targets=64,
                          heldout_loss=1.2 if accuracy is not None else None, heldout_accuracy=accuracy),)
    parts = cell.split("-")
    values = dict(model=parts[0], optimizer="adam", strategy="standard") | axes
    return CellRecord(cell=cell, grid=grid, profile="tiny", seed=0, device="cpu", status=status, epochs=epochs,
                      summary=Summary.of(list(epochs), 1.0), parameters={"total": 2_000_000, "trainable": 43_400},
                      task={"bayes_accuracy": 0.99}, weights=weights or {}, started_at=10.0, finished_at=12.5,
                      meters={"memory": {"parameter_bytes": 2**20, "gradient_bytes": 2**20,
                                         "optimizer_state_bytes": 2**21, "activation_bytes": 2**21}}, **values)


def _peft(cell, **kwargs):
    model, method, strategy, dataset = cell.split("-")
    return _record(cell, grid="peft", optimizer="adamw", strategy=strategy, method=method, dataset=dataset, **kwargs)


def test_each_grid_gets_its_own_table_and_the_peft_one_reads_accuracy():
    """Main cells show losses; PEFT cells accuracy %, Bayes %, trainable/total, training MiB."""
    lines = summary_lines([_record("llm-adam-standard"), _peft("vit_s-lora-standard-dtd", accuracy=0.625)])
    assert lines[0].startswith("[main]") and "train loss" in lines[1]
    peft_header = next(i for i, line in enumerate(lines) if line.startswith("[peft]"))
    assert "acc %" in lines[peft_header + 1]
    row = lines[peft_header + 2].split()
    assert row[:4] == ["vit_s-lora-standard-dtd", "ok", "62.5", "99.0"]
    assert "43.4k/2.00M" in row and "6.00" in row
    assert lines[peft_header + 3].startswith("statuses: ok 2; wall time of the cells 2.5 s")


def test_every_column_a_table_may_leave_out_is_one_of_its_columns_and_every_grid_reads_as_one_table():
    """The tables are data: a column is its title and its text together, so a title to drop names a real column, and
    each grid's focus has its table."""
    for focus, columns in summary._TABLES.items():
        titles = [column.title for column in columns]
        assert len(set(titles)) == len(titles) and titles[0] == "status"
        assert set(summary._DROP[focus]) <= set(titles), focus
    assert {grid.focus for grid in GRIDS.values()} <= set(summary._TABLES)
    assert set(summary._DROP["seeds"]) <= {title for columns in summary._OVER_SEEDS.values() for title, _, _ in columns}


def test_a_single_grid_has_no_grid_heading_and_a_failed_cell_shows_why():
    """One grid prints its table alone; a cell that did not end ok is followed by its reason."""
    lines = summary_lines([_record("llm-adam-standard", status="diverged", detail="loss nan at step 3")])
    assert "train loss" in lines[0]
    assert lines[2].strip() == "loss nan at step 3"


def test_pretraining_is_reported_once_per_backbone_as_run_or_cached():
    """A backbone pretrained by one of the session's cells reads 'this session', whichever cell came last."""
    ran = {"source": "pretrained", "pretraining": {"optimizer_steps": 256, "seconds": 5.5, "heldout_accuracy": 0.86,
                                                   "reused": False}}
    cached = {"source": "pretrained", "pretraining": {**ran["pretraining"], "reused": True}}
    lines = summary_lines([_peft("vit_s-full-standard-dtd", accuracy=0.5, weights=ran),
                           _peft("vit_s-lora-standard-dtd", accuracy=0.5, weights=cached),
                           _peft("tinyvit-lora-standard-dtd", accuracy=0.5, weights=cached)])
    pretrained = [line for line in lines if line.startswith("pretrained")]
    assert pretrained == [
        "pretrained vit_s (this session): 256 steps in 5.5 s, not counted in any cell; source-task held-out "
        "accuracy 86.0 %",
        "pretrained tinyvit (from the cache): 256 steps in 5.5 s, not counted in any cell; source-task held-out "
        "accuracy 86.0 %",
    ]


def test_memory_rows_read_malformed_plans_as_na():
    """A plan with wrongly typed values (hand edits, other versions) prints n/a, not a crash."""
    record = _record("llm-standard", grid="memory", optimizer="adamw")
    broken = CellRecord.from_dict({**__import__("json").loads(record.to_json()),
                                   "plan": {"activation_memory_budget": "x", "budget_bytes": "big",
                                            "checkpointed_layers": None}})
    row = summary_lines([broken])[1].split()
    assert row[:3] == ["llm-standard", "ok", "-"] and row[3:5] == ["n/a", "n/a"]


def test_forward_backward_passes_count_every_micro_batch():
    """f+b: an accumulation step's closure runs one forward and backward per micro-batch (4 here), not one."""
    from tests.analysis.factories import run

    lines = summary_lines([run("llm-sgd-accum"), run("llm-sgd-standard")], width=200)
    header = lines[0].split()
    assert "f+b" in header and "test" in header
    accum = next(line for line in lines if line.startswith("llm-sgd-accum"))
    standard = next(line for line in lines if line.startswith("llm-sgd-standard"))
    # Steps and f+b: 2 epochs × 8 closure calls; × 4 micro-batches under accumulation.
    # The last six columns: steps, f+b, activation and state MiB, RSS MiB, joules.
    assert accum.split()[2] == "2" and accum.split()[-6:-4] == ["16", "64"]
    assert standard.split()[-6:-4] == ["16", "16"]


def test_the_summary_ends_with_one_verdict_line_per_model():
    """The Answer's lines close the summary: the cell to use, then quality, speed, memory, energy; one seed leaves
    every question open."""
    from tests.analysis.factories import run

    lines = summary_lines([run("llm-adam-standard", test=1.0), run("llm-sgd-standard", test=2.0),
                           run("vit-adam-standard", accuracy=0.5), run("vit-sgd-standard", accuracy=0.25)])
    start = next(i for i, line in enumerate(lines) if line.startswith("answer — use: best quality"))
    vit = lines.index("vit: use adam for now: quality open against sgd")
    llm = lines.index("llm: use adam for now: quality open against sgd")
    assert start < vit < llm and llm - vit <= 3 and len(lines) - llm <= 3
    vit_state, llm_state = " ".join(lines[vit + 1:llm]), " ".join(lines[llm + 1:])
    assert vit_state.startswith("  open (n=1: one seed cannot be tested): test top-1 accuracy adam 50.0 %")
    assert llm_state.startswith("  open (n=1: one seed cannot be tested): test loss adam 1, memory")
    assert "speed n/a" in llm_state and "energy follows time" in llm_state
    assert summary_lines([run(grid="memory", cell="llm-standard")])[-1].startswith("energy source")


def test_time_to_target_reads_steps_not_reached_or_na_and_protocols_are_named():
    """The main table's `to target` column: steps where reached, `not reached` where the test loss never got
    there, `n/a` without a test split; one line per protocol says where the cells' rates came from."""
    import dataclasses

    from gradeff.pytest.summary import target_text

    base = _record("llm-adam-standard").summary
    assert target_text(dataclasses.replace(base, steps_to_target=36, target_reached=True)) == "36 steps"
    assert target_text(dataclasses.replace(base, target_reached=False)) == "not reached"
    assert target_text(base) == "n/a"
    tuned = dataclasses.replace(_record("llm-adam-standard"), hparams={"protocol": "tuned",
                                                                        "lr_source": "tuned table: search s1"},
                                summary=dataclasses.replace(base, target_reached=False))
    shared = dataclasses.replace(_record("llm-sgd-standard", optimizer="sgd"),
                                 hparams={"protocol": "tuned", "lr_source": "shared: no rate"})
    lines = summary_lines([tuned, shared])
    assert "not reached" in lines[1]
    assert "learning rates: protocol tuned — shared 1, tuned table 1" in lines  # cells in the registry order


def test_long_ids_are_cut_with_an_ellipsis_and_columns_stay_aligned():
    """A 60-character model key: its id is cut to ID_WIDTH with '…', every row's status starts in one column, and
    no number is cut even on a narrow terminal."""
    from gradeff.pytest.summary import ID_WIDTH

    long_model = "x" * 60
    records = [_record("llm-adam-standard"), _record(f"{long_model}-adam-standard", model=long_model)]
    assert summary_lines(records, width=200, answer=False)[2].startswith("x" * (ID_WIDTH - 1) + "…")
    lines = summary_lines(records, width=60, answer=False)
    header, short, cut = lines[0], lines[1], lines[2]
    assert cut.startswith("x") and "…" in cut and f"{long_model}-adam" not in cut
    assert {line.index(" ok ") for line in (short, cut)} == {header.index("status") - 1}
    assert short.split()[2:] == cut.split()[2:] and all(len(line) <= 60 for line in lines)
    assert not [line for line in lines if line.startswith("answer:")]


def test_each_grid_names_its_strongest_trivial_baseline_under_its_table_without_widening_it():
    """A line per model and dataset under the table, on the table's own metric (a loss for text, top-1 % for
    images), the flag in the Answer's line; records without baselines print none."""
    from tests.analysis.factories import run

    text = {"trivial_baselines": {"unigram": {"metric": "loss", "value": 4.4, "what": ""},
                                  "bigram": {"metric": "loss", "value": 3.109, "what": ""}}}
    images = {"trivial_baselines": {"pixel_1nn": {"metric": "accuracy", "value": 0.39, "what": ""},
                                    "logistic_regression": {"metric": "accuracy", "value": 0.64, "what": ""}}}
    records = [run("llm-adam-standard", test=3.5, task=text, dataset="causal_lm"),
               run("vit-adam-standard", accuracy=0.8, task=images)]
    lines = summary_lines(records)
    plain = summary_lines([run("llm-adam-standard", test=3.5), run("vit-adam-standard", accuracy=0.8)])
    assert max(map(len, lines[:3])) == max(map(len, plain[:3]))  # the header and rows as wide as without
    # Under the table, after its key line: one line per model.
    trivial = [line for line in lines[3:] if line.startswith("best trivial baseline")]
    assert trivial == ["best trivial baseline, llm · causal_lm: bigram count model 3.109",
                       "best trivial baseline, vit: logistic regression on pixels 64.0 %"]
    assert lines.index(trivial[0]) > 2
    assert not any(line.startswith("best trivial") for line in plain)
    llm = next(line for line in lines if line.startswith("llm: use"))
    assert "its best cell learned less than the bigram count model (3.5 against 3.109)" in llm
    vit = lines[lines.index(next(line for line in lines if line.startswith("vit: use"))):]
    assert "beats the logistic regression on pixels (64.0 %) by 16.0 points" in " ".join(vit[:3])
