"""The report with both studies: the split by grid, the PEFT section's tables, winners, ratios, figure and CSV."""

import csv
import io
import re

import pytest

from gradeff.analysis import METRICS, metric_value
from gradeff.analysis import peft as peft_analysis
from gradeff.analysis.scope import UnknownGridError
from gradeff.records.formatting import NA
from gradeff.report import MAIN_MISSING_NOTE, build_view, render_html, write_report
from gradeff.report.context import hparams_table, methods
from gradeff.report.csv_export import csv_table
from gradeff.report.peft import MISSING_NOTE, build_peft_view, format_count, format_points
from tests.report.conftest import self_contained_page, without_own_script

SCRIPT = "<script>alert(1)</script>"
PRETRAINING = {"optimizer_steps": 128, "seconds": 59.9, "heldout_accuracy": 0.45, "bayes_accuracy": 1.0,
               "final_loss": 3.9, "reused": True}


def _group(view, model="vit_s", dataset="cifar100"):
    return next(g for g in view.groups if g.slug.endswith(f"{model}-{dataset}"))


def _table(group, key):
    return next(t for t in group.tables if t.id.endswith(f"-{key}"))


def _texts(table):
    return {row.label: [cell.text for cell in row.cells] for row in table.rows}


def _css(table):
    return {row.label: [cell.css for cell in row.cells] for row in table.rows}


@pytest.fixture
def peft_record(make_peft_record):
    """The PEFT record factory under a short name."""
    return make_peft_record


def _with_peak(record):
    # The live-tensor peak of a step: the breakdown's parameters, gradients and activations (state left out).
    memory = record.meters["memory"]
    memory["peak_bytes"] = memory["parameter_bytes"] + memory["gradient_bytes"] + memory["activation_bytes"]
    return record


@pytest.fixture
def peft_cells(peft_record):
    """One backbone on one dataset: full, LoRA (two strategies), a failed QLoRA, BitFit without energy."""
    return [_with_peak(r) for r in (
        peft_record(method="full", accuracies=(0.5, 0.70), trainable=100_000, total=100_000, activation=8 * 2**20,
                    joules=40.0, seconds=(2.0, 2.0)),
        peft_record(method="lora", accuracies=(0.5, 0.72), trainable=2_000, total=102_000, activation=6 * 2**20,
                    joules=30.0, seconds=(1.5, 1.5)),
        peft_record(method="lora", strategy="checkpoint", accuracies=(0.5, 0.72), trainable=2_000, total=102_000,
                    activation=2 * 2**20, joules=36.0, seconds=(1.8, 1.8)),
        peft_record(method="qlora", status="error", accuracies=(0.95,), seconds=(0.1,), detail="RuntimeError: boom",
                    activation=2**20, joules=1.0),
        peft_record(method="bitfit", accuracies=(0.5, 0.69), trainable=500, total=100_000, activation=4 * 2**20,
                    joules=None, seconds=(1.0, 1.0)),
    )]


def test_sections_split_by_grid(make_record, peft_cells):
    """Main-study sections read the main grid and the fixtures' cells only; PEFT records go to the PEFT section alone;
    a record of a grid no study reads is refused, not read as the main study's."""
    main = [make_record("vit-sgd-standard"), make_record("llm-adam-standard", grid="custom")]
    view = build_view(main + peft_cells)
    assert [m.key for m in view.models] == ["vit", "llm"]
    assert view.main_note == "" and view.peft.missing_note == ""
    assert [g.title for g in view.peft.groups] == [
        "ViT-S/16-shaped, random init, 0.10 M params · CIFAR-100-like (synthetic)"]
    assert [row.label for row in view.recommendations.rows] == ["ViT (ViT-B/16 style)", "Llama-3.2-1B-style decoder"]
    assert dict(view.overview)["grids"] == ("main: 1 cell, Optimizers × memory strategies (main study); "
                                            "peft: 5 cells, Fine-tuning methods × checkpointing (PEFT study); "
                                            "custom: 1 cell, custom")
    with pytest.raises(UnknownGridError, match="grid 'elsewhere', which no study"):
        build_view([*main, make_record("llm-sgd-standard", grid="elsewhere")])
    only_main = build_view(main)
    assert only_main.peft.missing_note == MISSING_NOTE and only_main.peft.groups == ()


