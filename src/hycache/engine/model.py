"""Loading a checkpoint through transformers and measuring what its cache holds.

``load_model(dir)`` goes through ``AutoModelForCausalLM.from_pretrained`` (the real loading
path: tiny checkpoints from ``hycache init-model`` and real ones alike), then runs a two-token
probe through a fresh ``DynamicCache`` to learn, per decoder layer, what the model caches:

* attention layers (``DynamicLayer`` full, ``DynamicSlidingWindowLayer`` SWA): K and V
  per-token shapes ``[kv_heads, head_dim]`` (Kimi's MLA caches a latent: K ``[1, kv_lora_rank]``,
  V ``[1, rope_dim]``);
* recurrent layers (``LinearAttentionLayer`` and the hybrid layer classes): per state index the
  conv window ``[channels, kernel]`` and the recurrent state shape.

The cache accounting uses the ``ModelSpec`` parsed from ``config.json``; where the model's real
tensors differ from it (dtype promotions, layouts transformers stores differently) the group is
re-sized to the measured bytes, so the pool's budget bounds the engine's real tensors.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hycache.errors import ConfigError, SpecError
from hycache.spec import (
    DTYPE_BYTES,
    FullAttentionGroup,
    LayerGroup,
    ModelSpec,
    RecurrentGroup,
    SlidingWindowGroup,
)

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "float64")


def require_engine() -> None:
    """ConfigError unless torch, transformers and safetensors can be imported."""
    missing = []
    for module in ("torch", "safetensors", "transformers"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise ConfigError(
            f"the engine needs {', '.join(missing)}: install the extra, "
            "pip install 'hycache[engine]' (torch==2.13.0, transformers, safetensors)"
        )
    import transformers

    tf: Any = transformers
    tf.logging.set_verbosity_error()
    tf.utils.logging.disable_progress_bar()


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}, got {name!r}")
    dtype: torch.dtype = getattr(torch, name)
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class AttnLayer:
    """One attention layer's cache: ``kind`` "full" or "swa"; per-token K and V shapes."""

    index: int
    kind: str
    k_shape: tuple[int, ...]
    v_shape: tuple[int, ...]
    window: int | None

    @property
    def elements_per_token(self) -> int:
        k = v = 1
        for d in self.k_shape:
            k *= d
        for d in self.v_shape:
            v *= d
        return k + v


@dataclass(frozen=True)
class StateTensor:
    """One (layer, state index) of a recurrent layer. ``conv_shape`` is what hycache stores:
    ``[channels, kernel - 1]`` (the oldest column of transformers' ``kernel``-wide window is
    shifted out before it is ever read); ``kernel`` is transformers' window width."""

    layer: int
    state_idx: int
    conv_shape: tuple[int, ...] | None
    kernel: int
    rec_shape: tuple[int, ...] | None
    conv_dtype: str | None
    rec_dtype: str | None

    @property
    def conv_elements(self) -> int:
        return _numel(self.conv_shape)

    @property
    def rec_elements(self) -> int:
        return _numel(self.rec_shape)


def _numel(shape: tuple[int, ...] | None) -> int:
    if shape is None:
        return 0
    n = 1
    for d in shape:
        n *= d
    return n


@dataclass(frozen=True)
class CacheLayout:
    """Per-layer description of what the model caches (see the module docstring)."""

    attention: tuple[AttnLayer, ...]
    states: tuple[StateTensor, ...]
    num_layers: int

    def attention_of(self, kind: str) -> tuple[AttnLayer, ...]:
        return tuple(a for a in self.attention if a.kind == kind)

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        return tuple(sorted({s.layer for s in self.states}))

    @property
    def window(self) -> int | None:
        windows = {a.window for a in self.attention if a.kind == "swa" and a.window is not None}
        if len(windows) > 1:
            raise ConfigError(f"sliding-window layers with different windows {sorted(windows)}")
        return windows.pop() if windows else None


