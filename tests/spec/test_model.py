"""Tests of hycache.spec.model: layer groups, bytes, FLOPs and the built-in named specs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hycache.errors import ConfigError, SpecError
from hycache.spec.model import (
    NAMED_SPECS,
    FullAttentionGroup,
    ModelSpec,
    RecurrentGroup,
    SlidingWindowGroup,
    canonical_dtype,
    dtype_bytes,
    load_spec,
)
from hycache.spec.named import HF_CONFIGS

MIB = 2**20
NAMES = (
    "qwen3-next-80b-a3b",
    "qwen3.5-27b",
    "kimi-linear-48b-a3b",
    "nemotron-3-nano-30b-a3b",
    "jamba-1.5-mini",
    "marconi-7b",
)


def _full(**kw: int) -> FullAttentionGroup:
    args = {"layers": 2, "q_heads": 8, "kv_heads": 2, "head_dim": 16, "dtype_bytes": 2} | kw
    return FullAttentionGroup(**args)


def _swa(window: int = 4, **kw: int) -> SlidingWindowGroup:
    args = {"layers": 2, "q_heads": 8, "kv_heads": 2, "head_dim": 16, "dtype_bytes": 2} | kw
    return SlidingWindowGroup(window=window, **args)


def _rec(**kw: object) -> RecurrentGroup:
    args: dict[str, object] = {
        "layers": 3,
        "mixer": "gdn",
        "recurrent_state_bytes": 4096,
        "conv_state_bytes": 512,
        "state_dtype": "float32",
        "conv_dtype": "bf16",
        "proj_params_per_layer": 1000,
    } | kw
    return RecurrentGroup(**args)  # type: ignore[arg-type]


def _spec(*groups: FullAttentionGroup | SlidingWindowGroup | RecurrentGroup) -> ModelSpec:
    return ModelSpec(
        name="tiny",
        groups=groups,
        hidden_size=64,
        vocab_size=100,
        active_mlp_params_per_token=5000,
        num_layers=8,
    )


# ------------------------------------------------------------------ pinned facts


def test_qwen35_27b_gdn_layer_is_783_tokens_of_kv() -> None:
    """mamba_ssm_dtype float32 sizes the GDN state; the conv window stays in bf16 (vLLM sets
    only mamba_ssm_cache_dtype from the config, the conv state follows the model dtype)."""
    spec = ModelSpec.named("qwen3.5-27b")
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert (rec.mixer, rec.layers, full.layers, spec.num_layers) == ("gdn", 48, 16, 64)
    assert (rec.state_dtype, rec.conv_dtype) == ("float32", "bfloat16")
    assert rec.recurrent_state_bytes == 48 * 128 * 128 * 4 == 3_145_728
    assert rec.conv_state_bytes == 10240 * 3 * 2 == 61_440
    assert rec.state_bytes_per_layer == 3_207_168
    assert round(rec.state_bytes_per_layer / MIB, 3) == 3.059
    assert full.kv_bytes_per_token_per_layer == 4 * 256 * 2 * 2 == 4096
    assert (full.q_heads, full.kv_heads, full.head_dim) == (24, 4, 256)
    assert spec.state_to_kv_tokens() == 783
    assert (spec.hidden_size, spec.vocab_size) == (5120, 248320)
    assert spec.active_mlp_params_per_token == 64 * 3 * 5120 * 17408


def test_qwen3_next_state_is_37_7_mib_per_sequence() -> None:
    spec = ModelSpec.named("qwen3-next-80b-a3b")
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    assert (rec.layers, full.layers) == (36, 12)
    assert rec.state_dtype == rec.conv_dtype == "bfloat16"
    expected = 36 * (32 * 128 * 128 * 2 + (2 * 16 * 128 + 32 * 128) * 3 * 2)
    assert spec.state_bytes == rec.state_bytes == expected
    assert round(spec.state_bytes / MIB, 1) == 37.7
    # DESIGN.md: 37.7 MiB = the KV of 1,608 tokens over the 12 attention layers.
    assert spec.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2
    assert spec.state_bytes // spec.kv_bytes_per_token == 1608
    assert (spec.hidden_size, spec.vocab_size, spec.num_layers) == (2048, 151936, 48)


def test_marconi_7b_accounting() -> None:
    spec = ModelSpec.named("marconi-7b")
    rec, full = spec.recurrent, spec.full
    assert rec is not None and full is not None
    d, n = 4096, 128
    assert (rec.mixer, rec.layers, full.layers, spec.num_layers) == ("mamba2", 24, 4, 56)
    assert rec.state_bytes_per_layer == d * n * 2 + (2 * d + 2 * n) * 4 * 2 == 1_116_160
    assert full.kv_bytes_per_token_per_layer == 2 * d * 2 == 16_384
    assert full.q_heads == full.kv_heads  # no GQA
    assert spec.active_mlp_params_per_token == 28 * 8 * d * d
    assert spec.state_to_kv_tokens() == 1_116_160 // 16_384


def test_other_named_specs_match_published_layouts() -> None:
    kimi = ModelSpec.named("kimi-linear-48b-a3b")
    assert kimi.recurrent is not None and kimi.full is not None
    assert (kimi.recurrent.mixer, kimi.recurrent.layers, kimi.full.layers) == ("kda", 20, 7)
    assert kimi.full.kv_bytes_per_token_per_layer == (512 + 64) * 2  # MLA latent
    assert kimi.recurrent.recurrent_state_bytes == 32 * 128 * 128 * 4  # float32 (vLLM)
    assert kimi.recurrent.conv_state_bytes == 3 * 32 * 128 * 3 * 2
    nemo = ModelSpec.named("nemotron-3-nano-30b-a3b")
    assert nemo.recurrent is not None and nemo.full is not None
    assert (nemo.num_layers, nemo.recurrent.layers, nemo.full.layers) == (52, 23, 6)
    assert nemo.recurrent.state_dtype == "float32"
    assert nemo.recurrent.recurrent_state_bytes == 64 * 64 * 128 * 4
    assert nemo.recurrent.conv_state_bytes == (64 * 64 + 2 * 8 * 128) * 3 * 2
    assert nemo.full.kv_bytes_per_token_per_layer == 2 * 2 * 128 * 2
    jamba = ModelSpec.named("jamba-1.5-mini")
    assert jamba.recurrent is not None and jamba.full is not None
    assert (jamba.recurrent.mixer, jamba.recurrent.layers, jamba.full.layers) == ("mamba", 28, 4)
    assert jamba.recurrent.recurrent_state_bytes == 8192 * 16 * 2
    assert jamba.recurrent.conv_state_bytes == 8192 * 3 * 2


def test_kernel_chunk_is_where_prefill_kernels_keep_intermediate_states() -> None:
    """FLA's GDN / KDA kernels: 64 tokens; Mamba2's SSD scan: the config's chunk_size;
    Mamba1's selective scan keeps none (states only at chunk ends)."""
    chunks = {
        name: (spec.recurrent.kernel_chunk if spec.recurrent else None)
        for name in ("qwen3-next-80b-a3b", "kimi-linear-48b-a3b", "nemotron-3-nano-30b-a3b")
        for spec in [ModelSpec.named(name)]
    }
    assert chunks == {
        "qwen3-next-80b-a3b": 64,
        "kimi-linear-48b-a3b": 64,
        "nemotron-3-nano-30b-a3b": 128,
    }
    jamba = ModelSpec.named("jamba-1.5-mini").recurrent
    assert jamba is not None and jamba.kernel_chunk is None
    with pytest.raises(SpecError, match="kernel_chunk"):
        _rec(kernel_chunk=0)


