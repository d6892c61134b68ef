"""Roofline cost model of one accelerator serving a hybrid model: FLOPs, bytes, step time.

One engine step runs a batch of prefill chunks and decode tokens together. Its time is the
roofline of the two resources it consumes plus a fixed per-step cost::

    step_time = max(F / (peak_flops * mfu), B / (hbm_bandwidth * mbu)) + step_overhead_s

- ``F`` (FLOPs, a multiply-add counts 2): every prefill chunk's ``spec.prefill_flops(cached,
  new)`` (attention quadratic in the context, sliding window capped at the window, recurrent
  and MLP layers linear in the new tokens) plus, per decoding sequence with ``c`` tokens of
  context, ``spec.prefill_flops(c, 1)`` (the new token attends to ``c + 1`` keys), plus the LM
  head ``2 * vocab * hidden`` once per decode token and once per prefill chunk.
- ``B`` (HBM bytes): the weights the step's tokens touch (``weight_bytes``) plus, per sequence
  in the step, the KV of its context read once (sliding-window layers only the last ``window``
  tokens), the KV of its new tokens written once, and its recurrent state read and written
  once (``2 * spec.state_bytes``).
- ``mfu`` / ``mbu``: the fraction of the datasheet FLOP rate / bandwidth real kernels reach;
  ``step_overhead_s``: scheduling, launch and sampling work that overlaps neither.

Weights touched by ``n`` tokens (``CostModel.weight_bytes``)::

    bytes(n) = wb * (dense_active + routed_total * (1 - (1 - k / E) ** n))

with ``wb`` bytes per parameter, ``dense_active`` every parameter each token multiplies
(attention and recurrent projections, shared experts, routers, dense MLPs, LM head),
``routed_total`` all routed-expert parameters and ``k`` of ``E`` experts routed per token. A
given expert is missed by one token with probability ``1 - k/E`` (uniform, independent
routing), so ``1 - (1 - k/E) ** n`` is the expected share of experts a batch touches: one token
reads exactly its ``k`` experts, a 1,000-token prefill reads nearly all of them. Real routing is
skewed, so this slightly over-counts mid-sized batches. Dense models have ``routed_total = 0``.
The embedding table is not counted: a look-up reads one row per token.

Parameter counts (``estimate_params``) are rebuilt from the spec, which keeps only what the
cache needs: projections per layer group, active MLP parameters per token, hidden and vocab
sizes. Norms, biases, conv taps and gate vectors are ignored (well under 1% for the built-in
models). The embedding and the LM head are ``vocab * hidden`` each unless tied. Total
parameters need the MoE shape (``MoEShape``), which a spec does not hold: the built-in MoE
models have theirs in ``NAMED_MOE`` (derived from the same published ``config.json`` fields
``hycache.spec_named`` uses); for other models pass one, or the model is treated as dense
(total = active). Qwen3-Next-80B-A3B comes out at 79.7B total / 3.87B active parameters.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from hycache.errors import ConfigError
from hycache.spec import ModelSpec

GB = 10**9
TB = 10**12


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """One accelerator as the cost model sees it.

    ``peak_flops``: dense (no 2:4 sparsity) BF16 tensor-core FLOP/s. ``hbm_bandwidth``: device
    memory bandwidth in B/s; ``hbm_bytes``: device memory capacity in bytes.
    ``host_to_device_bandwidth``: host link in B/s, one direction (for host/disk tiers).
    ``mfu``: model FLOPs utilisation prefill reaches, ``mbu``: memory bandwidth utilisation
    decode reaches (both in (0, 1]). ``step_overhead_s``: per engine step time that overlaps
    neither (scheduler, kernel launches, sampling; 2-5 ms in vLLM/SGLang with CUDA graphs).
    """

    name: str
    peak_flops: float
    hbm_bandwidth: float
    hbm_bytes: int
    host_to_device_bandwidth: float
    mfu: float = 0.5
    mbu: float = 0.7
    step_overhead_s: float = 0.003

    def __post_init__(self) -> None:
        for field in ("peak_flops", "hbm_bandwidth", "hbm_bytes", "host_to_device_bandwidth"):
            value = getattr(self, field)
            if isinstance(value, bool) or not value > 0 or not math.isfinite(value):
                raise ConfigError(f"hardware {self.name!r}: '{field}' must be > 0, got {value!r}")
        for field in ("mfu", "mbu"):
            value = getattr(self, field)
            if not 0.0 < value <= 1.0:
                raise ConfigError(
                    f"hardware {self.name!r}: '{field}' must be in (0, 1], got {value!r}"
                )
        if not 0.0 <= self.step_overhead_s < math.inf:
            raise ConfigError(
                f"hardware {self.name!r}: 'step_overhead_s' must be >= 0, "
                f"got {self.step_overhead_s!r}"
            )

    @property
    def effective_flops(self) -> float:
        """FLOP/s prefill sustains: ``peak_flops * mfu``."""
        return self.peak_flops * self.mfu

    @property
    def effective_bandwidth(self) -> float:
        """B/s decode sustains: ``hbm_bandwidth * mbu``."""
        return self.hbm_bandwidth * self.mbu


_PCIE5_X16 = 64 * GB
"""PCIe Gen5 x16, one direction (32 GT/s x 16 lanes, 128b/130b): ~63 GB/s, 50-55 achieved."""

HARDWARE: Mapping[str, Hardware] = MappingProxyType(
    {
        # NVIDIA H100 Tensor Core GPU datasheet, SXM5: BF16 tensor core 1,979 TFLOPS "with
        # sparsity" -> 989 TFLOPS dense; 80 GB HBM3 at 3.35 TB/s; PCIe Gen5 x16 host link.
        "h100": Hardware(
            name="h100",
            peak_flops=989 * TB,
            hbm_bandwidth=3.35 * TB,
            hbm_bytes=80 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
        ),
        # NVIDIA H200 Tensor Core GPU datasheet, SXM: same GH100 compute as H100 (1,979 TFLOPS
        # BF16 with sparsity -> 989 dense); 141 GB HBM3e at 4.8 TB/s; PCIe Gen5 x16.
        "h200": Hardware(
            name="h200",
            peak_flops=989 * TB,
            hbm_bandwidth=4.8 * TB,
            hbm_bytes=141 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
        ),
        # NVIDIA HGX B200 datasheet, per GPU: FP16/BF16 tensor core 4.5 PFLOPS "with sparsity"
        # -> 2.25 PFLOPS dense; HBM3e at 8 TB/s; 1,440 GB per 8-GPU board = 180 GB per GPU
        # (192 GB of raw HBM is also quoted); PCIe Gen5 x16 host link.
        "b200": Hardware(
            name="b200",
            peak_flops=2250 * TB,
            hbm_bandwidth=8.0 * TB,
            hbm_bytes=180 * GB,
            host_to_device_bandwidth=_PCIE5_X16,
        ),
    }
)
"""Built-in accelerator profiles (datasheet values, default utilisation and overhead)."""


def hardware(name: str) -> Hardware:
    """A built-in profile by (case-insensitive) name; ConfigError listing the known ones."""
    try:
        return HARDWARE[name.strip().lower()]
    except KeyError:
        known = ", ".join(sorted(HARDWARE))
        raise ConfigError(f"unknown hardware {name!r} (known: {known})") from None


# ---------------------------------------------------------------------------- parameters


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

    Supports the MoE families ``hycache.spec_hf`` parses: qwen3_next / qwen3_5_moe (gated
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
    from hycache.spec_named import HF_CONFIGS

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


# ---------------------------------------------------------------------------- cost model


def _check_len(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


class CostModel:
    """FLOPs, bytes and time of engine steps for ``spec`` on ``hw`` (see the module docstring).

    ``hw``: a Hardware or a built-in profile name. ``moe``: the model's MoE shape; ``"auto"``
    (default) takes ``NAMED_MOE`` when ``spec`` is the built-in spec of that name, else treats
    the model as dense; None forces dense. ``weight_bytes_per_param``: defaults to the
    attention KV dtype's size (the model dtype), 2 without attention layers.
    """

    def __init__(
        self,
        spec: ModelSpec,
        hw: Hardware | str,
        *,
        moe: MoEShape | Literal["auto"] | None = "auto",
        weight_bytes_per_param: int | None = None,
        tied_embeddings: bool = False,
    ) -> None:
        self.spec = spec
        self.hw = hardware(hw) if isinstance(hw, str) else hw
        if moe == "auto":
            from hycache.spec import NAMED_SPECS

            named = NAMED_SPECS.get(spec.name)
            moe = NAMED_MOE.get(spec.name) if named == spec else None
        self.moe: MoEShape | None = moe
        self.params = estimate_params(spec, moe, tied_embeddings=tied_embeddings)
        if weight_bytes_per_param is None:
            attn = spec.attention_groups
            weight_bytes_per_param = attn[0].dtype_bytes if attn else 2
        if weight_bytes_per_param <= 0:
            raise ConfigError(f"weight_bytes_per_param must be > 0, got {weight_bytes_per_param}")
        self.weight_bytes_per_param = weight_bytes_per_param
        swa = spec.swa
        self._full_kv = spec.full.kv_bytes_per_token if spec.full is not None else 0
        self._swa_kv = swa.kv_bytes_per_token if swa is not None else 0
        self._window = swa.window if swa is not None else 0

    def __repr__(self) -> str:
        return f"CostModel({self.spec.name!r}, {self.hw.name!r})"

    # ------------------------------------------------------------------ FLOPs

    @property
    def lm_head_flops(self) -> float:
        """FLOPs of one token's logits: ``2 * vocab * hidden``."""
        return 2.0 * self.spec.vocab_size * self.spec.hidden_size

    def prefill_flops(self, cached: int, new: int) -> float:
        """``spec.prefill_flops(cached, new)``: attention quadratic in the context (sliding
        window capped), recurrent and MLP linear in ``new``; additive over chunks."""
        return self.spec.prefill_flops(cached, new)

    def decode_flops(self, context_lens: Sequence[int]) -> float:
        """FLOPs of one decode step: per sequence with ``c`` context tokens
        ``spec.prefill_flops(c, 1) + 2 * vocab * hidden``."""
        return sum(self.spec.prefill_flops(c, 1) + self.lm_head_flops for c in context_lens)

    # ------------------------------------------------------------------ bytes

    def weight_bytes(self, tokens: int) -> float:
        """Weight bytes a step over ``tokens`` tokens reads:
        ``wb * (dense_active + routed_total * (1 - (1 - k/E) ** tokens))`` (0 for no tokens)."""
        _check_len(tokens=tokens)
        if tokens == 0:
            return 0.0
        routed = 0.0
        if self.moe is not None:
            routed = self.params.mlp_routed_total * self.moe.coverage(tokens)
        return self.weight_bytes_per_param * (self.params.dense_active + routed)

    def kv_bytes(self, context: int) -> int:
        """KV bytes a sequence of ``context`` tokens holds and one step reads:
        ``full_kv_per_token * context + swa_kv_per_token * min(context, window)``."""
        _check_len(context=context)
        return self._full_kv * context + self._swa_kv * min(context, self._window)

    def _sequence_bytes(self, context: int, new: int) -> int:
        """Non-weight bytes of one sequence in a step: KV read (context), KV written (new
        tokens), recurrent state read and written."""
        return (
            self.kv_bytes(context) + self.spec.kv_bytes_per_token * new + 2 * self.spec.state_bytes
        )

    def decode_bytes(self, context_lens: Sequence[int]) -> float:
        """Bytes one decode step over a batch reads and writes: the weights
        ``len(context_lens)`` tokens touch, every sequence's context KV (sliding window capped),
        its new token's KV, and its recurrent state read + written."""
        for c in context_lens:
            _check_len(context=c)
        seqs = sum(self._sequence_bytes(c, 1) for c in context_lens)
        return self.weight_bytes(len(context_lens)) + seqs

    def step_flops(
        self, prefill_tokens: Sequence[tuple[int, int]], decode_contexts: Sequence[int]
    ) -> float:
        """FLOPs of a step: prefill chunks (plus one LM head each) and decode tokens."""
        total = self.decode_flops(decode_contexts)
        for cached, new in prefill_tokens:
            if new:
                total += self.prefill_flops(cached, new) + self.lm_head_flops
        return total

    def step_bytes(
        self, prefill_tokens: Sequence[tuple[int, int]], decode_contexts: Sequence[int]
    ) -> float:
        """Bytes of a step: the weights all its tokens touch together, plus per sequence its
        KV read/written and its state read/written (see ``decode_bytes``)."""
        tokens = len(decode_contexts)
        seqs = 0
        for cached, new in prefill_tokens:
            _check_len(cached=cached, new=new)
            if new:
                tokens += new
                seqs += self._sequence_bytes(cached, new)
        for c in decode_contexts:
            _check_len(context=c)
            seqs += self._sequence_bytes(c, 1)
        return self.weight_bytes(tokens) + seqs

    # ------------------------------------------------------------------ time

    def step_time(
        self, prefill_tokens: Sequence[tuple[int, int]], decode_contexts: Sequence[int]
    ) -> float:
        """Seconds of one engine step running the prefill chunks ``(cached, new)`` and one
        decode token for each context length in ``decode_contexts``:
        ``max(F / (peak * mfu), B / (bandwidth * mbu)) + step_overhead_s``; 0.0 for a step with
        no tokens at all (no step runs)."""
        flops = self.step_flops(prefill_tokens, decode_contexts)
        data = self.step_bytes(prefill_tokens, decode_contexts)
        if flops == 0.0 and data == 0.0:
            return 0.0
        compute = flops / self.hw.effective_flops
        memory = data / self.hw.effective_bandwidth
        return max(compute, memory) + self.hw.step_overhead_s

    def prefill_time(self, cached: int, new: int) -> float:
        """Seconds of a lone prefill of ``new`` tokens after ``cached`` cached ones (one step)."""
        return self.step_time([(cached, new)], [])

    def decode_time(self, context_lens: Sequence[int]) -> float:
        """Seconds of one decode step over a batch with these context lengths."""
        return self.step_time([], context_lens)

    def recompute_seconds_per_token(self, context: int) -> float:
        """Mean compute seconds to recompute one token of a ``context``-token prompt:
        ``prefill_flops(0, context) / context / (peak * mfu)`` (no overhead, no memory
        bound): the marginal price of a cache miss, ``beta`` of ``hycache.sim.tune``."""
        if context <= 0:
            raise ValueError(f"context must be > 0, got {context}")
        return self.prefill_flops(0, context) / context / self.hw.effective_flops