@dataclass
class LoadedModel:
    """A transformers causal LM, its cache layout and the spec the cache accounts with."""

    path: Path
    model: Any
    config: Any
    model_type: str
    dtype: torch.dtype
    layout: CacheLayout
    spec: ModelSpec
    notes: tuple[str, ...]

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    def new_cache(self) -> Any:
        """A fresh cache object of the kind the model builds itself (``DynamicCache`` with the
        model's per-layer classes), SWA layers recording their whole past so the engine can
        page out every position it computed."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        for a in self.layout.attention:
            if a.kind == "swa":
                layer: Any = cache.layers[a.index]
                layer.activate_past_recording()
        return cache

    def forward(self, cache: Any, tokens: list[int], start: int) -> torch.Tensor:
        """Run ``tokens`` at absolute positions ``start..`` through ``cache``; the logits of
        the last one (float64, 1-D)."""
        import torch

        with torch.no_grad():
            ids = torch.tensor([tokens], dtype=torch.long)
            positions = torch.arange(start, start + len(tokens), dtype=torch.long)[None]
            out = self.model(
                input_ids=ids,
                position_ids=positions,
                cache=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            logits: torch.Tensor = out.logits[0, -1].to(torch.float64)
        return logits


def _check_dir(path: Path) -> None:
    if not path.exists():
        raise ConfigError(f"{path}: no such model directory")
    if not path.is_dir():
        raise ConfigError(f"{path}: not a directory (expected a checkpoint directory)")
    if not (path / "config.json").is_file():
        raise ConfigError(f"{path}: missing config.json (not a transformers checkpoint)")
    weights = [
        p
        for p in path.iterdir()
        if p.name.endswith(".safetensors")
        or p.name.endswith(".safetensors.index.json")
        or p.name in ("pytorch_model.bin", "pytorch_model.bin.index.json")
    ]
    if not weights:
        raise ConfigError(f"{path}: missing model.safetensors (no weight files in the directory)")


def _model_type(path: Path) -> str:
    try:
        data = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path / 'config.json'}: cannot read: {exc}") from exc
    model_type = data.get("model_type") if isinstance(data, dict) else None
    if not isinstance(model_type, str):
        raise SpecError(f"{path / 'config.json'}: missing field 'model_type'", field="model_type")
    return model_type


def load_model(path: str | os.PathLike[str], *, dtype: str = "float32") -> LoadedModel:
    """Load the checkpoint in ``path`` for the engine. ConfigError/SpecError naming what is
    missing (directory, config.json, weights, a config field) or unsupported."""
    require_engine()
    directory = Path(path)
    _check_dir(directory)
    model_type = _model_type(directory)
    # the spec parser knows which architectures hycache can account for: fail early and clearly
    ModelSpec.from_hf_config(directory, dtype=dtype)
    torch_type = torch_dtype(dtype)

    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"dtype": torch_type}
    model: Any
    try:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                directory, experts_implementation="eager", **kwargs
            )
        except ValueError as exc:
            if "experts implementation" not in str(exc):
                raise
            model = AutoModelForCausalLM.from_pretrained(directory, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(f"{directory}: transformers cannot load the checkpoint: {exc}") from exc
    model.eval()
    layout = measure_layout(model)
    spec, notes = engine_spec(directory, layout, dtype)
    return LoadedModel(
        directory, model, model.config, model_type, torch_type, layout, spec, tuple(notes)
    )


def measure_layout(model: Any) -> CacheLayout:
    """Probe the model with two tokens and read back what each cache layer holds."""
    import torch
    from transformers import DynamicCache
    from transformers.cache_utils import (
        CacheLayerMixin,
        DynamicSlidingWindowLayer,
        LinearAttentionCacheLayerMixin,
    )

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(
            input_ids=torch.tensor([[1, 2]]),
            position_ids=torch.tensor([[0, 1]]),
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
    attention: list[AttnLayer] = []
    states: list[StateTensor] = []
    layer: Any
    for index, layer in enumerate(cache.layers):
        if isinstance(layer, CacheLayerMixin) and layer.is_initialized:
            keys, values = layer.keys, layer.values
            if keys is not None and values is not None and keys.dim() == 4:
                sliding = isinstance(layer, DynamicSlidingWindowLayer)
                attention.append(
                    AttnLayer(
                        index,
                        "swa" if sliding else "full",
                        (int(keys.shape[1]), int(keys.shape[3])),
                        (int(values.shape[1]), int(values.shape[3])),
                        int(cast(Any, layer).sliding_window) if sliding else None,
                    )
                )
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for idx in range(layer.number_of_states):
                conv = layer.conv_states[idx] if layer.is_conv_states_initialized[idx] else None
                rec = (
                    layer.recurrent_states[idx]
                    if layer.is_recurrent_states_initialized[idx]
                    else None
                )
                if conv is None and rec is None:
                    continue
                kernel = int(conv.shape[-1]) if conv is not None else 0
                states.append(
                    StateTensor(
                        index,
                        idx,
                        (*(int(d) for d in conv.shape[1:-1]), kernel - 1)
                        if conv is not None
                        else None,
                        kernel,
                        tuple(int(d) for d in rec.shape[1:]) if rec is not None else None,
                        dtype_name(conv.dtype) if conv is not None else None,
                        dtype_name(rec.dtype) if rec is not None else None,
                    )
                )
    if not attention and not states:
        raise ConfigError("the model's cache holds neither attention KV nor recurrent states")
    return CacheLayout(tuple(attention), tuple(states), len(cache.layers))


def engine_spec(directory: Path, layout: CacheLayout, dtype: str) -> tuple[ModelSpec, list[str]]:
    """The config's spec with every group's bytes checked against the measured tensors; a group
    that differs is re-sized to what the engine really stores (noted)."""
    rec_dtypes = {s.rec_dtype for s in layout.states if s.rec_dtype}
    conv_dtypes = {s.conv_dtype for s in layout.states if s.conv_dtype}
    state_dtype = rec_dtypes.pop() if len(rec_dtypes) == 1 else None
    conv_dtype = conv_dtypes.pop() if len(conv_dtypes) == 1 else None
    spec = ModelSpec.from_hf_config(
        directory, dtype=dtype, state_dtype=state_dtype, conv_dtype=conv_dtype
    )
    notes: list[str] = []
    width = 8 if dtype == "float64" else 4
    groups: list[LayerGroup] = []
    for group in spec.groups:
        if isinstance(group, FullAttentionGroup | SlidingWindowGroup):
            layers = layout.attention_of(group.kind)
            if not layers:
                raise ConfigError(
                    f"{directory}: the config has {group.kind} layers, the model none"
                )
            per_token = {a.elements_per_token for a in layers}
            if len(per_token) > 1:
                raise ConfigError(f"{directory}: {group.kind} layers with different KV shapes")
            measured = per_token.pop() * width
            if measured != group.kv_bytes_per_token_per_layer or len(layers) != group.layers:
                notes.append(
                    f"{group.kind}: config says {group.layers} layer(s) x "
                    f"{group.kv_bytes_per_token_per_layer} B/token, the model caches "
                    f"{len(layers)} x {measured} B/token; accounting uses the latter"
                )
                group = replace(
                    group, layers=len(layers), latent_dim=measured // width, dtype_bytes=width
                )
            groups.append(group)
        else:
            groups.append(_recurrent_group(directory, group, layout, notes))
    kinds = {g.kind for g in groups}
    for kind in ("full", "swa"):
        if layout.attention_of(kind) and kind not in kinds:
            raise ConfigError(f"{directory}: the model has {kind} layers the config does not list")
    if layout.states and "recurrent" not in kinds:
        raise ConfigError(f"{directory}: the model has recurrent layers the config does not list")
    return replace(spec, groups=tuple(groups)), notes


def _recurrent_group(
    directory: Path, group: RecurrentGroup, layout: CacheLayout, notes: list[str]
) -> RecurrentGroup:
    layers = layout.recurrent_layers
    if not layers:
        raise ConfigError(f"{directory}: the config has recurrent layers, the model none")
    per_layer: dict[int, tuple[int, int]] = {}
    for s in layout.states:
        conv_b = s.conv_elements * (DTYPE_BYTES[s.conv_dtype] if s.conv_dtype else 0)
        rec_b = s.rec_elements * (DTYPE_BYTES[s.rec_dtype] if s.rec_dtype else 0)
        conv0, rec0 = per_layer.get(s.layer, (0, 0))
        per_layer[s.layer] = (conv0 + conv_b, rec0 + rec_b)
    sizes = set(per_layer.values())
    if len(sizes) > 1:
        raise ConfigError(f"{directory}: recurrent layers with different state shapes")
    conv_bytes, rec_bytes = sizes.pop()
    if (
        conv_bytes != group.conv_state_bytes
        or rec_bytes != group.recurrent_state_bytes
        or len(layers) != group.layers
    ):
        notes.append(
            f"recurrent: config says {group.layers} layer(s) x "
            f"{group.recurrent_state_bytes}+{group.conv_state_bytes} B, the model keeps "
            f"{len(layers)} x {rec_bytes}+{conv_bytes} B; accounting uses the latter"
        )
        group = replace(
            group,
            layers=len(layers),
            recurrent_state_bytes=rec_bytes,
            conv_state_bytes=conv_bytes,
        )
    return group