def test_named_specs_cover_the_brief_and_are_cached() -> None:
    assert set(NAMED_SPECS) == set(NAMES)
    assert len(NAMED_SPECS) == len(NAMES)
    for name in NAMES:
        spec = ModelSpec.named(name)
        assert spec.name == name
        assert spec is NAMED_SPECS[name]


def test_named_unknown_lists_known_names() -> None:
    with pytest.raises(SpecError) as info:
        ModelSpec.named("llama-9000")
    message = str(info.value)
    assert "llama-9000" in message
    assert all(name in message for name in NAMES)
    assert info.value.field == "name"
    assert isinstance(info.value, ConfigError)


def test_named_hf_specs_equal_from_hf_config_of_their_config_json(tmp_path: Path) -> None:
    for name, cfg in HF_CONFIGS.items():
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(cfg))
        assert ModelSpec.from_hf_config(path.parent, name=name) == NAMED_SPECS[name]


# ------------------------------------------------------------------ load_spec


def test_load_spec_by_name_and_by_path(tmp_path: Path) -> None:
    assert load_spec("jamba-1.5-mini") is NAMED_SPECS["jamba-1.5-mini"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(HF_CONFIGS["qwen3.5-27b"]))
    spec = load_spec(path)
    assert spec.name == "Qwen/Qwen3.5-27B"
    assert spec.state_to_kv_tokens() == 783
    assert load_spec(str(tmp_path)) == spec


