"""The committed published configs (data/configs/): specs checked against numbers computed by
hand from their fields, and against the built-in named specs of the same models.

Each test first pins the config fields its formulas use (so a changed file fails loudly), then
writes the byte and parameter formulas out: KV bytes per token = 2 (K, V) * kv_heads *
head_dim * layers * dtype bytes; GDN state = v_heads * k_head_dim * v_head_dim, conv =
(2 * k_heads * k_head_dim + v_heads * v_head_dim) * (kernel - 1); Mamba2 state = heads *
head_dim * d_state, conv = (heads * head_dim + 2 * groups * d_state) * (kernel - 1); gated MLP
= 3 * hidden * intermediate; MoE layer = router hidden * E + top_k routed experts + shared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hycache.sim.cost import CostModel
from hycache.sim.params import estimate_params
from hycache.spec import ModelSpec
from hycache.spec.named import HF_CONFIGS

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
BF16, FP32 = 2, 4


def _raw(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / name / "config.json").read_text())
    return data


def _spec(name: str) -> ModelSpec:
    return ModelSpec.from_hf_config(CONFIGS / name / "config.json")


def _pin(cfg: dict[str, Any], **fields: object) -> None:
    assert {k: cfg.get(k) for k in fields} == fields


def test_every_committed_config_is_checked_here() -> None:
    committed = sorted(p.parent.name for p in CONFIGS.glob("*/config.json"))
    assert committed == sorted(CHECKED)


# ------------------------------------------------------------------ qwen3_next


def test_qwen3_next_80b_a3b() -> None:
    cfg = _raw("qwen3_next")
    _pin(
        cfg,
        model_type="qwen3_next",
        torch_dtype="bfloat16",
        num_hidden_layers=48,
        full_attention_interval=4,
        hidden_size=2048,
        vocab_size=151936,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=512,
        num_experts_per_tok=10,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )
    spec = _spec("qwen3_next")
    full, rec = spec.full, spec.recurrent
    assert full is not None and rec is not None and spec.swa is None
    # every 4th of 48 layers is full attention: 12 full, 36 Gated DeltaNet
    assert (spec.num_layers, full.layers, rec.layers) == (48, 12, 36)
    assert spec.kv_bytes_per_token == 2 * 2 * 256 * 12 * BF16 == 24_576
    assert rec.recurrent_state_bytes == 32 * 128 * 128 * BF16 == 1_048_576
    assert rec.conv_state_bytes == (2 * 16 * 128 + 32 * 128) * (4 - 1) * BF16 == 49_152
    assert rec.state_bytes_per_layer == 1_097_728
    # q_proj (query + output gate), k, v, o
    attn = 2048 * (16 * 256 * 2 + 2 * 2 * 256) + 16 * 256 * 2048
    assert full.projection_params(2048) == attn == 27_262_976
    # in_proj_qkvz (conv channels + z), in_proj_ba (2 per value head), out_proj
    gdn = 2048 * (8192 + 32 * 128 + 2 * 32) + 32 * 128 * 2048
    assert rec.proj_params_per_layer == gdn == 33_685_504
    moe_layer = 2048 * 512 + 10 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048  # + shared_expert_gate
    assert spec.active_mlp_params_per_token == 48 * moe_layer == 1_711_374_336
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.experts_per_token) == (512, 10)
    assert spec.moe.routed_params_per_token == 48 * 10 * 3 * 2048 * 512
    embed = 151936 * 2048
    active = 12 * attn + 36 * gdn + 48 * moe_layer + 2 * embed
    assert estimate_params(spec).active == active == 3_873_538_048


# ------------------------------------------------------------------ qwen3_5 (dense, MoE)


def test_qwen3_5_27b_dense() -> None:
    cfg = _raw("qwen3_5")
    _pin(cfg, model_type="qwen3_5")
    text = cfg["text_config"]
    _pin(
        text,
        dtype="bfloat16",
        mamba_ssm_dtype="float32",
        num_hidden_layers=64,
        hidden_size=5120,
        intermediate_size=17408,
        vocab_size=248320,
        num_attention_heads=24,
        num_key_value_heads=4,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=48,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )
    assert text["layer_types"].count("full_attention") == 16
    spec = _spec("qwen3_5")
    full, rec = spec.full, spec.recurrent
    assert full is not None and rec is not None
    assert (spec.num_layers, full.layers, rec.layers) == (64, 16, 48)
    assert spec.kv_bytes_per_token == 2 * 4 * 256 * 16 * BF16 == 65_536
    # mamba_ssm_dtype float32 for the state; the conv window in the model dtype (bf16)
    assert rec.recurrent_state_bytes == 48 * 128 * 128 * FP32 == 3_145_728
    assert rec.conv_state_bytes == (2 * 16 * 128 + 48 * 128) * 3 * BF16 == 61_440
    attn = 5120 * (24 * 256 * 2 + 2 * 4 * 256) + 24 * 256 * 5120
    assert full.projection_params(5120) == attn
    gdn = 5120 * ((2 * 16 * 128 + 48 * 128) + 48 * 128 + 2 * 48) + 48 * 128 * 5120
    assert rec.proj_params_per_layer == gdn
    assert spec.active_mlp_params_per_token == 64 * 3 * 5120 * 17408 == 17_112_760_320
    assert spec.moe is None
    p = estimate_params(spec)
    assert p.active == p.total == 16 * attn + 48 * gdn + 64 * 3 * 5120 * 17408 + 2 * 248320 * 5120


def test_qwen3_5_35b_a3b_moe() -> None:
    cfg = _raw("qwen3_5_moe")
    _pin(cfg, model_type="qwen3_5_moe")
    text = cfg["text_config"]
    _pin(
        text,
        dtype="bfloat16",
        mamba_ssm_dtype="float32",
        num_hidden_layers=40,
        hidden_size=2048,
        vocab_size=248320,
        num_attention_heads=16,
        num_key_value_heads=2,
        head_dim=256,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_experts=256,
        num_experts_per_tok=8,
        moe_intermediate_size=512,
        shared_expert_intermediate_size=512,
        mlp_only_layers=[],
    )
    spec = _spec("qwen3_5_moe")
    full, rec = spec.full, spec.recurrent
    assert full is not None and rec is not None
    assert (spec.num_layers, full.layers, rec.layers) == (40, 10, 30)
    assert spec.kv_bytes_per_token == 2 * 2 * 256 * 10 * BF16 == 20_480
    assert rec.recurrent_state_bytes == 32 * 128 * 128 * FP32 == 2_097_152
    assert rec.conv_state_bytes == (2 * 16 * 128 + 32 * 128) * 3 * BF16 == 49_152
    moe_layer = 2048 * 256 + 8 * 3 * 2048 * 512 + 3 * 2048 * 512 + 2048
    assert spec.active_mlp_params_per_token == 40 * moe_layer
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.experts_per_token) == (256, 8)
    assert spec.moe.routed_params_per_token == 40 * 8 * 3 * 2048 * 512
    p = estimate_params(spec)
    # the model card's sizes: 35B total, 3B activated
    assert p.total / 1e9 == pytest.approx(34.7, abs=0.1)
    assert p.active / 1e9 == pytest.approx(3.5, abs=0.1)


# ------------------------------------------------------------------ nemotron_h


def test_nemotron_3_nano_30b_a3b() -> None:
    cfg = _raw("nemotron_h")
    pattern = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
    _pin(
        cfg,
        model_type="nemotron_h",
        torch_dtype="bfloat16",
        mamba_ssm_cache_dtype="float32",
        hybrid_override_pattern=pattern,
        hidden_size=2688,
        vocab_size=131072,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=128,
        mamba_num_heads=64,
        mamba_head_dim=64,
        ssm_state_size=128,
        n_groups=8,
        conv_kernel=4,
        n_routed_experts=128,
        num_experts_per_tok=6,
        moe_intermediate_size=1856,
        moe_shared_expert_intermediate_size=3712,
    )
    assert (pattern.count("M"), pattern.count("*"), pattern.count("E"), len(pattern)) == (
        23,
        6,
        23,
        52,
    )
    spec = _spec("nemotron_h")
    full, rec = spec.full, spec.recurrent
    assert full is not None and rec is not None
    assert (spec.num_layers, full.layers, rec.layers) == (52, 6, 23)
    assert spec.kv_bytes_per_token == 2 * 2 * 128 * 6 * BF16 == 6_144
    assert rec.recurrent_state_bytes == 64 * 64 * 128 * FP32 == 2_097_152
    assert rec.conv_state_bytes == (64 * 64 + 2 * 8 * 128) * 3 * BF16 == 36_864
    # in_proj (z, x/B/C conv channels, dt per head), out_proj
    assert rec.proj_params_per_layer == 2688 * (4096 + 6144 + 64) + 4096 * 2688
    # relu2 experts and shared expert: up and down only
    moe_layer = 2688 * 128 + 6 * 2 * 2688 * 1856 + 2 * 2688 * 3712
    assert spec.active_mlp_params_per_token == 23 * moe_layer == 1_843_838_976
    assert spec.moe is not None
    assert spec.moe.routed_params_per_token == 23 * 6 * 2 * 2688 * 1856
    assert estimate_params(spec).total / 1e9 == pytest.approx(31.6, abs=0.05)


def test_nemotron_h_56b_base() -> None:
    cfg = _raw("nemotron_h_56b")
    pattern = cfg["hybrid_override_pattern"]
    _pin(
        cfg,
        model_type="nemotron_h",
        torch_dtype="bfloat16",
        num_hidden_layers=118,
        hidden_size=8192,
        intermediate_size=32768,
        vocab_size=131072,
        num_attention_heads=64,
        num_key_value_heads=8,
        attention_head_dim=128,  # the early NemotronH name of head_dim
        mamba_num_heads=256,
        mamba_head_dim=64,
        ssm_state_size=256,
        n_groups=8,
        conv_kernel=4,
    )
    assert "mamba_ssm_cache_dtype" not in cfg  # NemotronHConfig's default: float32
    assert (pattern.count("M"), pattern.count("*"), pattern.count("-"), len(pattern)) == (
        54,
        10,
        54,
        118,
    )
    spec = _spec("nemotron_h_56b")
    full, rec = spec.full, spec.recurrent
    assert full is not None and rec is not None
    assert (spec.num_layers, full.layers, rec.layers) == (118, 10, 54)
    assert spec.kv_bytes_per_token == 2 * 8 * 128 * 10 * BF16 == 40_960
    assert rec.recurrent_state_bytes == 256 * 64 * 256 * FP32 == 16_777_216
    assert rec.conv_state_bytes == (256 * 64 + 2 * 8 * 256) * 3 * BF16 == 122_880
    assert spec.active_mlp_params_per_token == 54 * 2 * 8192 * 32768  # relu2 up, down
    assert spec.moe is None
    assert estimate_params(spec).total / 1e9 == pytest.approx(56.0, abs=1.0)


# ------------------------------------------------------------------ gpt_oss


@pytest.mark.parametrize(
    ("name", "layers", "experts", "total_b", "active_b"),
    # OpenAI's sizes: 21B / 3.6B and 117B / 5.1B, embedding excluded from the active count
    [("gpt_oss_20b", 24, 32, 20.9, 3.61), ("gpt_oss_120b", 36, 128, 116.8, 5.13)],
)
def test_gpt_oss(name: str, layers: int, experts: int, total_b: float, active_b: float) -> None:
    cfg = _raw(name)
    _pin(
        cfg,
        model_type="gpt_oss",
        num_hidden_layers=layers,
        hidden_size=2880,
        intermediate_size=2880,
        vocab_size=201088,
        num_attention_heads=64,
        num_key_value_heads=8,
        head_dim=64,
        sliding_window=128,
        num_local_experts=experts,
        num_experts_per_tok=4,
    )
    assert "torch_dtype" not in cfg and "dtype" not in cfg  # bfloat16 by default
    assert cfg["layer_types"] == ["sliding_attention", "full_attention"] * (layers // 2)
    spec = _spec(name)
    full, swa = spec.full, spec.swa
    assert full is not None and swa is not None and spec.recurrent is None
    assert (full.layers, swa.layers, swa.window) == (layers // 2, layers // 2, 128)
    per_layer = 2 * 8 * 64 * BF16
    assert full.kv_bytes_per_token == per_layer * (layers // 2) == swa.kv_bytes_per_token
    assert spec.kv_bytes_per_token == per_layer * layers
    attn = 2880 * (64 * 64 + 2 * 8 * 64) + 64 * 64 * 2880
    assert full.projection_params(2880) == swa.projection_params(2880) == attn
    moe_layer = 2880 * experts + 4 * 3 * 2880 * 2880  # router, 4 experts (gate_up, down)
    assert spec.active_mlp_params_per_token == layers * moe_layer
    assert spec.moe is not None
    assert (spec.moe.experts, spec.moe.experts_per_token) == (experts, 4)
    p = estimate_params(spec)
    assert p.total / 1e9 == pytest.approx(total_b, abs=0.1)
    assert (p.active - p.embedding) / 1e9 == pytest.approx(active_b, abs=0.02)


def test_gpt_oss_explicit_dtype_wins() -> None:
    spec = ModelSpec.from_hf_config(CONFIGS / "gpt_oss_20b", dtype="float16")
    assert spec.full is not None and spec.full.dtype_bytes == 2
    spec = ModelSpec.from_hf_config(CONFIGS / "gpt_oss_20b" / "config.json", dtype="float32")
    assert spec.kv_bytes_per_token == 2 * 8 * 64 * 24 * FP32


# ------------------------------------------------------------------ gemma3


def test_gemma3_27b_it() -> None:
    cfg = _raw("gemma3")
    _pin(cfg, model_type="gemma3", torch_dtype="bfloat16")
    text = cfg["text_config"]
    _pin(
        text,
        num_hidden_layers=62,
        hidden_size=5376,
        intermediate_size=21504,
        num_attention_heads=32,
        num_key_value_heads=16,
        head_dim=128,
        sliding_window=1024,
    )
    # not in the file, Gemma3TextConfig defaults: vocab 262208, one full layer in 6
    assert "vocab_size" not in text and "sliding_window_pattern" not in text
    spec = _spec("gemma3")
    full, swa = spec.full, spec.swa
    assert full is not None and swa is not None
    assert (full.layers, swa.layers, swa.window) == (62 // 6, 62 - 62 // 6, 1024) == (10, 52, 1024)
    assert full.kv_bytes_per_token == 2 * 16 * 128 * 10 * BF16 == 81_920
    assert swa.kv_bytes_per_token == 2 * 16 * 128 * 52 * BF16 == 425_984
    assert spec.vocab_size == 262_208
    assert spec.active_mlp_params_per_token == 62 * 3 * 5376 * 21504
    assert spec.moe is None


CHECKED = (
    "qwen3_next",
    "qwen3_5",
    "qwen3_5_moe",
    "nemotron_h",
    "nemotron_h_56b",
    "gpt_oss_20b",
    "gpt_oss_120b",
    "gemma3",
)


# ------------------------------------------------------------------ named specs


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("qwen3_next", "qwen3-next-80b-a3b"),
        ("qwen3_5", "qwen3.5-27b"),
        ("nemotron_h", "nemotron-3-nano-30b-a3b"),
    ],
)
def test_config_and_named_spec_cost_the_same(config: str, named: str) -> None:
    from_file = ModelSpec.from_hf_config(CONFIGS / config, name=named)
    builtin = ModelSpec.named(named)
    assert from_file == builtin  # groups, bytes, active params, MoE shape
    a, b = CostModel(_spec(config), "h200"), CostModel(builtin, "h200")
    assert a.params == b.params and a.moe == b.moe
    assert a.prefill_time(0, 8192) == b.prefill_time(0, 8192)


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("qwen3_next", "qwen3-next-80b-a3b"),
        ("qwen3_5", "qwen3.5-27b"),
        ("nemotron_h", "nemotron-3-nano-30b-a3b"),
    ],
)
def test_named_spec_fields_are_the_published_ones(config: str, named: str) -> None:
    """Every field the built-in spec copies has the published file's value."""
    published, copied = _raw(config), dict(HF_CONFIGS[named])
    copied.pop("_name_or_path")
    text = copied.pop("text_config", None)
    assert {k: published.get(k) for k in copied} == copied
    if isinstance(text, dict):
        assert {k: published["text_config"].get(k) for k in text} == text
