"""Each section reads its own study's cells, and the page is a function of the set of records."""

import random
import re

import pytest

from gradeff.records.store import append_record, read_records
from gradeff.report import SECTIONS, build_view, render_html, write_report
from tests.analysis.factories import run

MIB = 2**20


def _mixed(seeds=3):
    """Every kind of record, over ``seeds`` seeds: main, real data, memory grid, PEFT and a baseline."""
    records = []
    for seed in range(seeds):
        jitter = seed / 100
        records += [
            run("vit-adam-standard", seed, accuracy=0.6 + jitter, seconds=1.0),
            run("vit-adam-checkpoint", seed, accuracy=0.6 + jitter, seconds=1.5),
            run("vit-sgd-standard", seed, accuracy=0.3 + jitter, seconds=0.8),
            run("llm-adam-standard", seed, test=2.0 + jitter), run("llm-adam-checkpoint", seed, test=2.0 + jitter),
            run("llm-sgd-standard", seed, test=3.0 + jitter),
            # Real data: the same model keys, its own grid: never in the main study's tables.
            run("vit-sgd-digits", seed, grid="real", accuracy=0.9, seconds=0.1),
            run("vit-adamw-digits", seed, grid="real", accuracy=0.95, seconds=0.1),
            run("llm-adamw-pydoc", seed, grid="real", test=5.0),
            # The memory grid: its budget cells must not feed the PEFT study's claim.
            run("vit_s-standard", seed, grid="memory", peak=10 * MIB),
            run("vit_s-budget40", seed, grid="memory", peak=3 * MIB, plan={"kind": "adaptive",
                                                                         "checkpointed_layers": 2, "layers": 4}),
            run("vit_s-lora-standard-cifar100", seed, grid="peft", accuracy=0.5 + jitter, peak=10 * MIB),
            run("vit_s-lora-budget-cifar100", seed, grid="peft", accuracy=0.5 + jitter, peak=9 * MIB,
                plan={"kind": "adaptive", "checkpointed_layers": 1, "layers": 4}),
            run("vit_s-full-standard-cifar100", seed, grid="peft", accuracy=0.45 + jitter, peak=12 * MIB),
            run("clip-zero_shot-cifar100", seed, grid="baselines", accuracy=0.01, weights={"source": "random"}),
        ]
    return records


MAIN = {"vit-adam-standard", "vit-adam-checkpoint", "vit-sgd-standard", "llm-adam-standard",
        "llm-adam-checkpoint", "llm-sgd-standard"}
REAL = {"vit-sgd-digits", "vit-adamw-digits", "llm-adamw-pydoc"}
MEMORY = {"vit_s-standard", "vit_s-budget40"}
PEFT = {"vit_s-lora-standard-cifar100", "vit_s-lora-budget-cifar100", "vit_s-full-standard-cifar100"}
BASELINES = {"clip-zero_shot-cifar100"}


def _section(html: str, section: str) -> str:
    return html.split(f'<section class="top" id="{section}">', 1)[1].split("</section>", 1)[0]