def test_load_spec_unknown_name_or_missing_path() -> None:
    with pytest.raises(SpecError) as info:
        load_spec("/no/such/dir/config.json")
    assert "/no/such/dir/config.json" in str(info.value)
    assert "marconi-7b" in str(info.value)


# ------------------------------------------------------------------ groups


def test_group_kinds_and_bytes() -> None:
    full, swa, rec = _full(), _swa(window=4), _rec()
    assert (full.kind, swa.kind, rec.kind) == ("full", "swa", "recurrent")
    assert full.kv_bytes_per_token_per_layer == 2 * 2 * 16 * 2
    assert full.kv_bytes_per_token == 2 * full.kv_bytes_per_token_per_layer
    assert swa.kv_bytes_per_token == full.kv_bytes_per_token
    assert rec.state_bytes_per_layer == 4096 + 512
    assert rec.state_bytes == 3 * (4096 + 512)
    assert rec.conv_dtype == "bfloat16"  # canonicalised
    mla = _full(latent_dim=576)
    assert mla.kv_bytes_per_token_per_layer == 576 * 2


@pytest.mark.parametrize(
    ("factory", "field"),
    [
        (lambda: _full(layers=0), "layers"),
        (lambda: _full(kv_heads=-1), "kv_heads"),
        (lambda: _swa(window=0), "window"),
        (lambda: _full(latent_dim=0), "latent_dim"),
        (lambda: _rec(recurrent_state_bytes=0), "recurrent_state_bytes"),
        (lambda: _rec(mixer="lstm"), "mixer"),
        (lambda: _rec(state_dtype="int3"), "state_dtype"),
    ],
)
def test_group_validation_names_the_field(factory: object, field: str) -> None:
    with pytest.raises(SpecError) as info:
        factory()  # type: ignore[operator]
    assert info.value.field == field
    assert field in str(info.value)


def test_recurrent_bytes_must_be_whole_dtype_elements() -> None:
    with pytest.raises(SpecError):
        _rec(recurrent_state_bytes=4098)


def test_groups_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _full().layers = 3  # type: ignore[misc]


def test_dtypes() -> None:
    assert canonical_dtype("torch.bfloat16") == "bfloat16"
    assert canonical_dtype("BF16") == "bfloat16"
    assert dtype_bytes("fp32") == 4
    assert dtype_bytes("half") == 2
    with pytest.raises(SpecError) as info:
        dtype_bytes("int4", field="torch_dtype")
    assert info.value.field == "torch_dtype"


# ------------------------------------------------------------------ ModelSpec


def test_model_spec_accessors() -> None:
    full, swa, rec = _full(), _swa(), _rec()
    spec = _spec(rec, swa, full)
    assert spec.full is full and spec.swa is swa and spec.recurrent is rec
    assert spec.attention_groups == (full, swa)
    assert spec.kv_bytes_per_token == full.kv_bytes_per_token + swa.kv_bytes_per_token
    assert spec.state_bytes == rec.state_bytes
    assert spec.state_to_kv_tokens() == rec.state_bytes_per_layer // 128
    attn_only = _spec(full)
    assert attn_only.recurrent is None and attn_only.swa is None
    assert attn_only.state_bytes == 0
    assert attn_only.state_to_kv_tokens() is None
    assert _spec(rec).state_to_kv_tokens() is None
    assert _spec(rec, swa).state_to_kv_tokens() == rec.state_bytes_per_layer // 128


