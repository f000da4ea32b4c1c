"""The PEFT study's grid: backbone × fine-tuning method × checkpointing × dataset, AdamW.

Each cell fine-tunes a pretrained backbone (``vit_s``, ``tinyvit``, ``vim_s``, ``mambavision_t``)
with one method (``full``, ``lora``, ``adalora``, ``qlora``, ``bitfit``) under one checkpointing
strategy (``standard`` = none, ``checkpoint`` = every block) on one dataset (``cifar100``, ``dtd``)
and records held-out accuracy after every epoch. Ids read ``vit_s-lora-checkpoint-cifar100``:
select with ``-k "vit_s and lora"`` (which also matches adalora and qlora, as ``-k adam`` matches
adamw) or exactly with ``-m "cell(method='lora')"``; ``-m peft`` selects the whole grid.
"""

import pytest


@pytest.mark.gradeff_grid("peft")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    """Fine-tune the cell; diverged and oom are findings, an error fails the test.

    The public fixtures are the cell's, built at setup; ``gradeff_cell`` trains them and records with the meters.
    """
    record = gradeff_cell(cell)
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
