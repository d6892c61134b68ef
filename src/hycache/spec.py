"""Model specifications: layer groups, their cache bytes and prefill FLOPs.

A hybrid model is described as at most one group of each kind:

- ``FullAttentionGroup`` (kind ``"full"``): append-only KV, any prefix reusable;
- ``SlidingWindowGroup`` (kind ``"swa"``): KV of the last ``window`` positions only;
- ``RecurrentGroup`` (kind ``"recurrent"``): one fixed-size state per sequence and layer
  (Gated DeltaNet, Mamba2, Kimi Delta Attention, Mamba1).

A group stands for all layers of that kind; layers of a kind share one shape. Parallel hybrids
(Falcon-H1) have an attention and a recurrent group whose layers are the same decoder layers.

FLOPs count a multiply-add as 2. Every FLOP formula here is a sum over the new token positions,
so ``prefill_flops(0, a) + prefill_flops(a, b) == prefill_flops(0, a + b)``: the compute a cache hit
of length ``p`` saves is exactly ``prefill_flops(0, p)``.

``ModelSpec.from_hf_config`` (in ``hycache.spec_hf``) builds a spec from a HF ``config.json``;
``ModelSpec.named`` / ``NAMED_SPECS`` (in ``hycache.spec_named``) hold built-in specs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from hycache.errors import SpecError

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


def _check_prefill_args(cached: int, new: int) -> None:
    """Prefill lengths are token counts; a negative one is a caller bug (ValueError)."""
    if cached < 0 or new < 0:
        raise ValueError(f"prefill lengths must be >= 0, got cached={cached}, new={new}")


def _sum_range(lo: int, hi: int) -> int:
    """Sum of the integers in [lo, hi] (0 when empty)."""
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


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
        """Sum over the new tokens of the number of keys each attends to (itself included)."""
        raise NotImplementedError

    def prefill_flops(self, cached: int, new: int, hidden_size: int) -> float:
        """FLOPs to prefill ``new`` tokens after ``cached`` ones, over all layers of the group.

        ``layers * (2 * projection_params * new + 4 * q_heads * head_dim * attended_keys)``:
        scores (QK^T) and weighted values (AV) cost ``2 * q_heads * head_dim`` each per key.
        """
        _check_prefill_args(cached, new)
        proj = 2 * self.projection_params(hidden_size) * new
        attn = 4 * self.q_heads * self.head_dim * self.attended_keys(cached, new)
        return float(self.layers * (proj + attn))


@dataclass(frozen=True, kw_only=True)
class FullAttentionGroup(_AttentionGroup):
    """Full (causal, global) attention layers: the token at position i attends to i + 1 keys."""

    @property
    def kind(self) -> Literal["full"]:
        return "full"

    def attended_keys(self, cached: int, new: int) -> int:
        """``sum_{i=cached}^{cached+new-1} (i + 1) = new * cached + new * (new + 1) / 2``."""
        return new * cached + new * (new + 1) // 2


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

    def attended_keys(self, cached: int, new: int) -> int:
        """``sum_{p=cached+1}^{cached+new} min(p, window)`` in closed form."""
        lo, hi, w = cached + 1, cached + new, self.window
        below = _sum_range(lo, min(hi, w))
        above = max(0, hi - max(lo, w + 1) + 1) * w
        return below + above


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

    def prefill_flops(self, cached: int, new: int, hidden_size: int) -> float:
        """FLOPs to prefill ``new`` tokens, over all layers; independent of ``cached``.

        ``layers * new * (2 * proj_params_per_layer + 6 * state_elements + 2 * conv_elements)``
        (see STATE_FLOPS_PER_ELEMENT, CONV_FLOPS_PER_ELEMENT). ``hidden_size`` is unused; it keeps
        the signature shared with attention groups.
        """
        _check_prefill_args(cached, new)
        state_elems = self.recurrent_state_bytes // DTYPE_BYTES[self.state_dtype]
        conv_elems = self.conv_state_bytes // DTYPE_BYTES[self.conv_dtype]
        per_token = (
            2 * self.proj_params_per_layer
            + STATE_FLOPS_PER_ELEMENT * state_elems
            + CONV_FLOPS_PER_ELEMENT * conv_elems
        )
        return float(self.layers * new * per_token)


LayerGroup = FullAttentionGroup | SlidingWindowGroup | RecurrentGroup


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What hycache needs to know about a model: its layer groups, sizes and compute.

    ``groups`` holds at most one group per kind; no group has more layers than ``num_layers``
    (decoder layers). ``active_mlp_params_per_token``: MLP / MoE parameters one token goes
    through, summed over all layers (routed top-k experts, shared experts and routers).
    """

    name: str
    groups: tuple[LayerGroup, ...]
    hidden_size: int
    vocab_size: int
    active_mlp_params_per_token: int
    num_layers: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "groups", tuple(self.groups))
        owner = f"model spec {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"{owner}: 'name' must be a non-empty string", field="name")
        _require_positive(
            owner,
            hidden_size=self.hidden_size,
            vocab_size=self.vocab_size,
            num_layers=self.num_layers,
        )
        if (
            isinstance(self.active_mlp_params_per_token, bool)
            or self.active_mlp_params_per_token < 0
        ):
            raise SpecError(
                f"{owner}: 'active_mlp_params_per_token' must be >= 0",
                field="active_mlp_params_per_token",
            )
        if not self.groups:
            raise SpecError(f"{owner}: no layer groups", field="groups")
        kinds = [g.kind for g in self.groups]
        if len(set(kinds)) != len(kinds):
            raise SpecError(f"{owner}: more than one group of a kind: {kinds}", field="groups")
        for g in self.groups:
            if g.layers > self.num_layers:
                raise SpecError(
                    f"{owner}: {g.kind} group has {g.layers} layers > num_layers {self.num_layers}",
                    field="groups",
                )

    @property
    def full(self) -> FullAttentionGroup | None:
        """The full-attention group, or None."""
        return next((g for g in self.groups if isinstance(g, FullAttentionGroup)), None)

    @property
    def swa(self) -> SlidingWindowGroup | None:
        """The sliding-window group, or None."""
        return next((g for g in self.groups if isinstance(g, SlidingWindowGroup)), None)

    @property
    def recurrent(self) -> RecurrentGroup | None:
        """The recurrent group, or None."""
        return next((g for g in self.groups if isinstance(g, RecurrentGroup)), None)

    @property
    def attention_groups(self) -> tuple[FullAttentionGroup | SlidingWindowGroup, ...]:
        """The attention groups (full first, then sliding window)."""
        return tuple(g for g in (self.full, self.swa) if g is not None)

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token adds over every attention layer (full and sliding window)."""
        return sum(g.kv_bytes_per_token for g in self.attention_groups)

    @property
    def state_bytes(self) -> int:
        """Bytes of one sequence's recurrent checkpoint over all recurrent layers (0 if none)."""
        rec = self.recurrent
        return rec.state_bytes if rec is not None else 0

    def prefill_flops(self, cached: int, new: int) -> float:
        """FLOPs to prefill ``new`` tokens after ``cached`` cached ones.

        Sum of every group's ``prefill_flops`` plus the MLP ``2 * active_mlp_params_per_token *
        new``. Embedding look-ups and the LM head (one token per prefill) are not counted.
        ValueError when a length is negative.
        """
        _check_prefill_args(cached, new)
        layers = sum(g.prefill_flops(cached, new, self.hidden_size) for g in self.groups)
        return layers + 2.0 * self.active_mlp_params_per_token * new

    def state_to_kv_tokens(self) -> int | None:
        """How many tokens of one attention layer's KV weigh as much as one recurrent layer's
        checkpoint: ``floor(state_bytes_per_layer / kv_bytes_per_token_per_layer)``, using the
        full-attention group (the sliding-window one if there is no full group). None when the
        model lacks recurrent or attention layers."""
        rec, attn = self.recurrent, self.full or self.swa
        if rec is None or attn is None:
            return None
        return rec.state_bytes_per_layer // attn.kv_bytes_per_token_per_layer

    @classmethod
    def from_hf_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, object],
        *,
        name: str | None = None,
        dtype: str | None = None,
        state_dtype: str | None = None,
        conv_dtype: str | None = None,
    ) -> ModelSpec:
        """Build a spec from a HF config: a ``config.json`` path, its directory, or a dict.

        See ``hycache.spec_hf.parse_hf_config`` for the supported model types and dtype rules.
        """
        from hycache.spec_hf import parse_hf_config

        return parse_hf_config(
            source, name=name, dtype=dtype, state_dtype=state_dtype, conv_dtype=conv_dtype
        )

    @classmethod
    def named(cls, name: str) -> ModelSpec:
        """A built-in spec by name; SpecError listing the known names for an unknown one."""
        try:
            return NAMED_SPECS[name]
        except KeyError:
            known = ", ".join(sorted(NAMED_SPECS))
            raise SpecError(f"unknown model spec {name!r} (known: {known})", field="name") from None


