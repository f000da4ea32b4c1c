"""Memory strategies side by side: peak memory against time per epoch, in one run.

For the tiny ``llm`` and ``vit_s``: standard training, static checkpointing, checkpointing with host
offload, and the adaptive budget (``budget80`` … ``budget20``) and torch.compile's own budget
(``compile_budget80`` …) at the same four budgets, each a fraction of the cell's unconstrained peak, with
``compile_budget100`` (compiled at the full activation budget): the compiled cells' reference, as ``standard`` is the
eager cells'. Each cell records its plan (blocks checkpointed, predicted peak, compile time) and its measured
peak; the report draws the curve as ratios to ``standard``.
"""

import pytest


@pytest.mark.gradeff_grid("memory")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    """Train the cell; an unreachable budget (oom) is a finding, an error fails the test.

    The public fixtures are the cell's, built at setup; ``gradeff_cell`` trains them and records with the meters.
    """
    record = gradeff_cell(cell)
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
