"""PaliGemma prompted to classify, and the baselines that run only from given weights."""

import torch
import torch.nn.functional as F

from gradeff.axes.models import MODELS, build_model
from gradeff.cell.config import RunConfig
from gradeff.cell.plan import cannot_run
from gradeff.studies.grid import Cell


def _own_forward_scores(model, pixel_values) -> torch.Tensor:
    """Each class scored by PaliGemma's own forward: [image] [BOS] prompt as the prefix (token type 0, attended
    bidirectionally by PaliGemma's mask), the class name as the answer (token type 1, causal)."""
    inner = model.model
    image = [inner.config.image_token_id] * inner.config.text_config.num_image_tokens
    prefix = image + model.after_ids.tolist()
    scores = []
    for ids, mask in zip(model.name_ids, model.name_mask):
        name = ids[mask].tolist()
        input_ids = torch.tensor([prefix + name] * len(pixel_values))
        types = torch.tensor([[0] * len(prefix) + [1] * len(name)] * len(pixel_values))
        logits = inner(input_ids=input_ids, pixel_values=pixel_values, token_type_ids=types,
                       attention_mask=torch.ones_like(input_ids)).logits
        log_probs = F.log_softmax(logits.float(), dim=-1)
        scores.append(sum(log_probs[:, len(prefix) - 1 + j, token] for j, token in enumerate(name)))
    return torch.stack(scores, dim=1)


def test_one_pass_scores_are_paligemmas_own_with_its_bidirectional_prefix():
    """The tree-masked pass reads the image and prompt bidirectionally and counts positions from 1, as PaliGemma's
    forward does; a causal prefix would score otherwise."""
    torch.manual_seed(0)
    model = build_model("paligemma", "tiny", num_labels=10).eval()
    pixel_values = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = _own_forward_scores(model, pixel_values)
        torch.testing.assert_close(model(pixel_values=pixel_values).logits, expected, rtol=1e-5, atol=1e-5)
        model.bidirectional_prefix = False
        assert (model(pixel_values=pixel_values).logits - expected).abs().max() > 1e-3


def test_paligemma_and_mobilevlm_skip_without_weights_naming_them():
    for key in ("paligemma", "mobilevlm"):
        reason = cannot_run(Cell(key, "adamw", "standard", "zero_shot", "cifar100", grid="baselines"), RunConfig())
        assert reason.startswith(f"needs weights: --gradeff-weights {key}=PATH (a save_pretrained copy of "
                                 f"{MODELS[key].hub_id}, with its tokenizer) or {key}=hub with --gradeff-allow-hub")
    given = RunConfig(weights=(("paligemma", "/models/paligemma"), ("mobilevlm", "/models/mobilevlm")))
    assert cannot_run(Cell("paligemma", "adamw", "standard", "zero_shot", "dtd", grid="baselines"), given) is None
    assert cannot_run(Cell("mobilevlm", "adamw", "standard", "zero_shot", "dtd", grid="baselines"), given) == (
        "not runnable: " + MODELS["mobilevlm"].unavailable)
