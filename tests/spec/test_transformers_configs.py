"""Differential test: what hycache derives from a config.json against what transformers 5.24
builds from the same file.

Every committed config (data/configs/) is loaded with transformers' own configuration class
(``AutoConfig.for_model``, offline) and each of its decoder layers is built on the meta device
(no memory, no weights) with the modeling code's layer class. Per layer, the kind (full /
sliding-window attention, recurrent state, both, or MLP only) must match the layer types
transformers reads from the config, and hycache's groups must match the built modules: KV
heads, head dims, MLA latent, sliding window, recurrent state and conv window sizes (from the
mixers' own dimensions and conv kernels), projection weights and the MLP / MoE weights one token
multiplies (routed experts: top-k of E). Biases, norms, conv taps and per-head vectors are left
out on both sides (hycache's parameter counts ignore them).

The four supported families without a committed config (kimi_linear, bamba, jamba, falcon_h1:
no published config.json was found in the public sources searched, see data/configs/README.md)
are checked on transformers' default configuration of the type and, for Kimi Linear and Jamba,
on the config fields the built-in specs copy.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from transformers import AutoConfig

from hycache.spec.fields import LayerKind, SpecFields
from hycache.spec.groups import (
    DTYPE_BYTES,
    FullAttentionGroup,
    RecurrentGroup,
    SlidingWindowGroup,
)
from hycache.spec.hf.parse import parse_hf_config
from hycache.spec.named import HF_CONFIGS

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"

#: the decoder-layer class of each model type in transformers 5.24
LAYER_CLASSES = {
    "qwen3_next": "qwen3_next.modeling_qwen3_next.Qwen3NextDecoderLayer",
    "qwen3_5": "qwen3_5.modeling_qwen3_5.Qwen3_5DecoderLayer",
    "qwen3_5_moe": "qwen3_5_moe.modeling_qwen3_5_moe.Qwen3_5MoeDecoderLayer",
    "kimi_linear": "kimi_linear.modeling_kimi_linear.KimiLinearDecoderLayer",
    "nemotron_h": "nemotron_h.modeling_nemotron_h.NemotronHBlock",
    "bamba": "bamba.modeling_bamba.BambaDecoderLayer",
    "jamba": "jamba.modeling_jamba.ALL_DECODER_LAYER_TYPES",
    "falcon_h1": "falcon_h1.modeling_falcon_h1.FalconH1DecoderLayer",
    "gemma3": "gemma3.modeling_gemma3.Gemma3DecoderLayer",
    "gpt_oss": "gpt_oss.modeling_gpt_oss.GptOssDecoderLayer",
}

#: the committed configs and their model types; every supported family with a published
#: config.json found is here (the others are checked on transformers' defaults below)
COMMITTED = {
    "qwen3_next": "qwen3_next",
    "qwen3_5": "qwen3_5",
    "qwen3_5_moe": "qwen3_5_moe",
    "nemotron_h": "nemotron_h",
    "nemotron_h_56b": "nemotron_h",
    "gpt_oss_20b": "gpt_oss",
    "gpt_oss_120b": "gpt_oss",
    "gemma3": "gemma3",
}

#: transformers' names of the layer types -> hycache's layer kinds
TF_KINDS: dict[str, LayerKind] = {
    "full_attention": "full",
    "attention": "full",
    "sliding_attention": "swa",
    "linear_attention": "recurrent",
    "mamba": "recurrent",
    "mlp": "mlp",
    "moe": "mlp",
}


def test_every_model_type_is_checked() -> None:
    """All ten supported families have a transformers 5.24 configuration and layer class, and
    each is checked here: on a committed config, or on transformers' defaults."""
    from hycache.spec.hf.parse import SUPPORTED_MODEL_TYPES

    checked = set(COMMITTED.values()) | set(DEFAULT_TYPES)
    top_level = {t for t in SUPPORTED_MODEL_TYPES if not t.endswith("_text")}
    assert checked == top_level == set(LAYER_CLASSES)
    assert sorted(set(COMMITTED.values())) == [
        "gemma3",
        "gpt_oss",
        "nemotron_h",
        "qwen3_5",
        "qwen3_5_moe",
        "qwen3_next",
    ]


# ------------------------------------------------------------------ what transformers builds


def _tf_config(raw: dict[str, Any]) -> Any:
    """transformers' configuration of ``raw`` (its text config for multimodal models)."""
    fields = {k: v for k, v in raw.items() if k != "model_type"}
    return AutoConfig.for_model(raw["model_type"], **fields).get_text_config()


