"""Typed, error-reporting access to a Hugging Face ``config.json`` for ``hycache.spec.hf.parse``.

Holds ``_Cfg`` (field lookup with defaults, nested ``text_config`` and parent fallback; every
bad or missing field raises SpecError naming the config and the field), ``_load`` (a path, a
directory or a dict to the config dict), ``_resolve_dtypes`` (model / state / conv dtypes, rules
in ``hycache.spec.hf.parse``) and the two value types the per-family parsers share: ``_Dtypes`` and
``_Parsed`` (a parser's groups, layer count, per-layer kinds, active MLP parameters per token and
MoE shape). Pure stdlib.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hycache.errors import SpecError
from hycache.spec.fields import LayerKind
from hycache.spec.groups import LayerGroup, canonical_dtype, dtype_bytes
from hycache.spec.moe import MoEShape

_DEFAULT_MODEL_DTYPE: Mapping[str, str] = {
    # gpt-oss configs carry no torch_dtype; transformers' dtype="auto" then takes the dtype of
    # the checkpoint's first floating-point tensor, bfloat16 in the published checkpoints (every
    # tensor that is not MXFP4: attention, router, embeddings).
    "gpt_oss": "bfloat16",
}
_DEFAULT_STATE_DTYPE: Mapping[str, str] = {
    "nemotron_h": "float32",  # NemotronHConfig.mamba_ssm_cache_dtype default
    "kimi_linear": "float32",  # vLLM keeps the KDA recurrent state in float32, any model dtype
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
    layer_kinds: tuple[LayerKind, ...]
    active_mlp_params: int
    moe: MoEShape | None = None

    @property
    def num_layers(self) -> int:
        return len(self.layer_kinds)


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


def _resolve_dtypes(
    cfg: _Cfg, model_type: str, dtype: str | None, state: str | None, conv: str | None
) -> _Dtypes:
    """Model, recurrent-state and conv dtypes (rules in ``hycache.spec.hf.parse``)."""
    if dtype is not None:
        model = canonical_dtype(dtype, field="dtype")
    else:
        key, found = ("torch_dtype", cfg.opt_str(("dtype", "torch_dtype")))
        if found is None:
            key, found = "dtype", _DEFAULT_MODEL_DTYPE.get(model_type)
        if found is None:
            raise SpecError(
                f"{cfg.where}: missing field '{cfg.prefix}torch_dtype' (pass dtype= to choose the "
                "model dtype)",
                field="torch_dtype",
            )
        model = canonical_dtype(found, field=key)
    if state is not None:
        state_c = canonical_dtype(state, field="state_dtype")
    else:
        ssm = cfg.opt_str(("mamba_ssm_dtype", "mamba_ssm_cache_dtype"))
        if ssm is None:
            ssm = _DEFAULT_STATE_DTYPE.get(model_type)
        state_c = canonical_dtype(ssm, field="mamba_ssm_dtype") if ssm is not None else model
    conv_c = canonical_dtype(conv, field="conv_dtype") if conv is not None else model
    return _Dtypes(model=model, state=state_c, conv=conv_c)
