"""The PEFT study's foundation-model baselines: used without fine-tuning, scored like the fine-tuned cells.

Zero-shot contrastive models (``clip``, ``siglip``: image-text similarity to one prompt per class),
a frozen self-supervised backbone with a linear probe (``dinov2``), and autoregressive VLMs prompted
to classify (``smolvlm``, ``vlm_prompt``: the log-likelihood of each class's name after a fixed prompt),
on the same datasets and held-out splits as the PEFT grid. Ids read ``clip-zero_shot-cifar100``.
Without real weights (``--gradeff-weights clip=PATH``, a local folder with a tokenizer) the zero-shot
and prompted models are random and score at chance: their cells then measure cost, not accuracy.
"""

import pytest


@pytest.mark.gradeff_grid("baselines")
def test_cell(cell, gradeff_model, gradeff_optimizer, gradeff_data, gradeff_meters, gradeff_cell):
    """Evaluate the baseline (and train DINOv2's probe); an error fails the test.

    The public fixtures are the cell's, built at setup; ``gradeff_cell`` trains them and records with the meters.
    """
    record = gradeff_cell(cell)
    if record.status == "skipped":
        pytest.skip(record.detail)
    assert record.status != "error", record.detail
