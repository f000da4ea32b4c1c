"""The report's Answer sets each line's best cell beside its task's strongest trivial baseline, flagged where it
does not beat it."""

from gradeff.analysis.metrics import OBJECTIVE_TITLES
from gradeff.report import build_view, render_html
from tests.analysis.factories import run


def _task(bigram: float) -> dict:
    return {"trivial_baselines": {"unigram": {"metric": "loss", "value": 5.0, "what": ""},
                                  "bigram": {"metric": "loss", "value": bigram, "what": ""}}}


def _rows(records):
    view = build_view(records, generated_at="t")
    (group,) = view.answer.groups
    header = group.table.header
    return view, {row.label: dict(zip(header[1:], row.cells, strict=True)) for row in group.table.rows}


def test_the_answer_table_shows_the_best_trivial_baseline_beside_quality_and_flags_a_loss_to_it():
    records = [*(run("llm-adam-standard", seed, test=4.42, task=_task(4.29)) for seed in range(2)),
               *(run("vit-adam-standard", seed, accuracy=0.8, task={"trivial_baselines": {
                   "pixel_1nn": {"metric": "accuracy", "value": 0.5, "what": ""}}}) for seed in range(2))]
    view, rows = _rows(records)
    header = view.answer.groups[0].table.header
    assert header.index("best trivial") == header.index(OBJECTIVE_TITLES["quality"]) + 1  # beside quality
    llm, vit = rows["llm"], rows["vit"]
    assert llm["best trivial"].text == "learned less than the bigram count model (4.42 against 4.29)"
    assert "flag" in llm["best trivial"].css.split() and "flag" in llm["use this"].css.split()
    assert llm["use this"].text.endswith("— its best cell learned less than the bigram count model (4.42 against 4.29)")
    assert vit["best trivial"].text == "beats the raw-pixel 1-NN (50.0 %) by 30.0 points"
    assert "flag" not in vit["best trivial"].css.split() and "flag" not in vit["use this"].css.split()
    page = render_html(view)
    assert "learned less than the bigram count model (4.42 against 4.29)" in page
    assert "beats the raw-pixel 1-NN (50.0 %) by 30.0 points" in page
    assert 'class="text flag"' in page


def test_records_without_baselines_read_not_available_and_flag_nothing():
    _, rows = _rows([run("llm-adam-standard", test=4.42), run("llm-sgd-standard", test=4.9)])
    cell = rows["llm"]["best trivial"]
    assert cell.text.startswith("n/a") and "na" in cell.css.split()
    assert "flag" not in rows["llm"]["use this"].css.split()
