"""Real data: the ViT on scikit-learn's handwritten digits and the LLM on Python's own help text.

Both are read with Hugging Face ``datasets`` from files the suite writes on first use, the same path a local
copy of CIFAR-100, DTD or MM-IMDb takes (``--gradeff-data cifar100=PATH``). Ids read ``vit-adamw-digits``;
``-m real`` selects the grid.
"""

import pytest


@pytest.mark.gradeff_grid("real")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    """Train the cell on real data; diverged is a finding, an error fails the test.

    The public fixtures are the cell's, built at setup; ``gradeff_cell`` trains them and records with the meters.
    """
    record = gradeff_cell(cell)
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
