"""Tiny random checkpoints of the supported hybrid architectures (``hycache init-model``).

Each architecture is built with its own transformers configuration class, instantiated with
``AutoModelForCausalLM.from_config`` from a seeded generator and written with
``save_pretrained`` (``config.json`` + ``model.safetensors``), so loading it goes through the
same path as a real checkpoint. A byte-level BPE tokenizer trained locally
(``hycache.engine.tokenizer``: ``tokenizer.json`` + ``tokenizer_config.json``) goes beside it,
so ``hycache serve`` can take text. Importing this module does not import torch; the builders do.

Layouts follow the published models in miniature: Qwen3-Next / Qwen3.5 / Kimi-Linear put full
attention on every 4th layer (3 linear : 1 full), NemotronH interleaves Mamba2, MLP and
attention layers, Bamba puts attention at index 2 of every 4, Gemma 3 has 3 sliding-window
layers per full one (window 32).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hycache.errors import ConfigError

#: Vocabulary of the tiny models (workload token ids are mapped ``% vocab``).
TINY_VOCAB = 1024
#: Smallest vocabulary that holds the tokenizer's special tokens and its 256 byte symbols.
MIN_TOKENIZER_VOCAB = 261
#: Sliding window of the tiny Gemma 3 (a multiple of every preset's page size).
TINY_WINDOW = 32


@dataclass(frozen=True)
class TinyShape:
    """Sizes of a tiny model derived from ``--layers`` and ``--hidden``."""

    layers: int
    hidden: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return 32 if self.hidden >= 256 else 16

    @property
    def heads(self) -> int:
        return max(2, self.hidden // (2 * self.head_dim))

    @property
    def kv_heads(self) -> int:
        return max(1, self.heads // 2)

    @property
    def inter(self) -> int:
        return 2 * self.hidden


def _every_fourth(layers: int, full_at: int, full: str, other: str) -> list[str]:
    """``full`` where ``i % 4 == full_at``; at least one of each kind when layers >= 2."""
    types = [full if i % 4 == full_at else other for i in range(layers)]
    if full not in types:
        types[-1] = full
    if other not in types and layers > 1:
        types[0] = other
    return types


def _common(s: TinyShape) -> dict[str, Any]:
    return {
        "vocab_size": s.vocab,
        "hidden_size": s.hidden,
        "intermediate_size": s.inter,
        "num_attention_heads": s.heads,
        "num_key_value_heads": s.kv_heads,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        # wider than the default 0.02: random logits get distinct top tokens, so greedy
        # continuations are meaningful and near-ties rare
        "initializer_range": 0.05,
        "max_position_embeddings": 8192,
    }


def _qwen_gdn(s: TinyShape, moe: bool) -> dict[str, Any]:
    cfg = {
        **_common(s),
        "num_hidden_layers": s.layers,
        "head_dim": s.head_dim,
        "linear_num_key_heads": max(1, s.heads // 2),
        "linear_num_value_heads": s.heads,
        "linear_key_head_dim": s.head_dim,
        "linear_value_head_dim": s.head_dim,
        "linear_conv_kernel_dim": 4,
        "layer_types": _every_fourth(s.layers, 3, "full_attention", "linear_attention"),
    }
    if moe:
        cfg |= {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": s.hidden // 2,
            "shared_expert_intermediate_size": s.hidden // 2,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
        }
    return cfg


def _kimi(s: TinyShape) -> dict[str, Any]:
    types = _every_fourth(s.layers, 3, "full_attention", "linear_attention")
    return {
        **_common(s),
        "num_hidden_layers": s.layers,
        "num_key_value_heads": s.heads,
        "kv_lora_rank": s.head_dim,
        "q_lora_rank": None,
        "qk_rope_head_dim": s.head_dim // 2,
        "qk_nope_head_dim": s.head_dim,
        "v_head_dim": s.head_dim,
        "moe_intermediate_size": s.hidden // 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "linear_head_dim": s.head_dim,
        "linear_num_heads": s.heads,
        "linear_conv_kernel_dim": 4,
        "layer_types": types,
        "mlp_layer_types": ["dense"] + ["sparse"] * (s.layers - 1),
    }


def _kimi_fixup(config: dict[str, Any]) -> None:
    """Published Kimi-Linear checkpoints describe KDA in ``linear_attn_config``; transformers
    reads it when present and hycache's spec parser needs it, so write it too."""
    types = config["layer_types"]
    config["linear_attn_config"] = {
        "kda_layers": [i + 1 for i, t in enumerate(types) if t == "linear_attention"],
        "full_attn_layers": [i + 1 for i, t in enumerate(types) if t == "full_attention"],
        "num_heads": config["linear_num_heads"],
        "head_dim": config["linear_head_dim"],
        "short_conv_kernel_size": config["linear_conv_kernel_dim"],
    }


