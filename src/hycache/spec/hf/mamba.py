"""Parsers of the Mamba hybrids for ``hycache.spec.hf.parse``: nemotron_h, bamba and falcon_h1
(Mamba2) and jamba (Mamba1).

Each parser takes a ``_Cfg`` and the resolved ``_Dtypes`` and returns ``_Parsed`` (layer
groups, per-layer kinds, active MLP parameters per token, MoE shape); a bad or missing field
raises SpecError.
"""

from __future__ import annotations

import math

from hycache.spec.fields import LayerKind
from hycache.spec.groups import LayerGroup, RecurrentGroup, dtype_bytes
from hycache.spec.hf.blocks import _attention, _gated_mlp, _mamba2, _moe, _MoELayer
from hycache.spec.hf.config import _Cfg, _Dtypes, _Parsed

_NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_NEMOTRON_NAMES = {"linear_attention": "mamba", "full_attention": "attention"}
_NEMOTRON_KINDS: dict[str, LayerKind] = {
    "mamba": "recurrent",
    "attention": "full",
    "mlp": "mlp",
    "moe": "mlp",
}
# early NemotronH configs (Nemotron-H-56B/47B/8B) name the attention head dim attention_head_dim
_NEMOTRON_HEAD_DIM = ("head_dim", "attention_head_dim")


def _nemotron_h(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """nemotron_h: every pattern entry is its own layer: M mamba2, * attention, - MLP, E MoE."""
    hidden = cfg.get_int("hidden_size")
    if cfg.has("hybrid_override_pattern"):
        _, pattern = cfg.raw("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(_NEMOTRON_PATTERN):
            raise cfg.error(
                "hybrid_override_pattern", f"expected a string of M*-E, got {pattern!r}, in"
            )
        kinds = [_NEMOTRON_PATTERN[c] for c in pattern]
    else:
        allowed = ("mamba", "attention", "mlp", "moe", "linear_attention", "full_attention")
        kinds = [_NEMOTRON_NAMES.get(t, t) for t in cfg.str_list("layers_block_type", allowed)]
    groups: list[LayerGroup] = []
    if kinds.count("attention"):
        groups.append(
            _attention(cfg, dt, kinds.count("attention"), head_dim_keys=_NEMOTRON_HEAD_DIM)
        )
    if kinds.count("mamba"):
        groups.append(_mamba2(cfg, dt, kinds.count("mamba"), nemotron=True))
    mlp = (
        kinds.count("mlp") * 2 * hidden * cfg.get_int("intermediate_size") if "mlp" in kinds else 0
    )
    moe = None
    if "moe" in kinds:
        # relu2 experts (up, down) on the hidden state or on a ``moe_latent_size`` projection of
        # it; router and shared expert on the hidden state.
        latent = cfg.opt_int("moe_latent_size")
        width = latent or hidden
        top_k, inter = cfg.get_int("num_experts_per_tok"), cfg.get_int("moe_intermediate_size")
        experts = cfg.get_int("n_routed_experts")
        layer = _MoELayer(
            active=hidden * experts
            + top_k * 2 * width * inter
            + 2 * hidden * cfg.get_int("moe_shared_expert_intermediate_size")
            + (2 * hidden * latent if latent is not None else 0),
            experts=experts,
            top_k=top_k,
            per_expert=2 * width * inter,
        )
        mlp += kinds.count("moe") * layer.active
        moe = layer.shape(kinds.count("moe"))
    layer_kinds = tuple(_NEMOTRON_KINDS[k] for k in kinds)
    return _Parsed(tuple(groups), layer_kinds, mlp, moe)


def _bamba(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """bamba: Mamba2 layers with full attention at ``attn_layer_indices`` (0-based)."""
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    attn = set(cfg.int_list("attn_layer_indices")) if cfg.has("attn_layer_indices") else set()
    if any(i >= n for i in attn):
        raise cfg.error("attn_layer_indices", f"index >= num_hidden_layers {n} in")
    groups: list[LayerGroup] = []
    if attn:
        groups.append(_attention(cfg, dt, len(attn), derive_head_dim=True))
    if n - len(attn):
        groups.append(_mamba2(cfg, dt, n - len(attn), nemotron=False))
    kinds: tuple[LayerKind, ...] = tuple("full" if i in attn else "recurrent" for i in range(n))
    return _Parsed(tuple(groups), kinds, n * _gated_mlp(hidden, cfg.get_int("intermediate_size")))


def _falcon_h1(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """falcon_h1: parallel hybrid, every layer has attention AND Mamba2 side by side."""
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    groups = (_attention(cfg, dt, n, derive_head_dim=True), _mamba2(cfg, dt, n, nemotron=False))
    both: LayerKind = "full+recurrent"
    kinds = (both,) * n
    return _Parsed(groups, kinds, n * _gated_mlp(hidden, cfg.get_int("intermediate_size")))


def _jamba(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """jamba: Mamba1 layers; attention where ``i % attn_layer_period == attn_layer_offset``."""
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    period = cfg.get_int("attn_layer_period", default=8)
    offset = cfg.get_int("attn_layer_offset", default=4, minimum=0)
    if offset >= period:
        raise cfg.error("attn_layer_offset", f"expected < attn_layer_period {period} in")
    kinds: tuple[LayerKind, ...] = tuple(
        "full" if i % period == offset else "recurrent" for i in range(n)
    )
    n_attn = kinds.count("full")
    d_state, kernel = cfg.get_int("mamba_d_state"), cfg.get_int("mamba_d_conv")
    inner = cfg.get_int("mamba_expand") * hidden
    key, raw = cfg.raw("mamba_dt_rank")
    dt_rank = math.ceil(hidden / 16) if raw in (None, "auto") else cfg.get_int(key)
    groups: list[LayerGroup] = []
    if n_attn:
        groups.append(_attention(cfg, dt, n_attn, derive_head_dim=True))
    if n - n_attn:
        groups.append(
            RecurrentGroup(
                layers=n - n_attn,
                mixer="mamba",
                recurrent_state_bytes=inner * d_state * dtype_bytes(dt.state),
                conv_state_bytes=inner * (kernel - 1) * dtype_bytes(dt.conv),
                state_dtype=dt.state,
                conv_dtype=dt.conv,
                proj_params_per_layer=hidden * 2 * inner
                + inner * (dt_rank + 2 * d_state)
                + dt_rank * inner
                + inner * hidden,
            )
        )
    e_period = cfg.get_int("expert_layer_period", default=2)
    e_offset = cfg.get_int("expert_layer_offset", default=1, minimum=0)
    if e_offset >= e_period:
        raise cfg.error("expert_layer_offset", f"expected < expert_layer_period {e_period} in")
    inter = cfg.get_int("intermediate_size")
    moe = _moe(
        hidden, inter, cfg.get_int("num_experts_per_tok"), cfg.get_int("num_experts"), 0, gated=True
    )
    sparse = [i % e_period == e_offset for i in range(n)]
    mlp = sum(moe.active if s else _gated_mlp(hidden, inter) for s in sparse)
    return _Parsed(tuple(groups), kinds, mlp, moe.shape(sum(sparse)))
