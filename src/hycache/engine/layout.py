"""What a loaded model's cache holds, measured: ``measure_layout`` runs a two-token probe
through a fresh ``DynamicCache`` and records, per decoder layer, the attention K/V per-token
shapes or the recurrent conv window and state shapes (``CacheLayout``); ``engine_spec``
re-sizes the ``ModelSpec`` parsed from ``config.json`` to those measured bytes, so the pool's
budget bounds the engine's real tensors."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hycache.errors import ConfigError
from hycache.spec.model import (
    DTYPE_BYTES,
    FullAttentionGroup,
    LayerGroup,
    ModelSpec,
    RecurrentGroup,
    SlidingWindowGroup,
)

if TYPE_CHECKING:
    import torch


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
