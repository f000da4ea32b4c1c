"""Every line of the terminal summary and the Answer fits the terminal, and each model's Answer takes at most three
lines, for records of every grid (the main study, PEFT, the memory study, real data) over one seed and several."""

import pytest

from gradeff.pytest.answer_brief import MAX_LINES
from gradeff.pytest.fitting import fit_table
from gradeff.pytest.summary import answer_lines, summary_lines
from tests.analysis.factories import run, runs

_OPTIMIZERS = ("adam", "adamw", "sgd", "adagrad", "adadelta", "cgd")
_STRATEGIES = ("standard", "accum", "checkpoint")


def _every_grid(seeds: int) -> list:
    records = []
    for index, optimizer in enumerate(_OPTIMIZERS):
        for strategy in _STRATEGIES:
            tests = [2.0 + 0.1 * index + 0.01 * seed for seed in range(seeds)]
            records += runs(f"llm-{optimizer}-{strategy}", tests, seconds=1 + index / 10)
            records += runs(f"modernbert-{optimizer}-{strategy}", tests)
    for method in ("full", "lora", "dora", "bitfit"):
        for dataset in ("cifar100", "dtd"):
            records += [run(f"vit_s-{method}-standard-{dataset}", seed, grid="peft", accuracy=0.5 + 0.01 * seed)
                        for seed in range(seeds)]
    records += [run(f"llm-{strategy}", seed, grid="memory") for strategy in ("standard", "budget60", "checkpoint")
                for seed in range(seeds)]
    records += [run(f"gpt2-{optimizer}-wikitext", seed, grid="real") for optimizer in ("adam", "sgd")
                for seed in range(seeds)]
    records.append(run("llm-adam-standard", seeds, status="diverged", detail="loss nan at step 3 " + "x" * 200))
    return records


@pytest.mark.parametrize("seeds", [1, 3])
@pytest.mark.parametrize("width", [120, 80])
def test_no_line_is_wider_than_the_terminal_and_each_answer_takes_at_most_three_lines(width, seeds):
    records = _every_grid(seeds)
    lines = summary_lines(records, width=width, answer=False)
    assert [line for line in lines if len(line) > width] == []
    verdicts = answer_lines(records, width=width)
    assert [line for line in verdicts if len(line) > width] == []
    models = [line for line in verdicts[1:] if not line.startswith(" ")]
    # One entry per model (and dataset) of every study: the main study's two, PEFT's two, real data's one.
    assert len(models) == 5
    starts = [verdicts.index(line) for line in models] + [len(verdicts)]
    assert all(0 < end - start <= MAX_LINES for start, end in zip(starts, starts[1:]))
    assert all(line.split(": use ")[0] for line in models)  # each model's first line is its "use this"


def test_a_table_too_wide_leaves_out_columns_in_the_stated_order_and_says_which():
    header = ("cell", "status", "a", "b", "c")
    rows = [["llm-adam-standard", "ok", "1" * 20, "2" * 20, "3" * 20]]
    fitted = fit_table(header, rows, width=70, drop=("b", "a"))
    assert fitted.left_out == ("b",) and "2" * 20 not in fitted.lines[1]
    assert max(len(line) for line in fitted.lines) <= 70
    narrower = fit_table(header, rows, width=50, drop=("b", "a"))
    assert narrower.left_out == ("a", "b") and narrower.lines[1].split() == ["llm-adam-standard", "ok", "3" * 20]
    # Wide enough: every column, the table as it is.
    assert fit_table(header, rows, width=200, drop=("b", "a")).left_out == ()


def test_the_summary_names_the_columns_it_left_out_and_explains_f_b():
    records = [run("llm-adam-accum"), run("llm-sgd-accum")]
    wide = summary_lines(records, width=200, answer=False)
    assert "steps" in wide[0].split() and not any(line.startswith("not shown") for line in wide)
    narrow = summary_lines(records, width=80, answer=False)
    note = next(i for i, line in enumerate(narrow) if "not shown at 80 columns:" in line)
    left_out = " ".join(narrow[note:note + 2]).split("not shown at 80 columns: ")[1].split(" (")[0].split(", ")
    assert left_out and not set(left_out) & set(narrow[0].split("  "))
    assert any(line.startswith("f+b: forward+backward passes") for line in wide)
