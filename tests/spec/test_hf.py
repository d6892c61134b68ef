"""Tests of ModelSpec.from_hf_config with small hand-written configs of every supported type."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest

from hycache.errors import SpecError
from hycache.spec.hf.parse import SUPPORTED_MODEL_TYPES
from hycache.spec.model import ModelSpec


def qwen3_next() -> dict[str, Any]:
    return {
        "model_type": "qwen3_next",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [0],
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 16,
        "num_experts": 8,
        "num_experts_per_tok": 2,
    }


def qwen3_5_text() -> dict[str, Any]:
    cfg = qwen3_next()
    for key in (
        "decoder_sparse_step",
        "mlp_only_layers",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
        "num_experts",
        "num_experts_per_tok",
        "torch_dtype",
    ):
        del cfg[key]
    cfg.update(model_type="qwen3_5_text", dtype="bfloat16", mamba_ssm_dtype="float32")
    return cfg


def kimi_linear() -> dict[str, Any]:
    return {
        "model_type": "kimi_linear",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "kv_lora_rank": 16,
        "q_lora_rank": None,
        "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 4,
        "v_head_dim": 8,
        "num_experts": 4,
        "num_experts_per_token": 2,
        "num_shared_experts": 1,
        "first_k_dense_replace": 1,
        "moe_layer_freq": 1,
        "linear_attn_config": {
            "full_attn_layers": [4],
            "kda_layers": [1, 2, 3],
            "num_heads": 2,
            "head_dim": 8,
            "short_conv_kernel_size": 4,
        },
    }


def nemotron_h() -> dict[str, Any]:
    return {
        "model_type": "nemotron_h",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 64,
        "num_hidden_layers": 6,
        "hybrid_override_pattern": "M*-MEM",
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "ssm_state_size": 8,
        "n_groups": 2,
        "conv_kernel": 4,
        "expand": 2,
        "intermediate_size": 128,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "moe_shared_expert_intermediate_size": 48,
    }


def bamba() -> dict[str, Any]:
    return {
        "model_type": "bamba",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attn_layer_indices": [1],
        "mamba_n_heads": 4,
        "mamba_d_head": "auto",
        "mamba_n_groups": 1,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    }


def jamba() -> dict[str, Any]:
    return {
        "model_type": "jamba",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "attn_layer_period": 4,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mamba_d_state": 4,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": "auto",
    }


def falcon_h1() -> dict[str, Any]:
    return {
        "model_type": "falcon_h1",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "mamba_d_ssm": 48,
        "mamba_n_heads": 4,
        "mamba_d_head": "auto",
        "mamba_n_groups": 1,
        "mamba_d_state": 8,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
    }


def gemma3() -> dict[str, Any]:
    """Like the published multimodal configs: most text fields left to Gemma3TextConfig."""
    return {
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "gemma3_text",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 12,
            "sliding_window": 16,
        },
        "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 1152},
    }


def gemma3_text() -> dict[str, Any]:
    return {
        "model_type": "gemma3_text",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "sliding_window": 16,
        "layer_types": [
            "sliding_attention",
            "full_attention",
            "sliding_attention",
            "sliding_attention",
        ],
    }


def gpt_oss() -> dict[str, Any]:
    return {
        "model_type": "gpt_oss",
        "torch_dtype": "bfloat16",
        "vocab_size": 100,
        "hidden_size": 32,
        "intermediate_size": 16,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "sliding_window": 8,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    }


ALL_CONFIGS = {
    "qwen3_next": qwen3_next,
    "qwen3_5_text": qwen3_5_text,
    "kimi_linear": kimi_linear,
    "nemotron_h": nemotron_h,
    "bamba": bamba,
    "jamba": jamba,
    "falcon_h1": falcon_h1,
    "gemma3": gemma3,
    "gemma3_text": gemma3_text,
    "gpt_oss": gpt_oss,
}


def _layers(spec: ModelSpec) -> dict[str, int]:
    return {g.kind: g.layers for g in spec.groups}


# ------------------------------------------------------------------ per architecture


def test_qwen3_next() -> None:
    spec = ModelSpec.from_hf_config(qwen3_next())
    assert spec.name == "qwen3_next"
    assert _layers(spec) == {"full": 2, "recurrent": 6}
    assert (spec.num_layers, spec.hidden_size, spec.vocab_size) == (8, 64, 100)
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert rec.mixer == "gdn" and rec.state_dtype == rec.conv_dtype == "bfloat16"
    assert rec.recurrent_state_bytes == 4 * 8 * 8 * 2
    assert rec.conv_state_bytes == (2 * 2 * 8 + 4 * 8) * 3 * 2
    assert rec.proj_params_per_layer == 64 * (64 + 32 + 2 * 4) + 32 * 64
    assert (full.q_heads, full.kv_heads, full.head_dim, full.dtype_bytes) == (4, 2, 16, 2)
    assert full.kv_bytes_per_token_per_layer == 2 * 2 * 16 * 2
    # gated q_proj (query + output gate), k, v, o
    assert full.projection_params(64) == 64 * (2 * 4 * 16 + 2 * 2 * 16) + 4 * 16 * 64
    moe = 64 * 8 + 2 * 3 * 64 * 32 + 3 * 64 * 16 + 64
    assert spec.active_mlp_params_per_token == 3 * 64 * 128 + 7 * moe


def test_qwen3_next_layer_types_list_wins() -> None:
    cfg = qwen3_next()
    cfg["layer_types"] = ["full_attention"] + ["linear_attention"] * 7
    assert _layers(ModelSpec.from_hf_config(cfg)) == {"full": 1, "recurrent": 7}
    del cfg["full_attention_interval"]
    cfg["layer_types"] = None
    assert _layers(ModelSpec.from_hf_config(cfg)) == {"full": 2, "recurrent": 6}  # default 4


@pytest.mark.parametrize(
    "layer_types", [["full_attention"] * 3, ["full_attention"] * 7 + ["mamba"], "full_attention"]
)
def test_qwen_bad_layer_types(layer_types: object) -> None:
    cfg = qwen3_next()
    cfg["layer_types"] = layer_types
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "layer_types"
    assert "layer_types" in str(info.value)


def test_qwen3_5_flat_and_nested_agree() -> None:
    flat = ModelSpec.from_hf_config(qwen3_5_text())
    nested = ModelSpec.from_hf_config({"model_type": "qwen3_5", "text_config": qwen3_5_text()})
    assert dataclass_without_name(flat) == dataclass_without_name(nested)
    rec = flat.recurrent
    assert rec is not None
    # mamba_ssm_dtype float32 applies to the state; the conv window stays in the model dtype
    assert (rec.state_dtype, rec.conv_dtype) == ("float32", "bfloat16")
    assert rec.recurrent_state_bytes == 4 * 8 * 8 * 4
    assert rec.conv_state_bytes == 64 * 3 * 2
    full = flat.full
    assert full is not None and full.dtype_bytes == 2
    assert flat.active_mlp_params_per_token == 8 * 3 * 64 * 128


def test_qwen3_5_nested_reads_dtype_from_top_level() -> None:
    text = qwen3_5_text()
    del text["dtype"]
    spec = ModelSpec.from_hf_config(
        {"model_type": "qwen3_5", "torch_dtype": "float16", "text_config": text}
    )
    full = spec.full
    assert full is not None and full.dtype_bytes == 2


def test_qwen3_5_moe() -> None:
    cfg = qwen3_5_text()
    cfg.update(
        model_type="qwen3_5_moe_text",
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=16,
    )
    spec = ModelSpec.from_hf_config({"model_type": "qwen3_5_moe", "text_config": cfg})
    moe = 64 * 8 + 2 * 3 * 64 * 32 + 3 * 64 * 16 + 64
    assert spec.active_mlp_params_per_token == 8 * moe


def test_dtype_overrides() -> None:
    spec = ModelSpec.from_hf_config(qwen3_next(), state_dtype="float32")
    rec = spec.recurrent
    assert rec is not None and (rec.state_dtype, rec.conv_dtype) == ("float32", "bfloat16")
    assert rec.recurrent_state_bytes == 4 * 8 * 8 * 4
    spec = ModelSpec.from_hf_config(qwen3_5_text(), conv_dtype="fp32")
    rec = spec.recurrent
    assert rec is not None and rec.state_dtype == rec.conv_dtype == "float32"
    assert rec.conv_state_bytes == 64 * 3 * 4
    spec = ModelSpec.from_hf_config(qwen3_next(), dtype="float32")
    full, rec = spec.full, spec.recurrent
    assert full is not None and full.dtype_bytes == 4
    assert rec is not None and rec.state_dtype == "float32"


def test_kimi_linear() -> None:
    spec = ModelSpec.from_hf_config(kimi_linear())
    assert _layers(spec) == {"full": 1, "recurrent": 3}
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert rec.mixer == "kda"
    # vLLM keeps the KDA state in float32 and the conv window in the model dtype
    assert (rec.state_dtype, rec.conv_dtype) == ("float32", "bfloat16")
    assert rec.recurrent_state_bytes == 2 * 8 * 8 * 4
    assert rec.conv_state_bytes == 3 * 16 * 3 * 2
    assert full.latent_dim == 16 + 4
    assert full.kv_bytes_per_token_per_layer == 20 * 2
    assert full.head_dim == 12
    assert full.projection_params(64) == 64 * 2 * 12 + 64 * 20 + 16 * 2 * 16 + 2 * 8 * 64
    moe = 64 * 4 + 2 * 3 * 64 * 32 + 3 * 64 * 32
    assert spec.active_mlp_params_per_token == 3 * 64 * 128 + 3 * moe


def test_kimi_linear_flat_fields_as_transformers_5_saves_them() -> None:
    """transformers 5 writes the KDA shape as flat ``linear_*`` fields plus ``layer_types``
    instead of ``linear_attn_config``: both spell the same model."""
    nested = kimi_linear()
    flat = dict(nested)
    lac = flat.pop("linear_attn_config")
    flat.update(
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        linear_num_heads=lac["num_heads"],
        linear_head_dim=lac["head_dim"],
        linear_conv_kernel_dim=lac["short_conv_kernel_size"],
    )
    assert ModelSpec.from_hf_config(flat) == ModelSpec.from_hf_config(nested)
    del flat["linear_head_dim"]
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(flat)
    assert info.value.field == "linear_head_dim"


def test_kimi_linear_layer_indices_are_one_based() -> None:
    cfg = kimi_linear()
    cfg["linear_attn_config"].update(full_attn_layers=[3], kda_layers=[0, 1, 2])
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert "linear_attn_config.kda_layers" in str(info.value)
    cfg["linear_attn_config"].update(full_attn_layers=[4], kda_layers=[1, 2])
    with pytest.raises(SpecError, match="neither"):
        ModelSpec.from_hf_config(cfg)


def test_kimi_linear_missing_nested_field() -> None:
    cfg = kimi_linear()
    del cfg["linear_attn_config"]["short_conv_kernel_size"]
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "short_conv_kernel_size"
    assert "'linear_attn_config.short_conv_kernel_size'" in str(info.value)


def test_nemotron_h() -> None:
    spec = ModelSpec.from_hf_config(nemotron_h())
    assert _layers(spec) == {"full": 1, "recurrent": 3}
    assert spec.num_layers == 6  # every pattern character is a layer
    rec = spec.recurrent
    assert rec is not None and rec.mixer == "mamba2"
    # NemotronH keeps SSM states in float32 by default (mamba_ssm_cache_dtype), conv in bf16
    assert (rec.state_dtype, rec.conv_dtype) == ("float32", "bfloat16")
    assert rec.recurrent_state_bytes == 4 * 16 * 8 * 4
    assert rec.conv_state_bytes == (64 + 2 * 2 * 8) * 3 * 2
    assert rec.proj_params_per_layer == 64 * (64 + 96 + 4) + 64 * 64
    moe = 64 * 4 + 2 * 2 * 64 * 32 + 2 * 64 * 48
    assert spec.active_mlp_params_per_token == 2 * 64 * 128 + moe


def test_nemotron_h_layers_block_type_and_bad_pattern() -> None:
    cfg = nemotron_h()
    del cfg["hybrid_override_pattern"]
    cfg["layers_block_type"] = ["mamba", "attention", "mlp", "linear_attention", "moe", "mamba"]
    assert ModelSpec.from_hf_config(cfg) == ModelSpec.from_hf_config(nemotron_h())
    cfg = nemotron_h()
    cfg["hybrid_override_pattern"] = "M*X"
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "hybrid_override_pattern"


def test_bamba() -> None:
    spec = ModelSpec.from_hf_config(bamba())
    assert _layers(spec) == {"full": 1, "recurrent": 3}
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert rec.recurrent_state_bytes == 4 * 16 * 8 * 2  # d_head auto = 2*32/4
    assert rec.conv_state_bytes == (64 + 16) * 3 * 2
    assert full.head_dim == 8  # hidden // heads
    assert spec.active_mlp_params_per_token == 4 * 3 * 32 * 64


def test_bamba_bad_attention_index() -> None:
    cfg = bamba()
    cfg["attn_layer_indices"] = [4]
    with pytest.raises(SpecError, match="attn_layer_indices"):
        ModelSpec.from_hf_config(cfg)


def test_jamba() -> None:
    spec = ModelSpec.from_hf_config(jamba())
    assert _layers(spec) == {"full": 2, "recurrent": 6}
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert rec.mixer == "mamba"
    assert rec.recurrent_state_bytes == 64 * 4 * 2
    assert rec.conv_state_bytes == 64 * 3 * 2
    dt_rank = 2  # ceil(32 / 16)
    assert rec.proj_params_per_layer == 32 * 128 + 64 * (dt_rank + 8) + dt_rank * 64 + 64 * 32
    assert (full.kv_heads, full.head_dim) == (1, 8)
    moe = 32 * 4 + 2 * 3 * 32 * 64
    assert spec.active_mlp_params_per_token == 4 * 3 * 32 * 64 + 4 * moe


def test_jamba_offset_must_be_below_period() -> None:
    cfg = jamba()
    cfg["attn_layer_offset"] = 4
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "attn_layer_offset"


def test_falcon_h1_is_a_parallel_hybrid() -> None:
    spec = ModelSpec.from_hf_config(falcon_h1())
    assert _layers(spec) == {"full": 3, "recurrent": 3}
    assert spec.num_layers == 3
    rec = spec.recurrent
    assert rec is not None
    assert rec.recurrent_state_bytes == 4 * 12 * 8 * 2  # mamba_d_ssm 48 / 4 heads
    assert rec.conv_state_bytes == (48 + 16) * 3 * 2


def test_gemma3_nested_uses_text_config_defaults() -> None:
    spec = ModelSpec.from_hf_config(gemma3())
    assert _layers(spec) == {"full": 2, "swa": 10}  # sliding_window_pattern 6
    swa, full = spec.swa, spec.full
    assert swa is not None and full is not None
    assert swa.window == 16
    assert (full.q_heads, full.kv_heads, full.head_dim) == (8, 4, 256)
    assert spec.vocab_size == 262_208
    assert spec.recurrent is None and spec.state_to_kv_tokens() is None
    assert spec.active_mlp_params_per_token == 12 * 3 * 32 * 64


def test_gemma3_text_layer_types_and_pattern() -> None:
    spec = ModelSpec.from_hf_config(gemma3_text())
    assert _layers(spec) == {"full": 1, "swa": 3}
    cfg = gemma3_text()
    del cfg["layer_types"]
    cfg["sliding_window_pattern"] = 2
    assert _layers(ModelSpec.from_hf_config(cfg)) == {"full": 2, "swa": 2}


def test_gpt_oss() -> None:
    spec = ModelSpec.from_hf_config(gpt_oss())
    assert _layers(spec) == {"full": 2, "swa": 2}
    swa = spec.swa
    assert swa is not None and swa.window == 8
    moe = 32 * 4 + 2 * 3 * 32 * 16
    assert spec.active_mlp_params_per_token == 4 * moe
    cfg = gpt_oss()
    cfg["experts_per_token"] = cfg.pop("num_experts_per_tok")
    assert ModelSpec.from_hf_config(cfg) == spec


def test_gpt_oss_without_torch_dtype_defaults_to_bfloat16() -> None:
    cfg = gpt_oss()
    del cfg["torch_dtype"]  # as published: gpt-oss configs have no torch_dtype
    spec = ModelSpec.from_hf_config(cfg)
    assert spec == ModelSpec.from_hf_config(gpt_oss())
    full = spec.full
    assert full is not None and full.dtype_bytes == 2
    full = ModelSpec.from_hf_config(cfg, dtype="float32").full
    assert full is not None and full.dtype_bytes == 4


def test_missing_dtype_without_family_default_says_how_to_choose() -> None:
    cfg = bamba()
    del cfg["torch_dtype"]
    with pytest.raises(SpecError, match="dtype=") as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "torch_dtype"
    rec = ModelSpec.from_hf_config(cfg, dtype="float16").recurrent
    assert rec is not None and rec.state_dtype == rec.conv_dtype == "float16"


def test_moe_shapes_travel_with_the_spec() -> None:
    q = ModelSpec.from_hf_config(qwen3_next()).moe
    assert q is not None
    # 7 MoE layers of 8 experts, 2 per token, gate/up/down 3 * 64 * 32 each
    assert (q.experts, q.experts_per_token) == (8, 2)
    assert q.routed_params_per_token == 7 * 2 * 3 * 64 * 32
    n = ModelSpec.from_hf_config(nemotron_h()).moe
    assert n is not None and n.routed_params_per_token == 1 * 2 * 2 * 64 * 32  # up, down
    g = ModelSpec.from_hf_config(gpt_oss()).moe
    assert g is not None and (g.experts, g.routed_params_per_token) == (4, 4 * 2 * 3 * 32 * 16)
    for dense in (qwen3_5_text(), bamba(), falcon_h1(), gemma3()):
        assert ModelSpec.from_hf_config(dense).moe is None


def test_nemotron_h_reads_attention_head_dim() -> None:
    cfg = nemotron_h()
    cfg["attention_head_dim"] = cfg.pop("head_dim")  # early NemotronH configs
    assert ModelSpec.from_hf_config(cfg) == ModelSpec.from_hf_config(nemotron_h())


def test_supported_model_types() -> None:
    expected = {
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_text",
        "qwen3_5_moe",
        "qwen3_5_moe_text",
        "kimi_linear",
        "nemotron_h",
        "bamba",
        "jamba",
        "falcon_h1",
        "gemma3",
        "gemma3_text",
        "gpt_oss",
    }
    assert set(SUPPORTED_MODEL_TYPES) == expected


# ------------------------------------------------------------------ names, paths, errors


def test_name_defaults_and_override() -> None:
    cfg = bamba()
    assert ModelSpec.from_hf_config(cfg).name == "bamba"
    cfg["_name_or_path"] = "ibm/bamba-9b"
    assert ModelSpec.from_hf_config(cfg).name == "ibm/bamba-9b"
    assert ModelSpec.from_hf_config(cfg, name="mine").name == "mine"


@pytest.mark.parametrize("model_type", sorted(ALL_CONFIGS))
def test_path_and_directory_sources(tmp_path: Path, model_type: str) -> None:
    cfg = ALL_CONFIGS[model_type]()
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    from_dict = ModelSpec.from_hf_config(cfg)
    assert ModelSpec.from_hf_config(path) == from_dict
    assert ModelSpec.from_hf_config(str(tmp_path)) == from_dict


def test_unknown_model_type() -> None:
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config({"model_type": "llama", "torch_dtype": "bfloat16"})
    assert info.value.field == "model_type"
    assert "'llama'" in str(info.value)
    assert "qwen3_next" in str(info.value)


def test_missing_model_type() -> None:
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config({"hidden_size": 3})
    assert info.value.field == "model_type"


def test_missing_field_names_the_field() -> None:
    cfg = qwen3_next()
    del cfg["linear_num_value_heads"]
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert str(info.value) == "qwen3_next config.json: missing field 'linear_num_value_heads'"
    assert info.value.field == "linear_num_value_heads"


def test_missing_field_message_names_the_path(tmp_path: Path) -> None:
    cfg = jamba()
    del cfg["mamba_d_state"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(path)
    assert str(path) in str(info.value)
    assert "'mamba_d_state'" in str(info.value)
    assert info.value.field == "mamba_d_state"


def test_missing_nested_field_names_text_config() -> None:
    text = qwen3_5_text()
    del text["linear_key_head_dim"]
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config({"model_type": "qwen3_5", "text_config": text})
    assert "'text_config.linear_key_head_dim'" in str(info.value)
    assert info.value.field == "linear_key_head_dim"


@pytest.mark.parametrize(
    ("model_type", "field"),
    [
        ("qwen3_next", "head_dim"),
        ("kimi_linear", "kv_lora_rank"),
        ("nemotron_h", "ssm_state_size"),
        ("bamba", "mamba_n_heads"),
        ("jamba", "mamba_expand"),
        ("falcon_h1", "mamba_d_conv"),
        ("gpt_oss", "sliding_window"),
        ("gemma3_text", "num_hidden_layers"),
        ("gpt_oss", "num_local_experts"),
        ("bamba", "torch_dtype"),
        ("bamba", "vocab_size"),
    ],
)
def test_missing_required_fields(model_type: str, field: str) -> None:
    cfg = ALL_CONFIGS[model_type]()
    del cfg[field]
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == field
    assert f"'{field}'" in str(info.value)


@pytest.mark.parametrize("value", [0, -3, "16", True, 2.5, float("nan"), float("inf"), -math.inf])
def test_invalid_field_values(value: object) -> None:
    cfg = copy.deepcopy(qwen3_next())
    cfg["linear_num_key_heads"] = value
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "linear_num_key_heads"


def test_unknown_dtype_names_the_field() -> None:
    cfg = qwen3_next()
    cfg["torch_dtype"] = "int7"
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(cfg)
    assert info.value.field == "torch_dtype"
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(qwen3_next(), state_dtype="nope")
    assert info.value.field == "state_dtype"


def test_path_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "config.json"
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(missing)
    assert str(missing) in str(info.value)
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(tmp_path)  # a directory without config.json
    assert str(tmp_path / "config.json") in str(info.value)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_unreadable_config(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        ModelSpec.from_hf_config(path)
    assert str(path) in str(info.value)


def dataclass_without_name(spec: ModelSpec) -> tuple[object, ...]:
    return (
        spec.groups,
        spec.hidden_size,
        spec.vocab_size,
        spec.active_mlp_params_per_token,
        spec.num_layers,
    )