class _NamedSpecs(Mapping[str, ModelSpec]):
    """Read-only mapping of the built-in specs, built from ``hycache.spec_named`` on first use
    (that module imports this one, so it cannot be imported at module load)."""

    def __init__(self) -> None:
        self._specs: Mapping[str, ModelSpec] | None = None

    def _load(self) -> Mapping[str, ModelSpec]:
        if self._specs is None:
            from hycache.spec_named import build_named_specs

            self._specs = MappingProxyType(build_named_specs())
        return self._specs

    def __getitem__(self, key: str) -> ModelSpec:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())


NAMED_SPECS: Mapping[str, ModelSpec] = _NamedSpecs()
"""Built-in specs by name (see ``hycache.spec_named``)."""


def load_spec(name_or_path: str | os.PathLike[str]) -> ModelSpec:
    """A built-in spec by name, else a spec from a ``config.json`` path (or its directory).

    Raises SpecError when it is neither a known name nor an existing path.
    """
    key = os.fspath(name_or_path)
    if key in NAMED_SPECS:
        return NAMED_SPECS[key]
    if not os.path.exists(key):
        known = ", ".join(sorted(NAMED_SPECS))
        raise SpecError(f"{key}: neither a built-in model spec ({known}) nor an existing path")
    return ModelSpec.from_hf_config(key)