def test_only_peft_records_leave_main_sections_with_a_note(peft_cells):
    """With PEFT records alone, every main-study section prints one note and no table or figure."""
    view = build_view(peft_cells)
    assert view.main_note == MAIN_MISSING_NOTE and view.models == ()
    html = render_html(view)
    for section in ("best", "ratios", "curves", "heatmaps", "pareto", "memory"):
        body = html.split(f'<section class="top" id="{section}">', 1)[1].split("</section>", 1)[0]
        assert MAIN_MISSING_NOTE in body and "<table" not in body and "<svg" not in body, section
    assert 'id="brief-0-peft"' in html and 'id="answer-0-peft"' in html


def test_heldout_accuracy_metric_in_percent_shown_where_measured(make_record):
    """heldout_accuracy: a percent, higher is better; a main-study model's table exists only if it measured it."""
    metric = METRICS["heldout_accuracy"]
    assert metric.goal == "max" and metric.unit == "percent"
    from gradeff.records.results import EpochRecord, Summary
    epochs = (EpochRecord(epoch=0, loss=1.0, seconds=1.0, optimizer_steps=1, closure_calls=1, samples=8, targets=8,
                          heldout_accuracy=0.25),)
    vit = make_record("vit-sgd-standard", losses=(1.0,), seconds=(1.0,), epochs=epochs,
                      summary=Summary.of(list(epochs), 2.0))
    assert metric_value(vit, "heldout_accuracy") == 25.0
    assert metric_value(make_record("llm-sgd-standard"), "heldout_accuracy") is None
    view = build_view([vit, make_record("llm-sgd-standard")])
    ids = {m.key: [t.id for t in m.tables] for m in view.models}
    assert ids["vit"][0].endswith("-heldout_accuracy") and not any("heldout" in i for i in ids["llm"])
    assert ids["llm"][0].endswith("-test_loss")  # the quality metric comes first, whatever it is
    table = next(t for t in view.models[0].tables if t.id.endswith("-heldout_accuracy"))
    assert table.rows[0].cells[0].text == "25.0 %" and table.rows[0].cells[0].css == "best"


def test_peft_tables_values_best_and_failures(peft_cells):
    """Accuracy, parameters, memory, time, energy tables: values, first place, status, n/a (never 0)."""
    group = _group(build_peft_view(peft_cells))
    assert group.summary.startswith("5 cells, 5 runs (seeds 0): 4 ok, 1 error; starting weights: random")
    accuracy = _table(group, "heldout_accuracy")
    assert accuracy.header == ("method", "standard", "checkpoint")
    assert "Bayes classifier's 90.0 %" in accuracy.caption
    assert _texts(accuracy) == {"Full fine-tuning": ["70.0 %", NA], "LoRA": ["72.0 %", "72.0 %"],
                                "QLoRA (4-bit NF4 + LoRA)": ["error", NA], "BitFit (biases only)": ["69.0 %", NA]}
    # The failed QLoRA cell's 95 % does not win; LoRA's two strategies are the same run: both first.
    assert _css(accuracy)["LoRA"] == ["best", "best"] and _css(accuracy)["QLoRA (4-bit NF4 + LoRA)"][0] == \
        "status error"
    assert accuracy.rows[1].cells[1].title == "the same numbers as the best on every seed"
    assert accuracy.rows[2].cells[0].title == "RuntimeError: boom"
    assert accuracy.rows[0].cells[1].title == "cell not in the results"
    parameters = _table(group, "trainable_parameters")
    assert parameters.rows[0].cells[0].text == "100k" and parameters.rows[0].cells[0].sub == "100.0 % of 100k"
    bitfit = parameters.rows[3].cells[0]
    assert (bitfit.text, bitfit.sub, bitfit.css) == ("500", "0.5 % of 100k", "")  # a count is not a race
    memory = _table(group, "peak")
    assert memory.caption == "Training memory (live-tensor peak of a step)" and "live-tensor peak" in memory.note
    assert _texts(memory)["LoRA"] == ["8.00 MiB", "4.00 MiB"] and _css(memory)["LoRA"][1] == "best"
    assert _texts(_table(group, "epoch_seconds"))["BitFit (biases only)"] == ["1.00 s", NA]
    energy = _table(group, "energy")
    cell = energy.rows[3].cells[0]
    assert (cell.text, cell.css, cell.title) == (NA, "na", "not measured")
    # One seed: LoRA's checkpointed twin is open against the best on energy, marked as still in contention.
    assert "estimate" in energy.note and _css(energy)["LoRA"] == ["best", "open"]
    assert _table(group, "seconds_to_target").rows == ()  # no cell reached a target: a note, not a table


