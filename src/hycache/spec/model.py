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

``ModelSpec.from_hf_config`` builds a spec from a HF ``config.json`` and ``ModelSpec.named`` /
``NAMED_SPECS`` hold the built-in specs. Both turn the ``SpecFields`` that
``hycache.spec.hf.parse`` and ``hycache.spec.named`` produce into specs; neither of those imports
this module, so ``hycache.spec`` has no import cycle and no registry to fill.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hycache.errors import SpecError
from hycache.spec.fields import SpecFields
from hycache.spec.flops import PrefillFlops
from hycache.spec.groups import (
    CONV_FLOPS_PER_ELEMENT,
    DTYPE_BYTES,
    STATE_FLOPS_PER_ELEMENT,
    FullAttentionGroup,
    LayerGroup,
    RecurrentGroup,
    SlidingWindowGroup,
    _require_positive,
    canonical_dtype,
    dtype_bytes,
)
from hycache.spec.hf.parse import parse_hf_config
from hycache.spec.moe import MoEShape
from hycache.spec.named import named_spec_fields

# the groups are part of the spec's interface
__all__ = [
    "CONV_FLOPS_PER_ELEMENT",
    "DTYPE_BYTES",
    "NAMED_SPECS",
    "STATE_FLOPS_PER_ELEMENT",
    "FullAttentionGroup",
    "LayerGroup",
    "MoEShape",
    "ModelSpec",
    "RecurrentGroup",
    "SlidingWindowGroup",
    "canonical_dtype",
    "dtype_bytes",
    "load_spec",
]


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """What hycache needs to know about a model: its layer groups, sizes and compute.

    ``groups`` holds at most one group per kind; no group has more layers than ``num_layers``
    (decoder layers). ``active_mlp_params_per_token``: MLP / MoE parameters one token goes
    through, summed over all layers (routed top-k experts, shared experts and routers).
    ``moe``: the routed-expert shape of a MoE model (None for a dense one); its routed
    parameters per token are part of ``active_mlp_params_per_token``.
    """

    name: str
    groups: tuple[LayerGroup, ...]
    hidden_size: int
    vocab_size: int
    active_mlp_params_per_token: int
    num_layers: int
    moe: MoEShape | None = None

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
        if self.moe is not None:
            if not isinstance(self.moe, MoEShape):
                raise SpecError(f"{owner}: 'moe' must be a MoEShape or None", field="moe")
            if self.moe.routed_params_per_token > self.active_mlp_params_per_token:
                raise SpecError(
                    f"{owner}: MoE routed params per token {self.moe.routed_params_per_token:,} "
                    f"exceed active_mlp_params_per_token {self.active_mlp_params_per_token:,}",
                    field="moe",
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

        Sum of every group's ``prefill_flops`` (in the groups' order) plus the MLP ``2 *
        active_mlp_params_per_token * new``. Embedding look-ups and the LM head (one token per
        prefill) are not counted. ValueError when a length is negative.
        """
        return self.prefill_flops_table().prefill_flops(cached, new)

    def prefill_flops_table(self) -> PrefillFlops:
        """The coefficients ``prefill_flops`` sums, as one object: hot paths build it once and
        call it, with no call per group on this dataclass."""
        terms = tuple(g.flops_terms(self.hidden_size) for g in self.groups)
        return PrefillFlops(terms, self.active_mlp_params_per_token)

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
    def from_fields(cls, fields: SpecFields) -> ModelSpec:
        """The spec of ``fields`` (validated; ``layer_kinds`` is not kept)."""
        return cls(
            name=fields.name,
            groups=fields.groups,
            hidden_size=fields.hidden_size,
            vocab_size=fields.vocab_size,
            active_mlp_params_per_token=fields.active_mlp_params_per_token,
            num_layers=fields.num_layers,
            moe=fields.moe,
        )

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

        ``dtype`` overrides the config's model dtype (required when the config has none and its
        family has no default). See ``hycache.spec.hf.parse`` for the supported model types and
        the dtype rules. SpecError naming the file and field for a config it cannot use.
        """
        return cls.from_fields(
            parse_hf_config(
                source, name=name, dtype=dtype, state_dtype=state_dtype, conv_dtype=conv_dtype
            )
        )

    @classmethod
    def named(cls, name: str) -> ModelSpec:
        """A built-in spec by name; SpecError listing the known names for an unknown one."""
        try:
            return NAMED_SPECS[name]
        except KeyError:
            known = ", ".join(sorted(NAMED_SPECS))
            raise SpecError(f"unknown model spec {name!r} (known: {known})", field="name") from None


NAMED_SPECS: Mapping[str, ModelSpec] = MappingProxyType(
    {name: ModelSpec.from_fields(fields) for name, fields in named_spec_fields().items()}
)
"""Built-in specs by name (read-only; see ``hycache.spec.named``)."""


def load_spec(name_or_path: str | os.PathLike[str], *, dtype: str | None = None) -> ModelSpec:
    """A built-in spec by name, else a spec from a ``config.json`` path (or its directory);
    ``dtype`` overrides a config's model dtype (a built-in spec has its own: SpecError).

    Raises SpecError when it is neither a known name nor an existing path.
    """
    key = os.fspath(name_or_path)
    if key in NAMED_SPECS:
        if dtype is not None:
            raise SpecError(
                f"{key}: a built-in spec keeps its dtype; pass a config.json", field="dtype"
            )
        return NAMED_SPECS[key]
    if not os.path.exists(key):
        known = ", ".join(sorted(NAMED_SPECS))
        raise SpecError(f"{key}: neither a built-in model spec ({known}) nor an existing path")
    return ModelSpec.from_hf_config(key, dtype=dtype)
