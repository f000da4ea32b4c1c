"""gradeff's ViT-S/16 and TinyViT-21M against timm's: the same state dict gives the same logits.

Runs in the reference environment (``bash scripts/reference-env.sh``, or ``tox -e reference``), where timm is
installed; in the default one it is skipped. timm builds each model with random weights, every tensor then moved
off its initial value (zero-initialised biases and BatchNorm scales, running statistics) so that a tensor loaded
into the wrong place shows; the state dict is saved as timm saves it (safetensors) and loaded through
:func:`gradeff.axes.models.checkpoint.from_checkpoint`. Logits on a batch of 224 px images must agree within 1e-4
(max absolute difference, float32) in eval mode and, with stochastic depth off and the same seed, in train mode
(TinyViT's BatchNorms then normalise with the batch's statistics on both sides).
"""

import pytest

timm = pytest.importorskip("timm", reason="needs timm, which only the reference environment has: "
                                          "bash scripts/reference-env.sh (or tox -e reference)")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from gradeff.axes.models._layers import DropPath  # noqa: E402
from gradeff.axes.models.checkpoint import from_checkpoint  # noqa: E402
from tests.axes.models.published import perturb  # noqa: E402

# The hub checkpoints' tags (1000-class heads), as --gradeff-weights KEY=hub loads them.
TIMM_NAMES = {"vit_s": "vit_small_patch16_224.augreg_in21k_ft_in1k", "tinyvit": "tiny_vit_21m_224.dist_in22k_ft_in1k"}
TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=sorted(TIMM_NAMES))
def pair(request, tmp_path_factory):
    """(key, timm's model, ours from the saved state dict), both in float32."""
    key = request.param
    torch.manual_seed(0)
    reference = timm.create_model(TIMM_NAMES[key], pretrained=False, drop_path_rate=0.0)
    perturb(reference, 0.02)
    path = tmp_path_factory.mktemp(key) / "model.safetensors"
    save_file({name: t.contiguous() for name, t in reference.state_dict().items()}, path)
    ours = from_checkpoint(key, path)
    for module in ours.modules():
        if isinstance(module, DropPath):
            module.rate = 0.0
    return key, reference, ours


def _pixels() -> torch.Tensor:
    return torch.randn(4, 3, 224, 224, generator=torch.Generator().manual_seed(7))


def _compare(key, reference, ours, mode: str) -> float:
    torch.manual_seed(1)
    expected = reference(_pixels())
    torch.manual_seed(1)
    got = ours(pixel_values=_pixels()).logits
    difference = (got - expected).abs().max().item()
    print(f"\nequivalence {key} {mode}: max |logit difference| {difference:.3g} "
          f"(logits up to {expected.abs().max().item():.3g}, {tuple(got.shape)})")
    return difference


def test_eval_mode_logits_are_timms(pair):
    key, reference, ours = pair
    reference.eval(), ours.eval()
    with torch.no_grad():
        assert _compare(key, reference, ours, "eval") <= TOLERANCE


def test_train_mode_logits_are_timms(pair):
    """Train mode, stochastic depth off, one seed: dropout is 0 in both, BatchNorm uses the batch's statistics."""
    key, reference, ours = pair
    reference.train(), ours.train()
    assert _compare(key, reference, ours, "train") <= TOLERANCE
    # The batch statistics moved the running ones the same way.
    if key == "tinyvit":
        ours_bn = ours.tinyvit.patch_embed.conv1.bn
        assert torch.allclose(ours_bn.running_mean, reference.patch_embed.conv1.bn.running_mean, atol=1e-6)
