"""The fields of a ModelSpec from a Hugging Face ``config.json`` (pure stdlib; no transformers).

``ModelSpec.from_hf_config`` is the public entry point; ``parse_hf_config`` returns the
unvalidated ``SpecFields`` (with the per-layer kinds) and imports nothing of
``hycache.spec.model``. MoE models get their ``MoEShape`` (routed experts, top-k, routed
parameters per token) next to their active MLP parameters.

Field names and layer layouts follow the transformers configuration classes of each
architecture. Fields that size the caches (layer counts, heads, head dims, state dims, conv
kernels, hidden/vocab/intermediate sizes) are required: a missing one raises SpecError naming
it. Defaults are taken from transformers only for layout and routing knobs that published
checkpoints are known to omit (``full_attention_interval`` 4, ``sliding_window_pattern`` 6,
Jamba's periods, ``first_k_dense_replace`` 1, ...), for ``head_dim = hidden_size // heads``
where the modeling code derives it, and for Gemma 3, whose published multimodal configs omit
most text fields and rely on ``Gemma3TextConfig`` defaults.

Dtypes, as vLLM and SGLang keep them:

- attention KV: the model dtype: ``dtype`` argument, else the config's ``dtype`` /
  ``torch_dtype``, else the family default (gpt_oss: bfloat16, see below), else SpecError;
- recurrent state: ``state_dtype`` argument, else the config's ``mamba_ssm_dtype`` /
  ``mamba_ssm_cache_dtype``, else the family default (nemotron_h: float32 as
  ``NemotronHConfig``; kimi_linear: float32, vLLM's KDA state), else the model dtype (vLLM for
  GDN / Mamba; SGLang's ``--mamba-ssm-dtype`` defaults to float32 instead: pass
  ``state_dtype="float32"`` to model it);
- conv window: ``conv_dtype`` argument, else the model dtype (vLLM's and SGLang's conv state for
  Mamba1, Mamba2, GDN and KDA alike; a config's ``mamba_ssm_dtype`` does not apply to it).

gpt-oss configs have no ``torch_dtype``: transformers (``dtype="auto"``) then takes the dtype of
the checkpoint's first floating-point tensor, bfloat16 in every published gpt-oss checkpoint (the
tensors that are not MXFP4), so that is the default.

Conv windows are counted as ``kernel - 1`` columns (what a checkpoint must hold to resume, and
what vLLM allocates); transformers' DynamicCache keeps ``kernel`` columns, i.e. k/(k-1) more.
Recurrent states, KV bytes per token and projection / MLP parameter counts equal what
transformers 5.24 builds for these configs (tests/spec/test_transformers_configs.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from hycache.errors import SpecError
from hycache.spec.fields import SpecFields
from hycache.spec.hf.config import _Cfg, _Dtypes, _load, _Parsed, _resolve_dtypes
from hycache.spec.hf.linear import _kimi_linear, _qwen_gdn
from hycache.spec.hf.mamba import _bamba, _falcon_h1, _jamba, _nemotron_h
from hycache.spec.hf.swa import _gemma3, _gpt_oss

_NESTED_TEXT_CONFIG = ("qwen3_5", "qwen3_5_moe", "gemma3")
_GEMMA3_DEFAULTS: Mapping[str, object] = {
    "vocab_size": 262_208,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "sliding_window": 4096,
}


def parse_hf_config(
    source: str | os.PathLike[str] | Mapping[str, object],
    *,
    name: str | None = None,
    dtype: str | None = None,
    state_dtype: str | None = None,
    conv_dtype: str | None = None,
) -> SpecFields:
    """The spec fields of a HF config (path to config.json, its directory, or a dict);
    ``ModelSpec.from_hf_config`` validates them into a ModelSpec.

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
    return SpecFields(
        name=spec_name or model_type,
        groups=parsed.groups,
        hidden_size=hidden,
        vocab_size=cfg.get_int("vocab_size"),
        active_mlp_params_per_token=parsed.active_mlp_params,
        num_layers=parsed.num_layers,
        moe=parsed.moe,
        layer_kinds=parsed.layer_kinds,
    )


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