def test_memory_is_the_live_peak_even_beside_a_gpu_allocator_peak(peft_cells, peft_record):
    """The study's memory metric is the live-tensor peak on every device; an allocator peak does not switch it."""
    cells = peft_cells + [_with_peak(peft_record(method="adalora", gpu_alloc=3 * 2**20, activation=2**30))]
    view = build_peft_view(cells)
    memory = next(t for t in _group(view).tables if "Training memory" in t.caption)
    assert memory.id.endswith("-peak") and _texts(memory)["AdaLoRA"] == ["1.00 GiB", NA]


def test_versus_full_points_and_ratios(peft_cells):
    """Each method against full fine-tuning, seed by seed: accuracy points, memory/time/energy ratios, n/a gaps."""
    from gradeff.analysis.runs import by_cell

    versus = {(v.record.method, v.record.strategy): v
              for v in peft_analysis.versus_full(by_cell(peft_analysis.sort_peft(peft_cells)))}
    lora = versus[("lora", "standard")]
    assert lora.accuracy_points.mean == pytest.approx(2.0) and lora.memory.interval.mean == pytest.approx(8 / 10)
    assert lora.time.interval.mean == pytest.approx(0.75) and lora.energy.interval.mean == pytest.approx(0.75)
    bitfit = versus[("bitfit", "standard")]
    assert bitfit.accuracy_points.mean == pytest.approx(-1.0) and bitfit.energy is None  # BitFit's energy unmeasured
    checkpoint = versus[("lora", "checkpoint")]
    assert checkpoint.reference is None and checkpoint.accuracy_points is None and checkpoint.memory is None
    assert versus[("qlora", "standard")].accuracy_points is None  # the failed cell
    table = build_peft_view(peft_cells).versus_full[0]
    rows = {row.label: row.cells for row in table.rows}
    assert [c.text for c in rows["LoRA + standard"]] == ["+2.0 pts", "0.80×", "0.75×", "0.75×"]
    assert [c.css for c in rows["LoRA + standard"]] == ["better"] * 4 and rows["LoRA + standard"][3].sub == "-25 %"
    assert [c.text for c in rows["BitFit (biases only) + standard"]] == ["-1.0 pts", "0.60×", "0.50×", NA]
    assert rows["BitFit (biases only) + standard"][0].css == "worse"
    assert rows["LoRA + checkpoint"][1].title == "no full fine-tuning cell with this strategy"
    assert rows["QLoRA (4-bit NF4 + LoRA) + standard"][0].text == "error"
    only_full = build_peft_view([peft_cells[0]]).versus_full[0]
    assert only_full.rows == () and "only full fine-tuning" in only_full.note


def test_checkpoint_ratios_per_backbone_and_method(peft_cells):
    """Static checkpointing: checkpoint / standard per backbone, dataset and method; None where a side lacks."""
    memory = peft_analysis.checkpoint_ratios(peft_cells, "peak")
    assert memory[("vit_s", "cifar100", "lora")].interval.mean == pytest.approx(4 / 8)
    assert memory[("vit_s", "cifar100", "full")] is None
    assert peft_analysis.checkpoint_ratios(peft_cells, "epoch_seconds")[("vit_s", "cifar100", "lora")].interval.mean \
        == pytest.approx(1.2)
    tables = {t.id: t for t in build_peft_view(peft_cells).ratios}
    memory_table = tables["peft-ratio-peak"]
    assert memory_table.header == ("method", "vit_s / cifar100")
    assert _texts(memory_table) == {"Full fine-tuning": [NA], "LoRA": ["0.50×"], "QLoRA (4-bit NF4 + LoRA)": [NA],
                                    "BitFit (biases only)": [NA]}
    assert _css(memory_table)["LoRA"] == ["better"] and _css(tables["peft-ratio-epoch_seconds"])["LoRA"] == ["worse"]
    no_pairs = build_peft_view([peft_cells[0]]).ratios[0]
    assert no_pairs.rows == () and no_pairs.note.startswith("n/a")