def test_model_spec_groups_become_a_tuple() -> None:
    spec = ModelSpec(
        name="x",
        groups=[_full()],  # type: ignore[arg-type]
        hidden_size=64,
        vocab_size=10,
        active_mlp_params_per_token=0,
        num_layers=2,
    )
    assert spec.groups == (_full(),)


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"groups": ()}, "groups"),
        ({"groups": (_full(), _full())}, "groups"),
        ({"groups": (_full(layers=9),)}, "groups"),
        ({"hidden_size": 0}, "hidden_size"),
        ({"vocab_size": -2}, "vocab_size"),
        ({"num_layers": 0}, "num_layers"),
        ({"active_mlp_params_per_token": -1}, "active_mlp_params_per_token"),
        ({"name": ""}, "name"),
    ],
)
def test_model_spec_validation(kw: dict[str, object], field: str) -> None:
    args: dict[str, object] = {
        "name": "x",
        "groups": (_full(),),
        "hidden_size": 64,
        "vocab_size": 10,
        "active_mlp_params_per_token": 0,
        "num_layers": 8,
    } | kw
    with pytest.raises(SpecError) as info:
        ModelSpec(**args)  # type: ignore[arg-type]
    assert info.value.field == field


# ------------------------------------------------------------------ FLOPs


def test_full_attention_flops_closed_form() -> None:
    g = _full(layers=1, q_heads=4, kv_heads=4, head_dim=8)
    assert g.attended_keys(0, 3) == 1 + 2 + 3
    assert g.attended_keys(5, 2) == 6 + 7
    hidden = 32
    proj = hidden * (2 * 4 + 2 * 4) * 8
    assert g.projection_params(hidden) == proj
    assert g.prefill_flops(5, 2, hidden) == 2 * proj * 2 + 4 * 4 * 8 * 13
    assert _full(proj_params_per_layer=7).projection_params(hidden) == 7


def test_sliding_window_flops_closed_form() -> None:
    g = _swa(window=4, layers=1)
    assert g.attended_keys(0, 6) == 1 + 2 + 3 + 4 + 4 + 4
    assert g.attended_keys(2, 3) == 3 + 4 + 4
    assert g.attended_keys(10, 2) == 8
    assert g.attended_keys(3, 0) == 0


@given(
    cached=st.integers(0, 300),
    new=st.integers(0, 300),
    window=st.integers(1, 200),
)
def test_attended_keys_match_the_per_token_sum(cached: int, new: int, window: int) -> None:
    positions = range(cached, cached + new)
    assert _full().attended_keys(cached, new) == sum(i + 1 for i in positions)
    expected = sum(min(i + 1, window) for i in positions)
    assert _swa(window=window).attended_keys(cached, new) == expected


@given(a=st.integers(0, 5000), b=st.integers(0, 5000), name=st.sampled_from(NAMES))
def test_prefill_flops_are_additive_and_monotone(a: int, b: int, name: str) -> None:
    spec = NAMED_SPECS[name]
    whole = spec.prefill_flops(0, a + b)
    assert math.isclose(spec.prefill_flops(0, a) + spec.prefill_flops(a, b), whole, rel_tol=1e-12)
    assert spec.prefill_flops(a, b + 1) > spec.prefill_flops(a, b)
    assert spec.prefill_flops(a + 1, b) >= spec.prefill_flops(a, b)


def test_recurrent_flops_are_linear_and_ignore_cached() -> None:
    g = _rec()
    per_token = 2 * 1000 + 6 * (4096 // 4) + 2 * (512 // 2)
    assert g.prefill_flops(0, 10, 64) == 3 * 10 * per_token
    assert g.prefill_flops(1000, 10, 64) == g.prefill_flops(0, 10, 64)


def test_model_prefill_flops_sum_groups_and_mlp() -> None:
    full, rec = _full(), _rec()
    spec = _spec(full, rec)
    expected = full.prefill_flops(7, 9, 64) + rec.prefill_flops(7, 9, 64) + 2 * 5000 * 9
    assert spec.prefill_flops(7, 9) == expected
    assert spec.prefill_flops(7, 0) == 0.0
    with pytest.raises(ValueError):
        spec.prefill_flops(-1, 3)
    with pytest.raises(ValueError):
        full.prefill_flops(0, -3, 64)


def test_qwen3_next_10k_prefill_magnitude() -> None:
    spec = NAMED_SPECS["qwen3-next-80b-a3b"]
    flops = spec.prefill_flops(0, 10_000)
    linear = 2 * 3e9 * 1e4
    assert 0.8 * linear < flops < 2 * linear
    full = spec.full
    assert full is not None
    attention = 12 * 4 * 16 * 256 * (10_000 * 10_001 // 2)
    assert flops > attention
    # a cache hit of p tokens saves exactly prefill_flops(0, p)
    saved = spec.prefill_flops(0, 10_000) - spec.prefill_flops(4_000, 6_000)
    assert math.isclose(saved, spec.prefill_flops(0, 4_000))
