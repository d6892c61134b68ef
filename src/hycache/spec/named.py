"""The fields of the built-in model specs (``ModelSpec.named``, ``NAMED_SPECS``).

The HF models are built by ``parse_hf_config`` from the cache-relevant fields of their published
``config.json`` (copied below, field names and values as published), so the built-in specs and
``from_hf_config`` on the real file agree (tests/spec/test_configs.py compares them with the
files under data/configs/ where those are committed). ``marconi-7b`` is the 7B Mamba2 hybrid
of the Marconi paper (MLSys 2025), which has no HF config; it uses that paper's own byte
accounting. This module returns ``SpecFields`` and does not import ``hycache.spec.model``,
which turns them into specs.
"""

from __future__ import annotations

from collections.abc import Mapping

from hycache.spec.fields import SpecFields
from hycache.spec.groups import FullAttentionGroup, RecurrentGroup
from hycache.spec.hf.parse import parse_hf_config

QWEN3_NEXT_80B_A3B: Mapping[str, object] = {
    "_name_or_path": "Qwen/Qwen3-Next-80B-A3B-Instruct",
    "model_type": "qwen3_next",
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "num_hidden_layers": 48,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "num_experts": 512,
    "num_experts_per_tok": 10,
}

QWEN3_5_27B: Mapping[str, object] = {
    "_name_or_path": "Qwen/Qwen3.5-27B",
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "dtype": "bfloat16",
        "vocab_size": 248320,
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 64,
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "mamba_ssm_dtype": "float32",
    },
}

KIMI_LINEAR_48B_A3B: Mapping[str, object] = {
    "_name_or_path": "moonshotai/Kimi-Linear-48B-A3B-Instruct",
    "model_type": "kimi_linear",
    "torch_dtype": "bfloat16",
    "vocab_size": 163840,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "moe_intermediate_size": 1024,
    "num_hidden_layers": 27,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26],
        "num_heads": 32,
        "head_dim": 128,
        "short_conv_kernel_size": 4,
    },
}

NEMOTRON_3_NANO_30B_A3B: Mapping[str, object] = {
    "_name_or_path": "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16",
    "model_type": "nemotron_h",
    "torch_dtype": "bfloat16",
    "vocab_size": 131072,
    "hidden_size": 2688,
    "num_hidden_layers": 52,
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "mamba_num_heads": 64,
    "mamba_head_dim": 64,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "mamba_ssm_cache_dtype": "float32",
    "intermediate_size": 1856,
    "n_routed_experts": 128,
    "num_experts_per_tok": 6,
    "moe_intermediate_size": 1856,
    "n_shared_experts": 1,
    "moe_shared_expert_intermediate_size": 3712,
}

JAMBA_1_5_MINI: Mapping[str, object] = {
    "_name_or_path": "ai21labs/AI21-Jamba-1.5-Mini",
    "model_type": "jamba",
    "torch_dtype": "bfloat16",
    "vocab_size": 65536,
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "expert_layer_period": 2,
    "expert_layer_offset": 1,
    "num_experts": 16,
    "num_experts_per_tok": 2,
    "mamba_d_state": 16,
    "mamba_d_conv": 4,
    "mamba_expand": 2,
    "mamba_dt_rank": 256,
}

HF_CONFIGS: Mapping[str, Mapping[str, object]] = {
    "qwen3-next-80b-a3b": QWEN3_NEXT_80B_A3B,
    "qwen3.5-27b": QWEN3_5_27B,
    "kimi-linear-48b-a3b": KIMI_LINEAR_48B_A3B,
    "nemotron-3-nano-30b-a3b": NEMOTRON_3_NANO_30B_A3B,
    "jamba-1.5-mini": JAMBA_1_5_MINI,
}
"""Published config.json fields of the built-in HF models, by spec name."""


def marconi_7b() -> SpecFields:
    """Marconi's 7B hybrid: 24 Mamba2 + 4 attention + 28 MLP layers, d=4096, N=128, fp16, MHA.

    Per Mamba2 layer (the paper's accounting): SSM state ``d * N * 2`` = 1,048,576 B and conv
    ``(2d + 2N) * 4 * 2`` = 67,584 B, 1,116,160 B in all. Attention KV ``2 * d * 2`` = 16,384
    B/token/layer (32 heads x 128). MLP ``8 d^2`` parameters per layer (d -> 4d -> d). Mamba2
    projections: in_proj ``d * (2 * 2d + 2N + 2d/64)`` plus out_proj ``2d * d`` (expand 2,
    head dim 64). vocab 256,000 as in the Mamba2-Hybrid 8B; it is outside Marconi's accounting.
    """
    d, n = 4096, 128
    inner = 2 * d
    return SpecFields(
        name="marconi-7b",
        groups=(
            FullAttentionGroup(layers=4, q_heads=32, kv_heads=32, head_dim=128, dtype_bytes=2),
            RecurrentGroup(
                layers=24,
                mixer="mamba2",
                recurrent_state_bytes=d * n * 2,
                conv_state_bytes=(2 * d + 2 * n) * 4 * 2,
                state_dtype="float16",
                conv_dtype="float16",
                proj_params_per_layer=d * (2 * inner + 2 * n + inner // 64) + inner * d,
                kernel_chunk=256,  # Mamba2's SSD chunk
            ),
        ),
        hidden_size=d,
        vocab_size=256_000,
        active_mlp_params_per_token=28 * 8 * d * d,
        num_layers=56,
    )


def named_spec_fields() -> dict[str, SpecFields]:
    """The fields of every built-in spec, by name (fresh objects)."""
    specs = {name: parse_hf_config(cfg, name=name) for name, cfg in HF_CONFIGS.items()}
    specs["marconi-7b"] = marconi_7b()
    return specs
