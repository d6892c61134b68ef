"""Parsers of the linear-attention hybrids for ``hycache.spec.hf.parse``: Qwen's Gated DeltaNet
(qwen3_next, qwen3_5, qwen3_5_moe) and Kimi's KDA + MLA (kimi_linear).

Each parser takes a ``_Cfg`` and the resolved ``_Dtypes`` and returns ``_Parsed`` (layer
groups, per-layer kinds, active MLP parameters per token, MoE shape); a bad or missing field
raises SpecError.
"""

from __future__ import annotations

from hycache.spec.fields import LayerKind
from hycache.spec.groups import FullAttentionGroup, LayerGroup, RecurrentGroup, dtype_bytes
from hycache.spec.hf.blocks import _attention, _gated_mlp, _moe
from hycache.spec.hf.config import _Cfg, _Dtypes, _Parsed

_KINDS: dict[str, LayerKind] = {"full_attention": "full", "linear_attention": "recurrent"}

#: the chunk of FLA's chunked GDN / KDA prefill kernels (its intermediate states lie 64 apart)
FLA_CHUNK = 64


def _qwen_gdn(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """qwen3_next / qwen3_5 / qwen3_5_moe: Gated DeltaNet + gated full attention.

    GDN: state ``num_v_heads * head_k_dim * head_v_dim``; conv ``conv_dim * (k - 1)`` with
    ``conv_dim = 2 * key_dim + value_dim``. Layout from ``layer_types`` or
    ``full_attention_interval`` (default 4: layer i is full when (i + 1) % interval == 0).
    """
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    if cfg.has("layer_types"):
        types = cfg.str_list("layer_types", ("linear_attention", "full_attention"), n)
    else:
        every = cfg.get_int("full_attention_interval", default=4)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    n_full = types.count("full_attention")
    nk, nv = cfg.get_int("linear_num_key_heads"), cfg.get_int("linear_num_value_heads")
    dk, dv = cfg.get_int("linear_key_head_dim"), cfg.get_int("linear_value_head_dim")
    kernel = cfg.get_int("linear_conv_kernel_dim")
    key_dim, value_dim = nk * dk, nv * dv
    conv_dim = 2 * key_dim + value_dim
    groups: list[LayerGroup] = []
    if n_full:
        groups.append(_attention(cfg, dt, n_full, gated_q=True))
    if n - n_full:
        groups.append(
            RecurrentGroup(
                layers=n - n_full,
                mixer="gdn",
                recurrent_state_bytes=nv * dk * dv * dtype_bytes(dt.state),
                conv_state_bytes=conv_dim * (kernel - 1) * dtype_bytes(dt.conv),
                state_dtype=dt.state,
                conv_dtype=dt.conv,
                # in_proj_qkv + in_proj_z + in_proj_b/a, out_proj
                proj_params_per_layer=hidden * (conv_dim + value_dim + 2 * nv) + value_dim * hidden,
                kernel_chunk=FLA_CHUNK,
            )
        )
    kinds = tuple(_KINDS[t] for t in types)
    if not cfg.has("num_experts"):
        dense = n * _gated_mlp(hidden, cfg.get_int("intermediate_size"))
        return _Parsed(tuple(groups), kinds, dense)
    moe = _moe(
        hidden,
        cfg.get_int("moe_intermediate_size"),
        cfg.get_int("num_experts_per_tok"),
        cfg.get_int("num_experts"),
        cfg.get_int("shared_expert_intermediate_size"),
        gated=True,
    )
    moe_active = moe.active + hidden  # shared_expert_gate
    dense_only = set(cfg.int_list("mlp_only_layers")) if cfg.has("mlp_only_layers") else set()
    step = cfg.get_int("decoder_sparse_step", default=1)
    sparse = [i not in dense_only and (i + 1) % step == 0 for i in range(n)]
    mlp = sum(
        moe_active if s else _gated_mlp(hidden, cfg.get_int("intermediate_size")) for s in sparse
    )
    return _Parsed(tuple(groups), kinds, mlp, moe.shape(sum(sparse)))


def _kimi_linear(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """kimi_linear: KDA + MLA. ``linear_attn_config.{kda,full_attn}_layers`` are 1-based.

    MLA layers cache one latent of ``kv_lora_rank + qk_rope_head_dim`` per token (as transformers
    and vLLM do); their ``head_dim`` is the query/key width ``qk_nope + qk_rope`` (FLOPs only).
    KDA: state ``heads * head_dim^2``; conv over q, k and v: ``3 * heads * head_dim * (k - 1)``.
    """
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    if not cfg.has("linear_attn_config") and cfg.has("linear_num_heads"):
        # transformers >= 5 saves the KDA settings as flat fields next to ``layer_types``
        types = cfg.str_list("layer_types", ("linear_attention", "full_attention"), n)
        heads, head_dim = cfg.get_int("linear_num_heads"), cfg.get_int("linear_head_dim")
        kernel = cfg.get_int("linear_conv_kernel_dim")
        return _kimi_groups(cfg, dt, n, hidden, types, heads, head_dim, kernel)
    lac = cfg.sub("linear_attn_config")
    if cfg.has("layer_types"):
        types = cfg.str_list("layer_types", ("linear_attention", "full_attention"), n)
    else:
        slots: list[str | None] = [None] * n
        for key, kind in (
            ("full_attn_layers", "full_attention"),
            ("kda_layers", "linear_attention"),
        ):
            for idx in lac.int_list(key):
                if not 1 <= idx <= n or slots[idx - 1] is not None:
                    raise lac.error(key, f"layer {idx} out of 1..{n} or listed twice in")
                slots[idx - 1] = kind
        if None in slots:
            missing = [i + 1 for i, s in enumerate(slots) if s is None]
            raise lac.error("kda_layers", f"layers {missing} in neither list; see")
        types = [s for s in slots if s is not None]
    heads, head_dim = lac.get_int("num_heads"), lac.get_int("head_dim")
    kernel = lac.get_int("short_conv_kernel_size")
    return _kimi_groups(cfg, dt, n, hidden, types, heads, head_dim, kernel)


def _kimi_groups(
    cfg: _Cfg,
    dt: _Dtypes,
    n: int,
    hidden: int,
    types: list[str],
    heads: int,
    head_dim: int,
    kernel: int,
) -> _Parsed:
    """The groups of a kimi_linear model once its layer layout and KDA shape are known."""
    n_full = types.count("full_attention")
    qkv = heads * head_dim
    groups: list[LayerGroup] = []
    if n_full:
        q = cfg.get_int("num_attention_heads")
        kv = cfg.get_int("num_key_value_heads", default=q)
        rank, rope = cfg.get_int("kv_lora_rank"), cfg.get_int("qk_rope_head_dim")
        nope, v_dim = cfg.get_int("qk_nope_head_dim"), cfg.get_int("v_head_dim")
        q_rank = cfg.opt_int("q_lora_rank")
        qk = nope + rope
        q_proj = hidden * q * qk if q_rank is None else hidden * q_rank + q_rank * q * qk
        proj = q_proj + hidden * (rank + rope) + rank * q * (nope + v_dim) + q * v_dim * hidden
        groups.append(
            FullAttentionGroup(
                layers=n_full,
                q_heads=q,
                kv_heads=kv,
                head_dim=qk,
                dtype_bytes=dt.model_bytes,
                latent_dim=rank + rope,
                proj_params_per_layer=proj,
            )
        )
    if n - n_full:
        groups.append(
            RecurrentGroup(
                layers=n - n_full,
                mixer="kda",
                recurrent_state_bytes=heads * head_dim * head_dim * dtype_bytes(dt.state),
                conv_state_bytes=3 * qkv * (kernel - 1) * dtype_bytes(dt.conv),
                state_dtype=dt.state,
                conv_dtype=dt.conv,
                # q/k/v, beta, forget-gate and output-gate low-rank pairs, o_proj
                proj_params_per_layer=3 * hidden * qkv
                + hidden * heads
                + 2 * (hidden * head_dim + head_dim * qkv)
                + qkv * hidden,
                kernel_chunk=FLA_CHUNK,
            )
        )
    if cfg.has("mlp_layer_types"):
        mlp_types = cfg.str_list("mlp_layer_types", ("dense", "sparse"), n)
    else:
        first_dense = cfg.get_int("first_k_dense_replace", default=1, minimum=0)
        freq = cfg.get_int("moe_layer_freq", default=1)
        mlp_types = ["sparse" if i >= first_dense and i % freq == 0 else "dense" for i in range(n)]
    inter = cfg.get_int("moe_intermediate_size")
    moe = _moe(
        hidden,
        inter,
        cfg.get_int(("num_experts_per_token", "num_experts_per_tok")),
        cfg.get_int(("num_experts", "num_local_experts")),
        inter * cfg.get_int(("num_shared_experts", "n_shared_experts"), default=1),
        gated=True,
    )
    sparse = mlp_types.count("sparse")
    dense = (n - sparse) * _gated_mlp(hidden, cfg.get_int("intermediate_size")) if sparse < n else 0
    kinds = tuple(_KINDS[t] for t in types)
    return _Parsed(tuple(groups), kinds, dense + sparse * moe.active, moe.shape(sparse))