def _tf_kinds(model_type: str, cfg: Any) -> list[LayerKind]:
    """The layer kinds transformers reads from the config."""
    if model_type == "falcon_h1":  # every decoder layer has attention and a Mamba2 mixer
        return ["full+recurrent"] * cfg.num_hidden_layers
    types = getattr(cfg, "layers_block_type", None) or cfg.layer_types
    return [TF_KINDS[t] for t in types]


def _layer(model_type: str, cfg: Any, index: int) -> nn.Module:
    module, name = LAYER_CLASSES[model_type].rsplit(".", 1)
    found = getattr(importlib.import_module(f"transformers.models.{module}"), name)
    with torch.device("meta"):
        if model_type == "jamba":
            layer: nn.Module = found[cfg.layers_block_type[index]](cfg, layer_idx=index)
        elif model_type == "bamba":
            layer = found(cfg, layer_idx=index, layer_type=cfg.layers_block_type[index])
        else:
            layer = found(cfg, index)
    return layer


@dataclass
class Built:
    """What one built decoder layer holds, in hycache's terms."""

    attention: nn.Module | None = None
    recurrent: nn.Module | None = None
    mlp: nn.Module | None = None


def _parts(layer: nn.Module) -> Built:
    built = Built()
    for name in ("self_attn", "linear_attn", "mixer", "mamba", "mlp", "feed_forward"):
        module = getattr(layer, name, None)
        if module is None:
            continue
        cls = type(module).__name__
        if "DeltaAttention" in cls or "Mixer" in cls or "GatedDeltaNet" in cls:
            built.recurrent = module
        elif cls.endswith("Attention"):
            built.attention = module
        else:
            built.mlp = module
    return built


def _weights(module: nn.Module) -> Iterator[tuple[str, nn.Parameter]]:
    """Weight matrices: no biases, norms, conv taps or per-head vectors."""
    for name, p in module.named_parameters():
        if name.endswith(("bias", "A_log")) or "norm" in name or "conv" in name or p.dim() < 2:
            continue
        yield name, p


def _proj_params(module: nn.Module) -> int:
    return sum(p.numel() for _, p in _weights(module))


