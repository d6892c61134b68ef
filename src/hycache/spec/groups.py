"""Layer groups of a model spec: ``FullAttentionGroup``, ``SlidingWindowGroup`` and
``RecurrentGroup``, with their cache bytes and prefill FLOPs (the formulas are summed over the
new positions; see ``hycache.spec.model``), and the dtype sizes they are stored in."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from hycache.errors import SpecError
from hycache.spec.flops import attended_keys, check_prefill_args, group_flops

GroupKind = Literal["full", "swa", "recurrent"]
RecurrentMixer = Literal["gdn", "mamba2", "kda", "mamba"]
"""Recurrent layer families: Gated DeltaNet, Mamba2 (SSD), Kimi Delta Attention, Mamba1."""

DTYPE_BYTES: Mapping[str, int] = MappingProxyType(
    {
        "float64": 8,
        "float32": 4,
        "bfloat16": 2,
        "float16": 2,
        "float8_e4m3fn": 1,
        "float8_e5m2": 1,
    }
)
"""Bytes per element of the canonical dtype names (torch spelling without ``torch.``)."""

_DTYPE_ALIASES: Mapping[str, str] = MappingProxyType(
    {
        "fp64": "float64",
        "double": "float64",
        "fp32": "float32",
        "float": "float32",
        "fp16": "float16",
        "half": "float16",
        "bf16": "bfloat16",
        "fp8": "float8_e4m3fn",
    }
)

STATE_FLOPS_PER_ELEMENT = 6
"""FLOPs per recurrent-state element per token: decay, rank-1 update and read-out, 2 each."""

CONV_FLOPS_PER_ELEMENT = 2
"""FLOPs per conv-window element per token (one multiply-add per tap)."""


def canonical_dtype(name: str, *, field: str = "dtype") -> str:
    """Return the canonical spelling of a dtype name ("torch.bfloat16", "bf16" -> "bfloat16").

    Raises SpecError naming ``field`` for an unknown name.
    """
    key = name.strip().lower().removeprefix("torch.")
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPE_BYTES:
        known = ", ".join(DTYPE_BYTES)
        raise SpecError(f"unknown dtype {name!r} in field '{field}' (known: {known})", field=field)
    return key


def dtype_bytes(name: str, *, field: str = "dtype") -> int:
    """Bytes per element of dtype ``name`` (any spelling ``canonical_dtype`` accepts)."""
    return DTYPE_BYTES[canonical_dtype(name, field=field)]


def _require_positive(owner: str, **values: int | None) -> None:
    """Raise SpecError unless every given value is None or a positive int (bools rejected)."""
    for field, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(
                f"{owner}: '{field}' must be a positive int, got {value!r}", field=field
            )


@dataclass(frozen=True, kw_only=True)
class _AttentionGroup:
    """Fields and formulas shared by full and sliding-window attention groups.

    ``latent_dim``: when set (MLA, e.g. Kimi Linear), each layer caches one compressed latent of
    this many elements per token instead of K and V heads. ``proj_params_per_layer``: when set,
    replaces the standard q/k/v/o projection count ``hidden * (2*q_heads + 2*kv_heads) * head_dim``.
    """

    layers: int
    q_heads: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    latent_dim: int | None = None
    proj_params_per_layer: int | None = None

    def __post_init__(self) -> None:
        _require_positive(
            type(self).__name__,
            layers=self.layers,
            q_heads=self.q_heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            dtype_bytes=self.dtype_bytes,
            latent_dim=self.latent_dim,
            proj_params_per_layer=self.proj_params_per_layer,
        )

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        """Cache bytes one token adds to one layer: ``2 * kv_heads * head_dim * dtype_bytes`` (K and
        V), or ``latent_dim * dtype_bytes`` for MLA."""
        if self.latent_dim is not None:
            return self.latent_dim * self.dtype_bytes
        return 2 * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Cache bytes one token adds over all layers of the group."""
        return self.kv_bytes_per_token_per_layer * self.layers

    def projection_params(self, hidden_size: int) -> int:
        """Projection parameters of one layer (q, k, v, o unless ``proj_params_per_layer``)."""
        if self.proj_params_per_layer is not None:
            return self.proj_params_per_layer
        return hidden_size * (2 * self.q_heads + 2 * self.kv_heads) * self.head_dim

    def attended_keys(self, cached: int, new: int) -> int:
        """Sum over the new tokens of the number of keys each attends to (itself included;
        ``hycache.spec.flops.attended_keys`` under ``attention_window``)."""
        return attended_keys(cached, new, self.attention_window)

    @property
    def attention_window(self) -> int | None:
        """Keys a token attends to at most (None: all before it)."""
        raise NotImplementedError

    def flops_terms(self, hidden_size: int) -> tuple[int, int, int | None]:
        """``(per_new, per_key, window)`` of ``hycache.spec.flops.group_flops``:
        ``layers * 2 * projection_params`` per new token and ``layers * 4 * q_heads *
        head_dim`` per attended key (scores QK^T and weighted values AV cost ``2 * q_heads *
        head_dim`` each per key)."""
        per_new = self.layers * 2 * self.projection_params(hidden_size)
        return per_new, self.layers * 4 * self.q_heads * self.head_dim, self.attention_window

    def prefill_flops(self, cached: int, new: int, hidden_size: int) -> float:
        """FLOPs to prefill ``new`` tokens after ``cached`` ones, over all layers of the group:
        ``layers * (2 * projection_params * new + 4 * q_heads * head_dim * attended_keys)``
        (``flops_terms``)."""
        check_prefill_args(cached, new)
        return group_flops(*self.flops_terms(hidden_size), cached, new)


