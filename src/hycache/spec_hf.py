"""Build a ModelSpec from a Hugging Face ``config.json`` (pure stdlib; no transformers import).

Field names and layer layouts follow the transformers configuration classes of each
architecture. Fields that size the caches (layer counts, heads, head dims, state dims, conv
kernels, hidden/vocab/intermediate sizes) are required: a missing one raises SpecError naming
it. Defaults are taken from transformers only for layout and routing knobs that published
checkpoints are known to omit (``full_attention_interval`` 4, ``sliding_window_pattern`` 6,
Jamba's periods, ``first_k_dense_replace`` 1, ...), for ``head_dim = hidden_size // heads``
where the modeling code derives it, and for Gemma 3, whose published multimodal configs omit
most text fields and rely on ``Gemma3TextConfig`` defaults.

Dtypes: attention KV uses the model dtype (``dtype`` argument, else the config's ``dtype`` /
``torch_dtype``). The recurrent state uses ``state_dtype`` if given, else the config's
``mamba_ssm_dtype`` / ``mamba_ssm_cache_dtype`` (NemotronH defaults the latter to float32),
else the model dtype. The conv window uses ``conv_dtype`` if given, else the state dtype:
hycache stores a layer's checkpoint in one precision (so Qwen3.5's ``mamba_ssm_dtype:
float32`` makes state and conv fp32). Pass ``conv_dtype`` to model an engine that keeps the
conv window in the model dtype.

Conv windows are counted as ``kernel - 1`` columns (what a checkpoint must hold to resume, and
what vLLM allocates); transformers' DynamicCache keeps ``kernel`` columns, i.e. k/(k-1) more.
Recurrent states, KV bytes per token and projection / MLP parameter counts equal what
transformers 5.24 builds for these configs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hycache.errors import SpecError
from hycache.spec import (
    FullAttentionGroup,
    LayerGroup,
    ModelSpec,
    RecurrentGroup,
    SlidingWindowGroup,
    canonical_dtype,
    dtype_bytes,
)

_NESTED_TEXT_CONFIG = ("qwen3_5", "qwen3_5_moe", "gemma3")
_GEMMA3_DEFAULTS: Mapping[str, object] = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
}


class _Cfg:
    """Typed, error-reporting access to one (possibly nested) config dict."""

    def __init__(
        self,
        data: Mapping[str, object],
        where: str,
        *,
        prefix: str = "",
        parent: _Cfg | None = None,
        defaults: Mapping[str, object] | None = None,
    ) -> None:
        self.data, self.where, self.prefix, self.parent = data, where, prefix, parent
        self.defaults = defaults or {}

    def error(self, key: str, problem: str) -> SpecError:
        return SpecError(f"{self.where}: {problem} field '{self.prefix}{key}'", field=key)

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, keys: str | Sequence[str]) -> tuple[str, object | None]:
        """The first of ``keys`` present (not null) and its value; else (first key, None)."""
        names = (keys,) if isinstance(keys, str) else tuple(keys)
        for key in names:
            if self.data.get(key) is not None:
                return key, self.data[key]
        for key in names:
            if key in self.defaults:
                return key, self.defaults[key]
        return names[0], None

    def get_int(
        self, keys: str | Sequence[str], default: int | None = None, *, minimum: int = 1
    ) -> int:
        """An int field >= ``minimum`` (first present of ``keys``); ``default`` when absent,
        SpecError when absent without a default."""
        key, value = self.raw(keys)
        if value is None:
            if default is None:
                raise self.error(key, "missing")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(key, f"expected an int >= {minimum}, got {value!r}, in")
        return value

    def opt_int(self, keys: str | Sequence[str]) -> int | None:
        """A positive int field, or None when absent (or null)."""
        key, value = self.raw(keys)
        return None if value is None else self.get_int(key)

    def int_list(self, key: str) -> list[int]:
        """A required list of non-negative ints."""
        _, value = self.raw(key)
        if value is None:
            raise self.error(key, "missing")
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
        ):
            raise self.error(key, f"expected a list of non-negative ints, got {value!r}, in")
        return list(value)

    def str_list(self, key: str, allowed: Sequence[str], length: int | None = None) -> list[str]:
        """A required list of strings from ``allowed`` (of ``length`` items when given)."""
        _, value = self.raw(key)
        if value is None:
            raise self.error(key, "missing")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}, in")
        bad = sorted({v for v in value if v not in allowed})
        if bad:
            raise self.error(key, f"unknown entries {bad} (allowed {list(allowed)}) in")
        if length is not None and len(value) != length:
            raise self.error(key, f"expected {length} entries, got {len(value)}, in")
        return list(value)

    def opt_str(self, keys: str | Sequence[str]) -> str | None:
        """An optional string field; None when absent (also looked up in the parent config)."""
        key, value = self.raw(keys)
        if value is None:
            return self.parent.opt_str(keys) if self.parent is not None else None
        if not isinstance(value, str):
            raise self.error(key, f"expected a string, got {value!r}, in")
        return value

    def sub(self, key: str) -> _Cfg:
        """A required nested dict."""
        _, value = self.raw(key)
        if not isinstance(value, Mapping):
            raise self.error(key, "missing" if value is None else "expected an object in")
        return _Cfg(value, self.where, prefix=f"{self.prefix}{key}.", parent=self)


@dataclass(frozen=True)
class _Dtypes:
    model: str
    state: str
    conv: str

    @property
    def model_bytes(self) -> int:
        return dtype_bytes(self.model)


@dataclass(frozen=True)
class _Parsed:
    groups: tuple[LayerGroup, ...]
    num_layers: int
    active_mlp_params: int


def _load(source: str | os.PathLike[str] | Mapping[str, object]) -> tuple[dict[str, object], str]:
    """The config dict and a prefix naming its origin for messages ("" for a dict)."""
    if isinstance(source, Mapping):
        return dict(source), ""
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise SpecError(f"{path}: no such config file", field="path")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{path}: cannot read config.json: {exc}", field="path") from exc
    if not isinstance(data, dict):
        raise SpecError(f"{path}: config.json is not a JSON object", field="path")
    return data, f"{path}: "


def parse_hf_config(
    source: str | os.PathLike[str] | Mapping[str, object],
    *,
    name: str | None = None,
    dtype: str | None = None,
    state_dtype: str | None = None,
    conv_dtype: str | None = None,
) -> ModelSpec:
    """Build a ModelSpec from a HF config (path to config.json, its directory, or a dict).

    Supported ``model_type``: qwen3_next, qwen3_5 / qwen3_5_text, qwen3_5_moe /
    qwen3_5_moe_text, kimi_linear, nemotron_h, bamba, jamba, falcon_h1, gemma3 / gemma3_text,
    gpt_oss. qwen3_5* and gemma3 read a nested ``text_config`` when present (else the flat
    dict). ``name`` defaults to the config's ``_name_or_path``, else its model_type. SpecError
    (naming the path when given, and the field) for anything that cannot be understood.
    """
    data, origin = _load(source)
    model_type = data.get("model_type")
    if not isinstance(model_type, str):
        raise SpecError(f"{origin}config.json: missing field 'model_type'", field="model_type")
    parser = _PARSERS.get(model_type)
    if parser is None:
        known = ", ".join(sorted(_PARSERS))
        raise SpecError(
            f"{origin}unsupported model_type {model_type!r} in field 'model_type' "
            f"(supported: {known})",
            field="model_type",
        )
    where = f"{origin}{model_type} config.json"
    defaults = _GEMMA3_DEFAULTS if model_type.startswith("gemma3") else None
    cfg = _Cfg(data, where, defaults=defaults)
    text = data.get("text_config")
    if model_type in _NESTED_TEXT_CONFIG and isinstance(text, Mapping):
        cfg = _Cfg(text, where, prefix="text_config.", parent=cfg, defaults=defaults)
    dtypes = _resolve_dtypes(cfg, model_type, dtype, state_dtype, conv_dtype)
    parsed = parser(cfg, dtypes)
    hidden = cfg.get_int("hidden_size")
    default_name = data.get("_name_or_path")
    spec_name = name or (default_name if isinstance(default_name, str) and default_name else None)
    return ModelSpec(
        name=spec_name or model_type,
        groups=parsed.groups,
        hidden_size=hidden,
        vocab_size=cfg.get_int("vocab_size"),
        active_mlp_params_per_token=parsed.active_mlp_params,
        num_layers=parsed.num_layers,
    )


def _resolve_dtypes(
    cfg: _Cfg, model_type: str, dtype: str | None, state: str | None, conv: str | None
) -> _Dtypes:
    if dtype is not None:
        model = canonical_dtype(dtype, field="dtype")
    else:
        found = cfg.opt_str(("dtype", "torch_dtype"))
        if found is None:
            raise cfg.error("torch_dtype", "missing")
        model = canonical_dtype(found, field="torch_dtype")
    if state is not None:
        state_c = canonical_dtype(state, field="state_dtype")
    else:
        ssm = cfg.opt_str(("mamba_ssm_dtype", "mamba_ssm_cache_dtype"))
        if ssm is None and model_type == "nemotron_h":
            ssm = "float32"  # NemotronHConfig.mamba_ssm_cache_dtype default
        state_c = canonical_dtype(ssm, field="mamba_ssm_dtype") if ssm is not None else model
    conv_c = canonical_dtype(conv, field="conv_dtype") if conv is not None else state_c
    return _Dtypes(model=model, state=state_c, conv=conv_c)


# ---------------------------------------------------------------- shared building blocks


def _gated_mlp(hidden: int, inter: int) -> int:
    """gate, up and down projections."""
    return 3 * hidden * inter


def _attention(
    cfg: _Cfg, dt: _Dtypes, layers: int, *, gated_q: bool = False, derive_head_dim: bool = False
) -> FullAttentionGroup:
    """Standard GQA attention of ``layers`` layers (q/k/v/o projections, no biases counted)."""
    hidden, q = cfg.get_int("hidden_size"), cfg.get_int("num_attention_heads")
    kv = cfg.get_int("num_key_value_heads")
    head_dim = cfg.get_int("head_dim", default=hidden // q if derive_head_dim else None)
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
    else:  # bamba / falcon_h1
        nheads, d_state = cfg.get_int("mamba_n_heads"), cfg.get_int("mamba_d_state")
        kernel, ngroups = cfg.get_int("mamba_d_conv"), cfg.get_int("mamba_n_groups")
        inner = cfg.opt_int("mamba_d_ssm") or cfg.get_int("mamba_expand") * hidden
        key, raw = cfg.raw("mamba_d_head")
        head_dim = inner // nheads if raw in (None, "auto") else cfg.get_int(key)
    conv_dim = inner + 2 * ngroups * d_state
    return RecurrentGroup(
        layers=layers,
        mixer="mamba2",
        recurrent_state_bytes=nheads * head_dim * d_state * dtype_bytes(dt.state),
        conv_state_bytes=conv_dim * (kernel - 1) * dtype_bytes(dt.conv),
        state_dtype=dt.state,
        conv_dtype=dt.conv,
        proj_params_per_layer=hidden * (inner + conv_dim + nheads) + inner * hidden,
    )


def _moe(hidden: int, inter: int, top_k: int, experts: int, shared: int, *, gated: bool) -> int:
    """Router plus ``top_k`` routed experts plus ``shared`` intermediate width of shared experts."""
    mats = 3 if gated else 2
    return hidden * experts + mats * hidden * inter * top_k + mats * hidden * shared


# ---------------------------------------------------------------- architectures


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
            )
        )
    mlp = 0
    if cfg.has("num_experts"):
        moe = (
            _moe(
                hidden,
                cfg.get_int("moe_intermediate_size"),
                cfg.get_int("num_experts_per_tok"),
                cfg.get_int("num_experts"),
                cfg.get_int("shared_expert_intermediate_size"),
                gated=True,
            )
            + hidden
        )  # shared_expert_gate
        dense_only = set(cfg.int_list("mlp_only_layers")) if cfg.has("mlp_only_layers") else set()
        step = cfg.get_int("decoder_sparse_step", default=1)
        for i in range(n):
            sparse = i not in dense_only and (i + 1) % step == 0
            mlp += moe if sparse else _gated_mlp(hidden, cfg.get_int("intermediate_size"))
    else:
        mlp = n * _gated_mlp(hidden, cfg.get_int("intermediate_size"))
    return _Parsed(tuple(groups), n, mlp)


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
            )
        )
    if cfg.has("mlp_layer_types"):
        mlp_types = cfg.str_list("mlp_layer_types", ("dense", "sparse"), n)
    else:
        first_dense = cfg.get_int("first_k_dense_replace", default=1, minimum=0)
        freq = cfg.get_int("moe_layer_freq", default=1)
        mlp_types = ["sparse" if i >= first_dense and i % freq == 0 else "dense" for i in range(n)]
    dense = _gated_mlp(hidden, cfg.get_int("intermediate_size"))
    inter = cfg.get_int("moe_intermediate_size")
    moe = _moe(
        hidden,
        inter,
        cfg.get_int(("num_experts_per_token", "num_experts_per_tok")),
        cfg.get_int(("num_experts", "num_local_experts")),
        inter * cfg.get_int(("num_shared_experts", "n_shared_experts"), default=1),
        gated=True,
    )
    mlp = sum(moe if t == "sparse" else dense for t in mlp_types)
    return _Parsed(tuple(groups), n, mlp)


_NEMOTRON_PATTERN = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_NEMOTRON_NAMES = {"linear_attention": "mamba", "full_attention": "attention"}


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
        groups.append(_attention(cfg, dt, kinds.count("attention")))
    if kinds.count("mamba"):
        groups.append(_mamba2(cfg, dt, kinds.count("mamba"), nemotron=True))
    mlp = (
        kinds.count("mlp") * 2 * hidden * cfg.get_int("intermediate_size") if "mlp" in kinds else 0
    )
    if "moe" in kinds:
        # relu2 experts (up, down) on the hidden state or on a ``moe_latent_size`` projection of
        # it; router and shared expert on the hidden state.
        latent = cfg.opt_int("moe_latent_size")
        width = latent or hidden
        top_k, inter = cfg.get_int("num_experts_per_tok"), cfg.get_int("moe_intermediate_size")
        moe = (
            hidden * cfg.get_int("n_routed_experts")
            + top_k * 2 * width * inter
            + 2 * hidden * cfg.get_int("moe_shared_expert_intermediate_size")
            + (2 * hidden * latent if latent is not None else 0)
        )
        mlp += kinds.count("moe") * moe
    return _Parsed(tuple(groups), len(kinds), mlp)


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
    return _Parsed(tuple(groups), n, n * _gated_mlp(hidden, cfg.get_int("intermediate_size")))


def _falcon_h1(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """falcon_h1: parallel hybrid, every layer has attention AND Mamba2 side by side."""
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    groups = (_attention(cfg, dt, n, derive_head_dim=True), _mamba2(cfg, dt, n, nemotron=False))
    return _Parsed(groups, n, n * _gated_mlp(hidden, cfg.get_int("intermediate_size")))


def _jamba(cfg: _Cfg, dt: _Dtypes) -> _Parsed:
    """jamba: Mamba1 layers; attention where ``i % attn_layer_period == attn_layer_offset``."""
    n, hidden = cfg.get_int("num_hidden_layers"), cfg.get_int("hidden_size")
    period = cfg.get_int("attn_layer_period", default=8)
    offset = cfg.get_int("attn_layer_offset", default=4, minimum=0)
    if offset >= period:
        raise cfg.error("attn_layer_offset", f"expected < attn_layer_period {period} in")
    n_attn = sum(1 for i in range(n) if i % period == offset)
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
    mlp = sum(moe if i % e_period == e_offset else _gated_mlp(hidden, inter) for i in range(n))
    return _Parsed(tuple(groups), n, mlp)


def _swa_model(cfg: _Cfg, dt: _Dtypes, every: int, mlp_per_layer: int) -> _Parsed:
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
    return _Parsed(tuple(groups), n, n * mlp_per_layer)


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
    return _swa_model(cfg, dt, 2, moe)


_PARSERS: Mapping[str, Callable[[_Cfg, _Dtypes], _Parsed]] = {
    "qwen3_next": _qwen_gdn,
    "qwen3_5": _qwen_gdn,
    "qwen3_5_text": _qwen_gdn,
    "qwen3_5_moe": _qwen_gdn,
    "qwen3_5_moe_text": _qwen_gdn,
    "kimi_linear": _kimi_linear,
    "nemotron_h": _nemotron_h,
    "bamba": _bamba,
    "jamba": _jamba,
    "falcon_h1": _falcon_h1,
    "gemma3": _gemma3,
    "gemma3_text": _gemma3,
    "gpt_oss": _gpt_oss,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_PARSERS))
"""The ``model_type`` values ``parse_hf_config`` understands."""
