"""Parameter counts (``estimate_params``) are rebuilt from the spec, which keeps only what the
cache needs: projections per layer group, active MLP parameters per token, hidden and vocab
sizes. Norms, biases, conv taps and gate vectors are ignored (well under 1% for the built-in
models). The embedding and the LM head are ``vocab * hidden`` each unless tied. Total
parameters need the MoE shape (``MoEShape``), which a spec does not hold: the built-in MoE
models have theirs in ``NAMED_MOE`` (derived from the same published ``config.json`` fields
``hycache.spec.named`` uses); for other models pass one, or the model is treated as dense
(total = active). Qwen3-Next-80B-A3B comes out at 79.7B total / 3.87B active parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from hycache.errors import ConfigError
from hycache.spec.model import ModelSpec


@dataclass(frozen=True, kw_only=True)
class MoEShape:
    """The routed-expert part of a model's MLPs.

    ``experts``: routed experts per MoE layer (E); ``experts_per_token``: routed experts each
    token uses (k); ``routed_params_per_token``: routed-expert parameters one token multiplies,
    summed over all MoE layers (``moe_layers * k * params_per_expert``; shared experts and
    routers are not routed and stay in the dense part).
    """

    experts: int
    experts_per_token: int
    routed_params_per_token: int

    def __post_init__(self) -> None:
        for field in ("experts", "experts_per_token", "routed_params_per_token"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"MoEShape: '{field}' must be a positive int, got {value!r}")
        if self.experts_per_token > self.experts:
            raise ConfigError(
                f"MoEShape: experts_per_token {self.experts_per_token} > experts {self.experts}"
            )

    @property
    def routed_params_total(self) -> float:
        """All routed-expert parameters: ``routed_params_per_token * E / k``."""
        return self.routed_params_per_token * self.experts / self.experts_per_token

    def coverage(self, tokens: int) -> float:
        """Expected share of experts ``tokens`` tokens touch: ``1 - (1 - k/E) ** tokens``."""
        if tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens


def _cfg_int(cfg: Mapping[str, object], *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    if default is None:
        raise ConfigError(f"MoE config: missing integer field {keys[0]!r}")
    return default


def moe_shape_from_hf_config(config: Mapping[str, object]) -> MoEShape | None:
    """The MoE shape of a HF ``config.json`` dict; None for a dense model or another type.

    Supports the MoE families ``hycache.spec.hf.parse`` parses: qwen3_next / qwen3_5_moe (gated
    experts of ``moe_intermediate_size``, every ``decoder_sparse_step``-th layer not in
    ``mlp_only_layers``), kimi_linear (from ``first_k_dense_replace`` every ``moe_layer_freq``-th
    layer), nemotron_h (``E`` entries of ``hybrid_override_pattern``, ungated relu2 experts on
    the hidden state or ``moe_latent_size``), jamba (``i % expert_layer_period ==
    expert_layer_offset``, experts of ``intermediate_size``) and gpt_oss (every layer).
    """
    model_type = config.get("model_type")
    text = config.get("text_config")
    cfg: Mapping[str, object] = text if isinstance(text, Mapping) else config
    if model_type in ("qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"):
        if "num_experts" not in cfg:
            return None
        n, hidden = _cfg_int(cfg, "num_hidden_layers"), _cfg_int(cfg, "hidden_size")
        raw_dense = cfg.get("mlp_only_layers")
        dense = (
            {i for i in raw_dense if isinstance(i, int)} if isinstance(raw_dense, list) else set()
        )
        step = _cfg_int(cfg, "decoder_sparse_step", default=1)
        layers = sum(1 for i in range(n) if i not in dense and (i + 1) % step == 0)
        experts, top_k = _cfg_int(cfg, "num_experts"), _cfg_int(cfg, "num_experts_per_tok")
        per_expert = 3 * hidden * _cfg_int(cfg, "moe_intermediate_size")
    elif model_type == "kimi_linear":
        n, hidden = _cfg_int(cfg, "num_hidden_layers"), _cfg_int(cfg, "hidden_size")
        first = _cfg_int(cfg, "first_k_dense_replace", default=1)
        freq = _cfg_int(cfg, "moe_layer_freq", default=1)
        layers = sum(1 for i in range(n) if i >= first and i % freq == 0)
        experts = _cfg_int(cfg, "num_experts", "num_local_experts")
        top_k = _cfg_int(cfg, "num_experts_per_token", "num_experts_per_tok")
        per_expert = 3 * hidden * _cfg_int(cfg, "moe_intermediate_size")
    elif model_type == "nemotron_h":
        pattern = cfg.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or "E" not in pattern:
            return None
        layers = pattern.count("E")
        width = _cfg_int(cfg, "moe_latent_size", default=0) or _cfg_int(cfg, "hidden_size")
        experts, top_k = _cfg_int(cfg, "n_routed_experts"), _cfg_int(cfg, "num_experts_per_tok")
        per_expert = 2 * width * _cfg_int(cfg, "moe_intermediate_size")
    elif model_type == "jamba":
        n, hidden = _cfg_int(cfg, "num_hidden_layers"), _cfg_int(cfg, "hidden_size")
        period = _cfg_int(cfg, "expert_layer_period", default=2)
        offset = _cfg_int(cfg, "expert_layer_offset", default=1)
        layers = sum(1 for i in range(n) if i % period == offset)
        experts, top_k = _cfg_int(cfg, "num_experts"), _cfg_int(cfg, "num_experts_per_tok")
        per_expert = 3 * hidden * _cfg_int(cfg, "intermediate_size")
    elif model_type == "gpt_oss":
        layers = _cfg_int(cfg, "num_hidden_layers")
        experts = _cfg_int(cfg, "num_local_experts")
        top_k = _cfg_int(cfg, "num_experts_per_tok", "experts_per_token")
        per_expert = 3 * _cfg_int(cfg, "hidden_size") * _cfg_int(cfg, "intermediate_size")
    else:
        return None
    if layers == 0 or experts <= 1:
        return None
    return MoEShape(
        experts=experts,
        experts_per_token=top_k,
        routed_params_per_token=layers * top_k * per_expert,
    )


def _named_moe() -> Mapping[str, MoEShape]:
    from hycache.spec.named import HF_CONFIGS

    shapes = {name: moe_shape_from_hf_config(cfg) for name, cfg in HF_CONFIGS.items()}
    return MappingProxyType({name: s for name, s in shapes.items() if s is not None})


NAMED_MOE: Mapping[str, MoEShape] = _named_moe()
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
    spec: ModelSpec, moe: MoEShape | None = None, *, tied_embeddings: bool = False
) -> ParamEstimate:
    """Parameter counts of ``spec``: ``layers * proj_params`` per group, the spec's active MLP
    parameters, ``vocab * hidden`` for the embedding and (unless tied) the LM head. With
    ``moe``, total MLP = active - routed per token + all routed experts; without, total =
    active (dense)."""
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
