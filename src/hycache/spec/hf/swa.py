"""Parsers of the sliding-window + full attention models for ``hycache.spec.hf.parse``: gemma3 /
gemma3_text and gpt_oss.

Each parser takes a ``_Cfg`` and the resolved ``_Dtypes`` and returns ``_Parsed`` (layer
groups, per-layer kinds, active MLP parameters per token, MoE shape); a bad or missing field
raises SpecError.
"""

from __future__ import annotations

from dataclasses import replace

from hycache.spec.fields import LayerKind
from hycache.spec.groups import LayerGroup
from hycache.spec.hf.blocks import _attention, _gated_mlp, _moe, _swa_of
from hycache.spec.hf.config import _Cfg, _Dtypes, _Parsed
from hycache.spec.moe import MoEShape


def _swa_model(
    cfg: _Cfg, dt: _Dtypes, every: int, mlp_per_layer: int, moe: MoEShape | None = None
) -> _Parsed:
    """Sliding window + full attention (gemma3, gpt_oss); ``every``-th layer is full."""
    n = cfg.get_int("num_hidden_layers")
    if cfg.has("layer_types"):
        types = cfg.str_list("layer_types", ("sliding_attention", "full_attention"), n)
    else:
        types = [
            "full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)
        ]
    n_full = types.count("full_attention")
    shape = _attention(cfg, dt, n)  # one attention shape for both kinds
    groups: list[LayerGroup] = [replace(shape, layers=n_full)] if n_full else []
    if n - n_full:
        groups.append(_swa_of(shape, n - n_full, cfg.get_int("sliding_window")))
    kinds: tuple[LayerKind, ...] = tuple("full" if t == "full_attention" else "swa" for t in types)
    return _Parsed(tuple(groups), kinds, n * mlp_per_layer, moe)


def _gemma3(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """gemma3 / gemma3_text: ``layer_types`` or ``sliding_window_pattern`` (default 6)."""
    every = cfg.get_int("sliding_window_pattern", default=6)
    return _swa_model(
        cfg, dt, every, _gated_mlp(cfg.get_int("hidden_size"), cfg.get_int("intermediate_size"))
    )


def _gpt_oss(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """gpt_oss: alternating sliding/full attention (``layer_types``), MoE in every layer."""
    hidden = cfg.get_int("hidden_size")
    moe = _moe(
        hidden,
        cfg.get_int("intermediate_size"),
        cfg.get_int(("num_experts_per_tok", "experts_per_token")),
        cfg.get_int("num_local_experts"),
        0,
        gated=True,
    )
    return _swa_model(cfg, dt, 2, moe.active, moe.shape(cfg.get_int("num_hidden_layers")))