def _mlp_active(module: nn.Module, top_k: int) -> int:
    """Weights one token multiplies: everything but the routed experts, plus top-k of them."""
    dense, experts, count = 0, 0, 0
    for name, p in _weights(module):
        if name.startswith("experts."):
            experts += p.numel()
            count = p.shape[0]
        else:
            dense += p.numel()
    return dense + (experts // count * top_k if count else 0)


def _state_elements(mixer: nn.Module) -> tuple[int, int]:
    """(recurrent-state elements, conv-window elements) of one mixer, from its own dims."""
    m: Any = mixer
    if hasattr(m, "num_v_heads"):  # Gated DeltaNet
        state = m.num_v_heads * m.head_k_dim * m.head_v_dim
    elif hasattr(m, "ssm_state_size") and hasattr(m, "num_heads"):  # Mamba2
        state = m.num_heads * m.head_dim * m.ssm_state_size
    elif hasattr(m, "ssm_state_size"):  # Mamba1
        state = m.intermediate_size * m.ssm_state_size
    else:  # Kimi Delta Attention
        state = m.num_heads * m.head_dim * m.head_dim
    conv = sum(
        c.weight.shape[0] * (c.kernel_size[0] - 1)
        for c in mixer.modules()
        if isinstance(c, nn.Conv1d)
    )
    return state, conv


# ------------------------------------------------------------------ the comparison


def _check(fields: SpecFields, model_type: str, cfg: Any) -> None:
    kinds = _tf_kinds(model_type, cfg)
    assert list(fields.layer_kinds) == kinds
    assert fields.num_layers == len(kinds)
    full = next((g for g in fields.groups if isinstance(g, FullAttentionGroup)), None)
    swa = next((g for g in fields.groups if isinstance(g, SlidingWindowGroup)), None)
    rec = next((g for g in fields.groups if isinstance(g, RecurrentGroup)), None)
    attn_kinds = {"full": full, "swa": swa, "full+recurrent": full}
    assert (full.layers if full else 0) == sum(k in ("full", "full+recurrent") for k in kinds)
    assert (swa.layers if swa else 0) == kinds.count("swa")
    assert (rec.layers if rec else 0) == sum(k in ("recurrent", "full+recurrent") for k in kinds)
    assert fields.hidden_size == cfg.hidden_size and fields.vocab_size == cfg.vocab_size
    top_k = getattr(cfg, "num_experts_per_tok", None) or 1
    mlp, routed, experts = 0, 0, set()
    for i, kind in enumerate(kinds):
        built = _parts(_layer(model_type, cfg, i))
        group = attn_kinds.get(kind)
        assert (built.attention is not None) == (group is not None), (i, kind)
        if built.attention is not None and group is not None:
            a: Any = built.attention
            assert group.projection_params(cfg.hidden_size) == _proj_params(a), i
            assert group.q_heads == cfg.num_attention_heads
            if group.latent_dim is not None:  # MLA caches one latent per token
                assert group.latent_dim == a.kv_lora_rank + a.qk_rope_head_dim
                assert group.head_dim == a.qk_head_dim
            else:
                assert group.kv_heads == cfg.num_key_value_heads
                assert group.head_dim == a.head_dim
            if isinstance(group, SlidingWindowGroup):
                assert group.window == a.sliding_window == cfg.sliding_window
            else:
                assert getattr(a, "sliding_window", None) is None
        assert (built.recurrent is not None) == (kind in ("recurrent", "full+recurrent")), i
        if built.recurrent is not None and rec is not None:
            state, conv = _state_elements(built.recurrent)
            assert rec.recurrent_state_bytes == state * DTYPE_BYTES[rec.state_dtype], i
            assert rec.conv_state_bytes == conv * DTYPE_BYTES[rec.conv_dtype], i
            assert rec.proj_params_per_layer == _proj_params(built.recurrent), i
        # NemotronH's mixer layers have no MLP; its MLP / MoE layers are layers of their own
        assert (built.mlp is not None) == (kind == "mlp" or model_type != "nemotron_h"), i
        if built.mlp is None:
            continue
        mlp += _mlp_active(built.mlp, top_k)
        for name, p in _weights(built.mlp):
            if name.startswith("experts."):
                experts.add(p.shape[0])
                routed += p.numel() // p.shape[0] * top_k
    assert fields.active_mlp_params_per_token == mlp
    if fields.moe is None:
        assert routed == 0
    else:
        assert experts == {fields.moe.experts}
        assert fields.moe.experts_per_token == top_k
        assert fields.moe.routed_params_per_token == routed


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_committed_config_matches_transformers(name: str) -> None:
    raw = json.loads((CONFIGS / name / "config.json").read_text())
    assert raw["model_type"] == COMMITTED[name]
    cfg = _tf_config(raw)
    _check(parse_hf_config(raw), raw["model_type"], cfg)


def test_model_dtypes_match_transformers() -> None:
    """The model dtype hycache reads is the one transformers' config holds; gpt-oss has none
    (transformers then takes the checkpoint's bfloat16 tensors, hycache's default)."""
    for name, model_type in COMMITTED.items():
        raw = json.loads((CONFIGS / name / "config.json").read_text())
        fields = {k: v for k, v in raw.items() if k != "model_type"}
        top = AutoConfig.for_model(model_type, **fields)
        dtypes = {d for d in (top.dtype, top.get_text_config().dtype) if d is not None}
        full = next(g for g in parse_hf_config(raw).groups if not isinstance(g, RecurrentGroup))
        if model_type == "gpt_oss":
            assert dtypes == set() and full.dtype_bytes == 2
        else:
            assert dtypes == {torch.bfloat16} and full.dtype_bytes == 2


# ------------------------------------------------------------------ families without a config

#: model types checked on transformers' default configuration (no committed config.json)
DEFAULT_TYPES = ("kimi_linear", "bamba", "jamba", "falcon_h1")


@pytest.mark.parametrize("model_type", DEFAULT_TYPES)
def test_transformers_default_config_matches(model_type: str) -> None:
    cfg = AutoConfig.for_model(model_type)
    raw = cfg.to_dict()
    if model_type == "bamba":  # the default has no attention layer; use Bamba-9B's indices
        cfg = AutoConfig.for_model(model_type, attn_layer_indices=[9, 18, 27])
        raw = cfg.to_dict()
    _check(parse_hf_config(raw, dtype="bfloat16"), model_type, cfg)


@pytest.mark.parametrize("name", ["kimi-linear-48b-a3b", "jamba-1.5-mini"])
def test_builtin_spec_fields_match_transformers(name: str) -> None:
    raw = dict(HF_CONFIGS[name])
    cfg = _tf_config(raw)
    _check(parse_hf_config(raw), str(raw["model_type"]), cfg)