def _nemotron_h(s: TinyShape) -> dict[str, Any]:
    pattern = ["linear_attention", "mlp", "full_attention", "linear_attention"]
    kinds = [pattern[i % 4] for i in range(s.layers)]
    if "full_attention" not in kinds:
        kinds[-1] = "full_attention"
    cfg = _common(s)
    del cfg["intermediate_size"]
    return {
        **cfg,
        "layers_block_type": kinds,
        "intermediate_size": s.inter,
        "head_dim": s.head_dim,
        "ssm_state_size": 16,
        "mamba_num_heads": max(1, s.hidden // 16),
        "mamba_head_dim": 16,
        "n_groups": 1,
        "conv_kernel": 4,
        "chunk_size": 32,
    }


def _bamba(s: TinyShape) -> dict[str, Any]:
    attn = [i for i in range(s.layers) if i % 4 == 2] or [s.layers - 1]
    return {
        **_common(s),
        "num_hidden_layers": s.layers,
        "attn_layer_indices": attn,
        "mamba_n_heads": max(1, s.hidden // 16),
        "mamba_d_head": 16,
        "mamba_n_groups": 1,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 32,
    }


def _gemma3(s: TinyShape) -> dict[str, Any]:
    return {
        **_common(s),
        "num_hidden_layers": s.layers,
        "head_dim": s.head_dim,
        "query_pre_attn_scalar": s.head_dim,
        "sliding_window": TINY_WINDOW,
        "layer_types": _every_fourth(s.layers, 3, "full_attention", "sliding_attention"),
    }


def _jamba(s: TinyShape) -> dict[str, Any]:
    return {
        **_common(s),
        "num_hidden_layers": s.layers,
        "attn_layer_period": 4,
        "attn_layer_offset": 2 if s.layers > 2 else s.layers - 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_dt_rank": 8,
    }


def _falcon_h1(s: TinyShape) -> dict[str, Any]:
    return {
        **_common(s),
        "num_hidden_layers": s.layers,
        "head_dim": s.head_dim,
        "mamba_d_ssm": s.hidden,
        "mamba_n_heads": max(1, s.hidden // 16),
        "mamba_d_head": 16,
        "mamba_n_groups": 1,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 1,
        "mamba_chunk_size": 32,
    }


@dataclass(frozen=True)
class Arch:
    """One supported architecture: its transformers ``model_type`` and tiny-config builder."""

    name: str
    model_type: str
    build: Callable[[TinyShape], dict[str, Any]]
    fixup: Callable[[dict[str, Any]], None] | None = None
    moe: bool = False
    min_layers: int = 2


ARCHS: Mapping[str, Arch] = {
    a.name: a
    for a in (
        Arch("qwen3_next", "qwen3_next", lambda s: _qwen_gdn(s, True), moe=True),
        Arch("qwen3_5", "qwen3_5_text", lambda s: _qwen_gdn(s, False)),
        Arch("kimi_linear", "kimi_linear", _kimi, _kimi_fixup, moe=True),
        Arch("nemotron_h", "nemotron_h", _nemotron_h, min_layers=3),
        Arch("bamba", "bamba", _bamba),
        Arch("gemma3", "gemma3_text", _gemma3),
        Arch("jamba", "jamba", _jamba, moe=True),
        Arch("falcon_h1", "falcon_h1", _falcon_h1, min_layers=1),
    )
}
#: The architectures ``hycache verify`` runs when asked for ``all``. falcon_h1 (parallel
#: hybrid) passes too. jamba does not, through no fault of the cache: transformers' Mamba1
#: mixer ignores the cached SSM state for multi-token inputs, so any chunked prefill (even
#: without hycache) differs from a one-shot prefill by ~1e-3; verify reports exactly that.
VERIFIED_ARCHS: tuple[str, ...] = (
    "qwen3_next",
    "qwen3_5",
    "kimi_linear",
    "nemotron_h",
    "bamba",
    "gemma3",
)


def get_arch(name: str) -> Arch:
    """The architecture called ``name``; ConfigError listing the supported ones otherwise."""
    arch = ARCHS.get(name)
    if arch is None:
        raise ConfigError(
            f"unsupported architecture {name!r} (supported: {', '.join(sorted(ARCHS))})"
        )
    return arch


def tiny_config_dict(
    arch: str, *, layers: int = 4, hidden: int = 64, vocab: int = TINY_VOCAB
) -> dict[str, Any]:
    """The keyword arguments of the tiny configuration of ``arch`` (no torch needed)."""
    spec = get_arch(arch)
    if layers < spec.min_layers:
        raise ConfigError(f"{arch} needs --layers >= {spec.min_layers}, got {layers}")
    if hidden < 32 or hidden % 16:
        raise ConfigError(f"--hidden must be a multiple of 16 and >= 32, got {hidden}")
    if vocab < 16:
        raise ConfigError(f"vocab must be >= 16, got {vocab}")
    return spec.build(TinyShape(layers, hidden, vocab))


def init_model(
    arch: str,
    out: str | os.PathLike[str],
    *,
    layers: int = 4,
    hidden: int = 64,
    seed: int = 0,
    vocab: int = TINY_VOCAB,
    tokenizer: bool = True,
) -> Path:
    """Write a tiny random ``arch`` checkpoint (config.json + model.safetensors, and with
    ``tokenizer`` a trained tokenizer when ``vocab`` can hold one) to ``out``. Deterministic
    for a given seed. Returns the directory."""
    kwargs = tiny_config_dict(arch, layers=layers, hidden=hidden, vocab=vocab)
    spec = get_arch(arch)
    from hycache.engine.model import require_engine

    require_engine()
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    target = Path(out)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target}: exists and is not a directory")
    target.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.for_model(spec.model_type, **kwargs)
    config.dtype = "float32"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        auto: Any = AutoModelForCausalLM
        model = auto.from_config(config, dtype=torch.float32)
    model.save_pretrained(target, safe_serialization=True)
    config_path = target / "config.json"
    saved = json.loads(config_path.read_text(encoding="utf-8"))
    if spec.fixup is not None:
        spec.fixup(saved)
    saved["_name_or_path"] = f"hycache-tiny-{arch}"
    config_path.write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    if tokenizer and vocab >= MIN_TOKENIZER_VOCAB:
        from hycache.engine.tokenizer import save_tokenizer

        save_tokenizer(target, vocab, max_length=int(kwargs["max_position_embeddings"]))
    return target
