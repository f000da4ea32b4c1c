"""Llama-3.2-1B-style decoder (causal LM), built from ``transformers.LlamaConfig``."""

from __future__ import annotations

from transformers import LlamaConfig, LlamaForCausalLM

from gradeff.axes.models._weights import instantiate

__all__ = ["CONFIGS", "build", "config"]

# The paper's "Llama 3.1 1B" is Llama-3.2-1B: 16 layers, GQA with 8 KV heads, tied embeddings,
# llama3 RoPE scaling. ~1.236 B parameters.
_PAPER = dict(
    vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072,
    rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "high_freq_factor": 4.0,
                     "low_freq_factor": 1.0, "original_max_position_embeddings": 8192},
)

CONFIGS: dict[str, dict] = {
    # Same shape rules as the paper config (GQA 2:1, tied embeddings) at a size that trains in
    # tens of milliseconds per step on two CPU cores.
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 tie_word_embeddings=True, bos_token_id=2, eos_token_id=2, pad_token_id=0),
    "small": dict(vocab_size=1024, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=1024,
                  tie_word_embeddings=True, bos_token_id=2, eos_token_id=2, pad_token_id=0),
    "paper": _PAPER,
}


def config(profile: str, *, vocab_size: int | None = None) -> LlamaConfig:
    """The ``LlamaConfig`` of a profile, optionally with another vocabulary size."""
    kwargs = dict(CONFIGS[profile])
    if vocab_size is not None:
        kwargs["vocab_size"] = vocab_size
    return LlamaConfig(**kwargs)


def build(profile: str, *, vocab_size=None, num_labels=None, weights_dir=None, device="cpu"):
    """Build the decoder; ``num_labels`` is ignored (language modelling has no classes)."""
    model = instantiate(LlamaForCausalLM, config(profile, vocab_size=vocab_size), weights_dir=weights_dir,
                        device=device)
    # The KV cache is for generation; in training it only costs memory.
    model.config.use_cache = False
    return model