def test_each_section_reads_its_own_studys_cells(tmp_path):
    """A mixed results file: the main study's sections hold its 6 cells only; real data and the memory grid their
    own."""
    path = tmp_path / "results.jsonl"
    for record in _mixed():
        append_record(path, record)
    view = build_view(read_records(path), generated_at="now")
    cells = {section: set(found) for section, found in view.section_cells.items()}
    for section in ("best", "ratios", "curves", "heatmaps", "pareto", "memory"):
        assert cells[section] == MAIN, section
    assert cells["tables"] == MAIN | PEFT | BASELINES and cells["memory-time"] == MEMORY
    assert cells["peft-figures"] == PEFT
    assert cells["real"] == REAL and cells["peft"] == PEFT | BASELINES
    assert cells["memory-strategies"] == MEMORY | PEFT and cells["claims"] == MAIN | PEFT | BASELINES
    assert cells["answer"] == MAIN | PEFT | REAL
    assert cells["environment"] == MAIN | REAL | MEMORY | PEFT | BASELINES
    assert {s.id for s in SECTIONS} == set(cells)
    # The view enforces it: the main study's tables count 3 ViT cells, not 5, and list each optimizer once.
    vit = next(m for m in view.models if m.key == "vit")
    assert vit.summary.startswith("3 cells, 9 runs over seeds: 9 ok")
    loss = next(t for t in vit.tables if t.id.endswith("-heldout_accuracy"))
    assert [r.label for r in loss.rows] == ["SGD", "Adam"] and loss.header == ("optimizer", "standard", "checkpoint")
    html = render_html(view)
    for section in ("best", "ratios", "curves", "pareto", "memory"):
        body = _section(html, section)
        assert "digits" not in body and "pydoc" not in body and "budget40" not in body, section
    assert "vit-adamw-digits" in _section(html, "real") and "vit_s-lora" not in _section(html, "real")
    # Strategy ratios divide main cells by main cells: checkpoint/standard time 1.5× for ViT.
    time = next(t for t in view.ratios if t.id == "ratio-checkpoint-epoch_seconds")
    assert next(r for r in time.rows if r.label == "Adam").cells[0].text == "1.50×"
    # The PEFT claim reads the PEFT grid's budget cell (10 % less peak), not the memory grid's (70 % less).
    claims = {row.label: row.cells for g in view.claims.groups for row in g.table.rows}
    adaptive = next(cells for claim, cells in claims.items() if claim.startswith("the adaptive algorithm"))
    assert adaptive[0].text.startswith("live peak cut +10.0 %")
    # The Answer has a block per study, the real data's apart from the main study's.
    assert [g.id for g in view.answer.groups] == ["answer-main", "answer-peft", "answer-real"]
    real = view.answer.groups[2]
    assert [row.label for row in real.table.rows] == ["vit · digits", "llm · pydoc"]
    assert real.lines[0].startswith("vit · digits: use adamw: best quality, ahead of sgd | test top-1 accuracy: winner "
                                    "adamw 95.0 % ± 0.0 % (n=3)")


@pytest.mark.parametrize("seeds", [1, 3])
def test_the_page_is_a_function_of_the_set_of_records(seeds, tmp_path):
    """The same records in any order, split over files or repeated: the same page, bit for bit, but the time."""
    records = _mixed(seeds)
    reference = render_html(build_view(records, generated_at="t"))
    for trial in range(3):
        shuffled = list(records)
        random.Random(trial).shuffle(shuffled)
        assert render_html(build_view(shuffled, generated_at="t")) == reference
    # Read back from two files in either order (what shards give), and a page written to disk.
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for index, record in enumerate(records):
        append_record(first if index % 2 else second, record)
    both = [*read_records(second), *read_records(first)]
    assert render_html(build_view(both, generated_at="t")) == reference
    page = write_report(both[::-1], tmp_path / "r.html").read_text(encoding="utf-8")
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
    # The page written to disk links its flat table, r.cells.csv, written beside it.
    assert stamp.sub("", page) == stamp.sub("", render_html(build_view(records, export="r.cells.csv")))
    assert (tmp_path / "r.cells.csv").read_text(encoding="utf-8").startswith("cell,model,")


def test_a_rerun_is_chosen_by_time_not_by_reading_order():
    """The same cell and seed twice: the one that finished last is reported, whichever came first."""
    old = run("llm-adam-standard", test=3.0, finished_at=1.0)
    new = run("llm-adam-standard", test=1.0, finished_at=2.0)
    for records in ([old, new], [new, old]):
        view = build_view(records, generated_at="t")
        table = next(t for t in view.models[0].tables if t.id.endswith("-test_loss"))
        assert table.rows[0].cells[0].text == "1" and view.superseded == 1
