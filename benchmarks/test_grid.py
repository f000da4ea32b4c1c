"""The main study's grid: one pytest-benchmark test per (model, optimizer, strategy) cell.

Select with the cell id (``-k "llm and accum"``), the model or family markers (``-m decoder``) or
the exact marker (``-m "cell(optimizer='adam')"``); ``--gradeff-<axis>`` options run other keys on
an axis (``--gradeff-methods lora``: the study with LoRA). Every cell's record is appended to the
results file as soon as it ends.
"""

import pytest


@pytest.mark.gradeff_grid("main")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    """Train the cell; diverged and oom are findings, an error fails the test.

    The public fixtures are the cell's, built at setup; ``gradeff_cell`` trains them and records with the meters.
    """
    record = gradeff_cell(cell)
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