@dataclass(frozen=True, kw_only=True)
class FullAttentionGroup(_AttentionGroup):
    """Full (causal, global) attention layers: the token at position i attends to i + 1 keys."""

    @property
    def kind(self) -> Literal["full"]:
        return "full"

    @property
    def attention_window(self) -> int | None:
        return None


@dataclass(frozen=True, kw_only=True)
class SlidingWindowGroup(_AttentionGroup):
    """Sliding-window attention layers: position i attends to ``min(i + 1, window)`` keys, the
    query included (transformers' sliding-window mask). Only the last ``window`` tokens' KV is
    needed to continue."""

    window: int

    def __post_init__(self) -> None:
        super().__post_init__()
        _require_positive(type(self).__name__, window=self.window)

    @property
    def kind(self) -> Literal["swa"]:
        return "swa"

    @property
    def attention_window(self) -> int | None:
        return self.window


@dataclass(frozen=True, kw_only=True)
class RecurrentGroup:
    """Recurrent layers keeping one fixed-size state per sequence, overwritten per token.

    ``recurrent_state_bytes`` and ``conv_state_bytes`` are PER LAYER; a checkpoint of one layer
    is both (``state_bytes_per_layer``). ``state_dtype`` / ``conv_dtype`` are the dtypes they are
    stored in (the byte counts must be whole multiples of those dtypes' sizes).
    ``proj_params_per_layer`` counts the layer's input/output projections.
    ``kernel_chunk``: tokens between the intermediate states the chunked prefill kernel
    materialises (FLA's GDN and KDA kernels: 64; Mamba2's SSD scan: the config's
    ``chunk_size``). A state at a multiple of it from a prefill chunk's start can be copied
    out of that chunk's forward pass, as SGLang's ``extra_buffer`` does; None (Mamba1's
    selective scan) means only the state at a chunk's end exists.
    """

    layers: int
    mixer: RecurrentMixer
    recurrent_state_bytes: int
    conv_state_bytes: int
    state_dtype: str
    conv_dtype: str
    proj_params_per_layer: int
    kernel_chunk: int | None = None

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _require_positive(
            owner,
            layers=self.layers,
            recurrent_state_bytes=self.recurrent_state_bytes,
            conv_state_bytes=self.conv_state_bytes,
            proj_params_per_layer=self.proj_params_per_layer,
            kernel_chunk=self.kernel_chunk,
        )
        if self.mixer not in ("gdn", "mamba2", "kda", "mamba"):
            raise SpecError(f"{owner}: unknown mixer {self.mixer!r}", field="mixer")
        for field, size in (
            ("state_dtype", self.recurrent_state_bytes),
            ("conv_dtype", self.conv_state_bytes),
        ):
            canonical = canonical_dtype(getattr(self, field), field=field)
            object.__setattr__(self, field, canonical)
            if size % DTYPE_BYTES[canonical]:
                raise SpecError(f"{owner}: {size} bytes is not a whole number of {canonical}")

    @property
    def kind(self) -> Literal["recurrent"]:
        return "recurrent"

    @property
    def state_bytes_per_layer(self) -> int:
        """Bytes of one layer's checkpoint: recurrent state plus conv window."""
        return self.recurrent_state_bytes + self.conv_state_bytes

    @property
    def state_bytes(self) -> int:
        """Bytes of one sequence's checkpoint over all layers of the group."""
        return self.state_bytes_per_layer * self.layers

    def flops_terms(self, hidden_size: int) -> tuple[int, int, int | None]:
        """``(per_new, 0, None)`` of ``hycache.spec.flops.group_flops``: per new token
        ``layers * (2 * proj_params_per_layer + 6 * state_elements + 2 * conv_elements)`` (see
        STATE_FLOPS_PER_ELEMENT, CONV_FLOPS_PER_ELEMENT), whatever ``cached``. ``hidden_size``
        is unused; it keeps the signature shared with attention groups."""
        state_elems = self.recurrent_state_bytes // DTYPE_BYTES[self.state_dtype]
        conv_elems = self.conv_state_bytes // DTYPE_BYTES[self.conv_dtype]
        per_token = (
            2 * self.proj_params_per_layer
            + STATE_FLOPS_PER_ELEMENT * state_elems
            + CONV_FLOPS_PER_ELEMENT * conv_elems
        )
        return self.layers * per_token, 0, None

    def prefill_flops(self, cached: int, new: int, hidden_size: int) -> float:
        """FLOPs to prefill ``new`` tokens, over all layers; independent of ``cached``
        (``flops_terms``)."""
        check_prefill_args(cached, new)
        return group_flops(*self.flops_terms(hidden_size), cached, new)


LayerGroup = FullAttentionGroup | SlidingWindowGroup | RecurrentGroup