def test_pretraining_table_and_note(peft_cells, peft_record):
    """One row per pretrained backbone: steps, seconds, accuracies, reuse; the cost is said to be in no cell."""
    pretrained = {"source": "pretrained", "path": "/cache/vit_s", "pretraining": PRETRAINING}
    records = [peft_record(method="full", weights=pretrained),
               peft_record(method="lora", weights=pretrained | {"pretraining": PRETRAINING | {"reused": False}},
                           session="s3"),
               peft_record(model="tinyvit", method="full")]
    table = build_peft_view(records).pretraining
    (row,) = table.rows
    assert row.label == "ViT-S/16"
    assert [c.text for c in row.cells] == ["128", "59.9 s", "45.0 %", "100.0 %",
                                           "yes in session(s) s2; no in session(s) s3"]
    assert "not in any cell's time" in table.note and "random (1 cell)" in table.note
    none = build_peft_view([peft_record()]).pretraining
    assert none.rows == () and none.note.startswith("n/a")


def test_accuracy_figure_draws_standard_cells_with_the_ceiling(peft_cells, peft_record):
    """The figure has a panel per backbone × dataset, the Bayes accuracy dashed, a note of what is missing."""
    figure = build_peft_view(peft_cells + [peft_record(model="tinyvit", dataset="dtd", accuracies=(),
                                                       seconds=())]).curves
    assert figure.svg is not None and "stroke-dasharray" in figure.svg
    assert "vit_s / cifar100 90.0 %" in figure.note and "tinyvit-lora-standard-dtd (ok)" in figure.note
    assert "(not run)" in figure.svg  # tinyvit on CIFAR-100 and ViT-S/16 on DTD
    assert "Full fine-tuning" in figure.svg and "checkpoint" not in figure.svg


def test_hparams_and_methods_describe_heldout_parameters_and_weights(peft_cells, make_record):
    """Method settings get columns, a method-dependent value names its methods; the methods text covers the rest."""
    groups = {"vit_s": peft_cells}
    table = hparams_table(["vit_s"], groups, grid="peft", table_id="h")
    header = list(table.header)
    assert "method.lr_scale" in header and header[-1] == "starting weights"
    cells = dict(zip(header[1:], (c.text for c in table.rows[0].cells), strict=True))
    assert cells["method.lr_scale"] == "1.0 (full); 10.0 (lora, qlora, bitfit)"
    assert cells["starting weights"] == "random" and cells["method.lora_r"] == "8"
    assert "PEFT study" in table.caption and "heldout_samples" in table.note
    text = dict(methods(peft_cells + [make_record()]))
    assert "eval mode" in text["Test evaluation"] and "without autograd" in text["Test evaluation"]
    assert "outside the epochs' timing" in text["Test evaluation"]
    assert "5 of the 6 runs" in text["Test evaluation"]
    assert "unpacked" in text["Parameters"] and "random (5 cells), n/a (1 cell)" in text["Starting weights"]


def test_mixed_render_passes_the_html_checks(grid_records, peft_cells, peft_record, tmp_path):
    """A file of both studies: every section, unique safe ids, no external resource, one more SVG, escaping."""
    odd = peft_record(model=SCRIPT, method="lora", detail=SCRIPT, status="error")
    path = write_report(grid_records + peft_cells + [odd], tmp_path / "mixed.html", sources=["r.jsonl"])
    html = path.read_text(encoding="utf-8")
    self_contained_page(html)
    assert "<script" not in without_own_script(html).lower() and "&lt;script&gt;" in html
    # The main study's figures (curves and Pareto per model, heat maps) + the PEFT accuracy curves and its costs.
    assert html.count("<svg ") == 4 * 2 + 1 + 2
    peft = html.split('<section class="top" id="peft">', 1)[1].split("</section>", 1)[0]
    assert 'href="#answer"' in peft and "Which method to pick" not in peft  # the Answer says it, once
    # The appendix: the main study's part holds none of the PEFT study's cells (those follow under their heading).
    main = html.split('<section class="top" id="tables">', 1)[1].split('id="peft-versus-full"', 1)[0]
    assert "vit_s" not in main and "LoRA" not in main
    assert not re.search(r">0(\.0+)? ?(%|J|B|ms|s|MiB|GiB)<", re.sub(r"<svg.*?</svg>", "", peft, flags=re.S))


