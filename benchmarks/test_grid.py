"""The main study's grid: one pytest-benchmark test per (model, optimizer, strategy) cell.

Select with the cell id (``-k "llm and accum"``), the model or family markers (``-m decoder``) or
the exact marker (``-m "cell(optimizer='adam')"``). Every cell's record is appended to the
results file as soon as it ends.
"""

import pytest

from gradeff.pytest_plugin import grid_argnames, grid_params


@pytest.mark.parametrize(grid_argnames("main"), grid_params("main"))
def test_cell(model, optimizer, strategy, gradeff_cell):
    """Train the cell; diverged and oom are findings, an error fails the test."""
    record = gradeff_cell(model, optimizer, strategy, grid="main")
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
