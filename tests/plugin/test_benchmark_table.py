"""pytest-benchmark's own table is off in a session that runs cells, unless the user asks for it; its JSON stays."""

import json

import pytest

from gradeff.pytest.benchmark_table import asks_for_table

PLUGIN = ("-p", "gradeff.pytest_plugin")
CELL = ("-k", "vit-sgd-standard", "--gradeff-epochs", "1")


@pytest.mark.parametrize(("args", "asked"), [
    ([], False), (["-k", "llm", "--benchmark-json=b.json"], False), (["--benchmark-sort=mean"], True),
    (["--benchmark-columns", "min,max"], True), (["--benchmark-verbose"], True), (["--benchmark-disable"], False)])
def test_only_a_report_option_asks_for_the_table(args, asked):
    assert asks_for_table(args) is asked


def test_the_table_is_off_by_default_and_an_explicit_option_brings_it_back(grid_pytester):
    json_path = grid_pytester.path / "bench.json"
    quiet = grid_pytester.runpytest_subprocess(*PLUGIN, *CELL, f"--gradeff-results={grid_pytester.path}/r.jsonl",
                                               f"--benchmark-json={json_path}")
    quiet.assert_outcomes(passed=1)
    assert "benchmark 'vit'" not in quiet.stdout.str() and "gradeff: 1 cells" in quiet.stdout.str()
    assert [b["extra_info"]["cell"] for b in json.loads(json_path.read_text())["benchmarks"]] == ["vit-sgd-standard"]
    shown = grid_pytester.runpytest_subprocess(*PLUGIN, *CELL, f"--gradeff-results={grid_pytester.path}/s.jsonl",
                                               "--benchmark-columns=mean")
    shown.assert_outcomes(passed=1)
    shown.stdout.fnmatch_lines(["*benchmark 'vit'*"])
