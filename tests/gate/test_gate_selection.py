"""--gradeff-baseline judges the cells the session selected: a slice passes against a fuller baseline, and a
selected cell that left no record fails the session unless --allow-missing."""


import pytest

from gradeff.pytest.gate import cell_of_nodeid

PLUGIN = ("-p", "gradeff.pytest_plugin")
# Loses the record of one cell, on disk and in memory, as a crash between training and writing would.
LOSE_ONE = """
import gradeff.pytest.session_records as session_records

_keep = session_records.keep


def _lossy(config, path, record):
    if record.cell != "llm-sgd-accum":
        _keep(config, path, record)


session_records.keep = _lossy
"""


def test_cell_of_nodeid_reads_the_selection_of_xdist_workers():
    known = {"llm-adam-accum", "vit_s-lora-checkpoint-cifar100"}
    assert cell_of_nodeid("benchmarks/test_grid.py::test_cell[llm-adam-accum]", known) == "llm-adam-accum"
    assert cell_of_nodeid("test_grid.py::test_cell[llm-adam-accum-seed3]", known) == "llm-adam-accum"
    assert cell_of_nodeid("test_peft_grid.py::test_cell[vit_s-lora-checkpoint-cifar100]", known) \
        == "vit_s-lora-checkpoint-cifar100"
    assert cell_of_nodeid("benchmarks/test_overhead.py::test_overhead", known) is None
    assert cell_of_nodeid("t.py::test_x[other]", known) is None


def test_a_slice_is_judged_on_its_own_cells_and_a_lost_record_fails_it(grid_pytester, capsys):
    """Two cells selected, one record lost: the lost cell is missing (a regression); the baseline's cell outside
    the selection is not judged at all."""
    from gradeff.gate.compare import main
    from tests.gate.test_compare_cli import record

    baseline = grid_pytester.path / "baseline.jsonl"
    baseline.write_text("".join(record(cell).to_json() + "\n" for cell in ("vit-sgd-standard", "llm-sgd-accum")))
    grid_pytester.makeconftest(LOSE_ONE)
    results = grid_pytester.path / "r.jsonl"
    lost = grid_pytester.runpytest_subprocess(*PLUGIN, "--gradeff-epochs", "1", "--benchmark-disable",
                                              "-k", "llm-sgd-standard or llm-sgd-accum", f"--gradeff-results={results}",
                                              f"--gradeff-baseline={baseline}")
    assert lost.ret == pytest.ExitCode.TESTS_FAILED, lost.stdout.str()
    lost.stdout.fnmatch_lines(["*REGRESSION*", "*llm-sgd-accum*presence*present*missing*regression*only in baseline*"])
    assert "vit-sgd-standard" not in lost.stdout.str()
    cells = grid_pytester.path / "last-session.cells"
    assert cells.read_text() == "llm-sgd-standard\nllm-sgd-accum\n"
    # The same judgement from the command line, and the opt-out.
    current = str(grid_pytester.path / "last-session.jsonl")
    assert main([str(baseline), current, "--cells", str(cells)]) == 1
    assert main([str(baseline), current, "--cells", str(cells), "--allow-missing"]) == 0
    assert "1 missing" in capsys.readouterr().out
