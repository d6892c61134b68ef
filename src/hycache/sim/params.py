"""Parameter counts (``estimate_params``) are rebuilt from the spec, which keeps only what the
cache needs: projections per layer group, active MLP parameters per token, hidden and vocab
sizes, and the MoE shape (``ModelSpec.moe``: routed experts, top-k, routed parameters per
token) of a MoE model. Norms, biases, conv taps and gate vectors are ignored (well under 1% for
the built-in models). The embedding and the LM head are ``vocab * hidden`` each unless tied.
A spec from ``ModelSpec.from_hf_config`` carries the same MoE shape as the built-in spec of that
model, so both cost the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from hycache.errors import ConfigError
from hycache.spec.hf.parse import SUPPORTED_MODEL_TYPES, parse_hf_config
from hycache.spec.model import NAMED_SPECS, ModelSpec
from hycache.spec.moe import MoEShape

__all__ = [
    "NAMED_MOE",
    "MoEShape",
    "ParamEstimate",
    "estimate_params",
    "moe_shape_from_hf_config",
]


def moe_shape_from_hf_config(config: Mapping[str, object]) -> MoEShape | None:
    """The MoE shape of a HF ``config.json`` dict (what ``ModelSpec.from_hf_config`` gives the
    spec); None for a dense model or a model type hycache does not parse. SpecError for a
    supported type whose fields cannot be used."""
    if config.get("model_type") not in SUPPORTED_MODEL_TYPES:
        return None
    # the dtype does not change the MoE shape; fixing it spares configs without one
    return parse_hf_config(config, dtype="bfloat16").moe


NAMED_MOE: Mapping[str, MoEShape] = MappingProxyType(
    {name: spec.moe for name, spec in NAMED_SPECS.items() if spec.moe is not None}
)
"""MoE shapes of the built-in MoE specs (``ModelSpec.named``), by spec name."""


@dataclass(frozen=True, kw_only=True)
class ParamEstimate:
    """Parameter counts rebuilt from a spec (see the module docstring for what is ignored).

    ``mlp_active`` / ``mlp_total``: MLP parameters one token multiplies / that exist;
    ``mlp_routed_total``: the routed-expert part of ``mlp_total`` (0 for a dense model).
    """

    attention: int
    recurrent: int
    mlp_active: int
    mlp_total: int
    mlp_routed_total: int
    embedding: int
    lm_head: int

    @property
    def active(self) -> int:
        """Parameters one token uses, embedding included."""
        return self.attention + self.recurrent + self.mlp_active + self.embedding + self.lm_head

    @property
    def total(self) -> int:
        """All parameters (the embedding once when tied)."""
        return self.attention + self.recurrent + self.mlp_total + self.embedding + self.lm_head

    @property
    def dense_active(self) -> int:
        """Parameters every token multiplies (no embedding, no routed experts): what any
        step with at least one token reads in full."""
        return self.attention + self.recurrent + self.mlp_dense_part + self.lm_head

    @property
    def mlp_dense_part(self) -> int:
        """Non-routed MLP parameters (dense MLPs, shared experts, routers)."""
        return self.mlp_total - self.mlp_routed_total


def estimate_params(
    spec: ModelSpec,
    moe: MoEShape | Literal["spec"] | None = "spec",
    *,
    tied_embeddings: bool = False,
) -> ParamEstimate:
    """Parameter counts of ``spec``: ``layers * proj_params`` per group, the spec's active MLP
    parameters, ``vocab * hidden`` for the embedding and (unless tied) the LM head. ``moe``:
    the MoE shape to use, ``"spec"`` (default) for ``spec.moe``, None to count the model as
    dense. With a shape, total MLP = active - routed per token + all routed experts; without,
    total = active."""
    if moe == "spec":
        moe = spec.moe
    attention = sum(g.layers * g.projection_params(spec.hidden_size) for g in spec.attention_groups)
    rec = spec.recurrent
    recurrent = rec.layers * rec.proj_params_per_layer if rec is not None else 0
    mlp_active = spec.active_mlp_params_per_token
    routed_total = 0
    mlp_total = mlp_active
    if moe is not None:
        if moe.routed_params_per_token > mlp_active:
            raise ConfigError(
                f"{spec.name}: MoE routed params per token {moe.routed_params_per_token:,} exceed "
                f"the spec's active MLP params {mlp_active:,}"
            )
        routed_total = round(moe.routed_params_total)
        mlp_total = mlp_active - moe.routed_params_per_token + routed_total
    table = spec.vocab_size * spec.hidden_size
    return ParamEstimate(
        attention=attention,
        recurrent=recurrent,
        mlp_active=mlp_active,
        mlp_total=mlp_total,
        mlp_routed_total=routed_total,
        embedding=table,
        lm_head=0 if tied_embeddings else table,
    )
