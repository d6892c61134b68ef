"""Layer-group building blocks shared by the per-family parsers of ``hycache.spec.hf.parse``.

GQA attention, its sliding-window twin, Mamba2 mixers and gated / MoE MLP parameter counts.
Each reads its fields through ``_Cfg`` (so a missing or bad field raises SpecError naming it)
and returns a layer group, a parameter count or a ``_MoELayer``; none decides a model's layer
layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from hycache.spec.groups import FullAttentionGroup, RecurrentGroup, SlidingWindowGroup, dtype_bytes
from hycache.spec.hf.config import _Cfg, _Dtypes
from hycache.spec.moe import MoEShape


def _gated_mlp(hidden: int, inter: int) -> int:
    """gate, up and down projections."""
    return 3 * hidden * inter


def _attention(
    cfg: _Cfg,
    dt: _Dtypes,
    layers: int,
    *,
    gated_q: bool = False,
    derive_head_dim: bool = False,
    head_dim_keys: tuple[str, ...] = ("head_dim",),
) -> FullAttentionGroup:
    """Standard GQA attention of ``layers`` layers (q/k/v/o projections, no biases counted).

    The head dim is the first of ``head_dim_keys`` present, else (``derive_head_dim``)
    ``hidden_size // num_attention_heads``."""
    hidden, q = cfg.get_int("hidden_size"), cfg.get_int("num_attention_heads")
    kv = cfg.get_int("num_key_value_heads")
    head_dim = cfg.get_int(head_dim_keys, default=hidden // q if derive_head_dim else None)
    q_out = q * head_dim * (2 if gated_q else 1)  # Qwen's q_proj also emits the output gate
    proj = hidden * (q_out + 2 * kv * head_dim) + q * head_dim * hidden
    return FullAttentionGroup(
        layers=layers,
        q_heads=q,
        kv_heads=kv,
        head_dim=head_dim,
        dtype_bytes=dt.model_bytes,
        proj_params_per_layer=proj,
    )


def _swa_of(full: FullAttentionGroup, layers: int, window: int) -> SlidingWindowGroup:
    return SlidingWindowGroup(
        layers=layers,
        q_heads=full.q_heads,
        kv_heads=full.kv_heads,
        head_dim=full.head_dim,
        dtype_bytes=full.dtype_bytes,
        proj_params_per_layer=full.proj_params_per_layer,
        window=window,
    )


def _mamba2(cfg: _Cfg, dt: _Dtypes, layers: int, *, nemotron: bool) -> RecurrentGroup:
    """Mamba2: state ``nheads*head_dim*d_state``; conv ``(inner + 2*ngroups*d_state)*(k-1)``."""
    hidden = cfg.get_int("hidden_size")
    if nemotron:
        nheads, head_dim = cfg.get_int("mamba_num_heads"), cfg.get_int("mamba_head_dim")
        d_state = cfg.get_int("ssm_state_size")
        kernel = cfg.get_int(("conv_kernel", "mamba_d_conv"))
        ngroups = cfg.get_int(("n_groups", "mamba_n_groups"))
        inner = nheads * head_dim
        chunk = cfg.get_int(("chunk_size", "mamba_chunk_size"), 128)  # NemotronHConfig default
    else:  # bamba / falcon_h1
        nheads, d_state = cfg.get_int("mamba_n_heads"), cfg.get_int("mamba_d_state")
        kernel, ngroups = cfg.get_int("mamba_d_conv"), cfg.get_int("mamba_n_groups")
        inner = cfg.opt_int("mamba_d_ssm") or cfg.get_int("mamba_expand") * hidden
        key, raw = cfg.raw("mamba_d_head")
        head_dim = inner // nheads if raw in (None, "auto") else cfg.get_int(key)
        chunk = cfg.get_int(("mamba_chunk_size", "chunk_size"), 256)
    conv_dim = inner + 2 * ngroups * d_state
    return RecurrentGroup(
        layers=layers,
        mixer="mamba2",
        recurrent_state_bytes=nheads * head_dim * d_state * dtype_bytes(dt.state),
        conv_state_bytes=conv_dim * (kernel - 1) * dtype_bytes(dt.conv),
        state_dtype=dt.state,
        conv_dtype=dt.conv,
        proj_params_per_layer=hidden * (inner + conv_dim + nheads) + inner * hidden,
        kernel_chunk=chunk,
    )


@dataclass(frozen=True)
class _MoELayer:
    """One MoE layer: ``active`` parameters per token (router, ``top_k`` routed experts, shared
    experts) and its routed part: ``experts`` of ``per_expert`` parameters each."""

    active: int
    experts: int
    top_k: int
    per_expert: int

    def shape(self, moe_layers: int) -> MoEShape | None:
        """The model's MoE shape when ``moe_layers`` layers are like this one (None if none)."""
        if moe_layers == 0 or self.experts <= 1:
            return None
        return MoEShape(
            experts=self.experts,
            experts_per_token=self.top_k,
            routed_params_per_token=moe_layers * self.top_k * self.per_expert,
        )


def _moe(
    hidden: int, inter: int, top_k: int, experts: int, shared: int, *, gated: bool
) -> _MoELayer:
    """Router plus ``top_k`` routed experts plus ``shared`` intermediate width of shared experts."""
    mats = 3 if gated else 2
    per_expert = mats * hidden * inter
    active = hidden * experts + top_k * per_expert + mats * hidden * shared
    return _MoELayer(active=active, experts=experts, top_k=top_k, per_expert=per_expert)
