"""The fixture example of docs/extending.md, run as it is written: a complete Answer from the public fixtures alone."""

import re
from pathlib import Path

from gradeff.analysis.answer import answer, line_text
from gradeff.records.store import read_records

PLUGIN = ("-p", "gradeff.pytest_plugin")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "extending.md"


def _example(name: str) -> str:
    """The docs' Python block that defines ``name``."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    (block,) = [block for block in blocks if f"def {name}(" in block]
    return block


def test_the_docs_fixture_example_answers_quality_time_and_memory(pytester, tmp_path):
    """Only what the docs show: the record has its test loss, the untrained evaluation where time to target starts,
    a reached target and a memory breakdown, and the Answer for it has no n/a on quality, speed or memory."""
    pytester.makepyfile(test_mine=_example("test_my_step"))
    results = tmp_path / "r.jsonl"
    outcome = pytester.runpytest_subprocess(*PLUGIN, "test_mine.py", f"--gradeff-results={results}")
    outcome.assert_outcomes(passed=1)
    (record,) = read_records(results)
    summary = record.summary
    assert record.status == "ok" and record.grid == "custom"
    assert summary.initial_heldout_loss is not None and summary.final_heldout_loss < summary.initial_heldout_loss
    assert all(epoch.heldout_loss is not None for epoch in record.epochs)
    assert summary.target_reached is True and summary.steps_to_target > 0
    memory = record.meters["memory"]
    assert memory["peak_bytes"] > 0 and memory["optimizer_state_bytes"] > 0
    assert memory["step"] == "a standard step after the epochs"
    (line,) = answer([record])
    for objective in ("quality", "speed", "memory"):
        assert line.verdicts[objective].ranking is not None, (objective, line.verdicts[objective].reason)
    assert "n/a" not in line_text(line).split("energy")[0], line_text(line)


OWN_EVALUATION = """
import pytest


@pytest.mark.parametrize("gradeff_model", ["llm"], indirect=True)
def test_own(gradeff_model, gradeff_data, gradeff_optimizer, gradeff_meters):
    with gradeff_meters as meters:
        for epoch in range(2):
            with meters.epoch(evaluate=epoch == 0) as log:
                for batch in gradeff_data.batches(epoch):
                    loss = gradeff_model(**batch).loss
                    loss.backward()
                    gradeff_optimizer.step()
                    gradeff_optimizer.zero_grad()
                    log.step(loss.item(), samples=len(batch["labels"]))
                if epoch == 1:
                    log.evaluated(loss=123.0)
        meters.measure_step(lambda: None)
"""


def test_an_epochs_own_evaluation_and_own_step_are_kept(pytester, tmp_path):
    """An epoch that reports its evaluation keeps it (gradeff's is not run over it), and a step the benchmark
    measured itself is the one recorded."""
    pytester.makepyfile(test_own=OWN_EVALUATION)
    results = tmp_path / "r.jsonl"
    pytester.runpytest_subprocess(*PLUGIN, f"--gradeff-results={results}").assert_outcomes(passed=1)
    (record,) = read_records(results)
    first, second = record.epochs
    assert first.heldout_loss is not None and first.heldout_loss != 123.0 and second.heldout_loss == 123.0
    assert record.meters["memory"]["step"] == "the benchmark's own"