def test_csv_keeps_the_records_of_a_study_it_has_no_order_for(monkeypatch, make_record, peft_cells):
    """A study the CSV's ordering does not name (a study registered later) still has every row, after the others."""
    import gradeff.report.csv_export as csv_export
    from gradeff.analysis.memory import Studies

    records = [make_record("llm-sgd-standard"), *peft_cells]
    monkeypatch.setattr(csv_export, "split_studies",
                        lambda kept: Studies([r for r in kept if r.grid == "main"], [], [], []))
    _, rows = csv_table(records)
    assert rows[0][0] == "llm-sgd-standard"
    assert sorted(row[0] for row in rows) == sorted(r.cell for r in records)


def test_csv_adds_study_columns_after_the_existing_ones(make_record, peft_cells):
    """CSV: the earlier columns keep their order first; grid, method, dataset, held-out, parameters, weights follow."""
    header, rows = csv_table([make_record("llm-sgd-standard")] + peft_cells)
    old = header.index("meters.memory.peak_bytes")
    assert header[:5] == ["cell", "model", "optimizer", "strategy", "status"]
    assert header[old + 1:old + 11] == [
        "grid", "method", "dataset", "summary.final_heldout_accuracy", "summary.final_heldout_loss",
        "summary.best_heldout_accuracy", "task.bayes_accuracy", "parameters.trainable", "parameters.total",
        "weights.source"]
    assert header.index("summary.targets_per_second") < header.index("meters.ram.peak_rss_bytes") < old
    by_cell = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert [row[0] for row in rows][0] == "llm-sgd-standard"  # main study first, then the PEFT study in order
    lora = by_cell["vit_s-lora-standard-cifar100"]
    assert (lora["grid"], lora["method"], lora["dataset"]) == ("peft", "lora", "cifar100")
    assert float(lora["summary.final_heldout_accuracy"]) == 0.72 and float(lora["task.bayes_accuracy"]) == 0.9
    assert (lora["parameters.trainable"], lora["parameters.total"], lora["weights.source"]) == ("2000", "102000",
                                                                                                 "random")
    main = by_cell["llm-sgd-standard"]
    assert main["grid"] == "main" and main["task.bayes_accuracy"] == NA and main["parameters.total"] == NA
    assert list(csv.reader(io.StringIO(",".join(header))))[0] == header  # names need no quoting


def test_count_and_points_formatting():
    """Parameter counts read 950, 43.4k, 22.1M, 1.24B; accuracy gaps are signed points; missing is n/a."""
    assert [format_count(n) for n in (950, 43_364, 220_068, 22_100_000, 1_240_000_000)] == \
        ["950", "43.4k", "220k", "22.1M", "1.24B"]
    assert format_points(1.234) == "+1.2 pts" and format_points(-0.4) == "-0.4 pts"
    assert format_count(None) == NA and format_points(float("nan")) == NA


def test_accuracy_table_ends_with_the_pixel_baseline_and_flags_cells_not_above_it(peft_record):
    """The raw-pixel 1-NN's accuracy is the last row; a cell whose mean is at or below it is marked worse."""
    from gradeff.report.peft import SANITY_LABEL

    task = {"key": "cifar100", "bayes_accuracy": 0.9, "sanity_accuracy": 0.3, "info": {}}
    records = [peft_record(method="full", accuracies=(0.2, 0.7), task=task),
               peft_record(method="lora", accuracies=(0.2, 0.3), task=task),
               peft_record(method="bitfit", status="error", accuracies=(), seconds=(), task=task)]
    accuracy = _table(_group(build_peft_view(records)), "heldout_accuracy")
    assert _texts(accuracy) == {"Full fine-tuning": ["70.0 %"], "LoRA": ["30.0 %"], "BitFit (biases only)": ["error"],
                                SANITY_LABEL: ["30.0 %"]}
    lora, full = accuracy.rows[1].cells[0], accuracy.rows[0].cells[0]
    assert "worse" in lora.css and lora.sub == "not above 1-NN on pixels" and "30.0 %" in lora.title
    assert "worse" not in full.css and full.sub == ""
    assert "1-nearest-neighbour classifier on raw pixels" in accuracy.note
    without = [peft_record(method="full", accuracies=(0.2, 0.7))]
    assert SANITY_LABEL not in _texts(_table(_group(build_peft_view(without)), "heldout_accuracy"))
