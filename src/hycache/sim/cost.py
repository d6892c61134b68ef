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

Parameter counts and the MoE shape come from ``hycache.sim.params``, the accelerator profiles
from ``hycache.sim.hardware``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from hycache.errors import ConfigError
from hycache.sim.decode_terms import DecodeTerms, decode_terms
from hycache.sim.hardware import HARDWARE, Hardware, hardware
from hycache.sim.params import (
    NAMED_MOE,
    MoEShape,
    ParamEstimate,
    estimate_params,
    moe_shape_from_hf_config,
)
from hycache.spec.model import ModelSpec

# the cost model's whole interface, profiles and parameter counts included
__all__ = [
    "HARDWARE",
    "NAMED_MOE",
    "CostModel",
    "Hardware",
    "MoEShape",
    "ParamEstimate",
    "estimate_params",
    "hardware",
    "moe_shape_from_hf_config",
]


def _check_len(**values: int) -> None:
    for name, value in values.items():
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")


class CostModel:
    """FLOPs, bytes and time of engine steps for ``spec`` on ``hw`` (see the module docstring).

    ``hw``: a Hardware or a built-in profile name. ``moe``: the model's MoE shape; ``"auto"``
    (default) takes the spec's own (``spec.moe``, None for a dense model), so a spec from a
    config.json and the built-in spec of that model cost the same; None forces dense.
    ``weight_bytes_per_param``: defaults to the attention KV dtype's size (the model dtype), 2
    without attention layers.
    """

    def __init__(
        self,
        spec: ModelSpec,
        hw: Hardware | str,
        *,
        moe: MoEShape | Literal["auto"] | None = "auto",
        weight_bytes_per_param: int | None = None,
        tied_embeddings: bool = False,
        storage_kind: str = "disk",
    ) -> None:
        self.spec = spec
        self.storage_kind = storage_kind
        self.hw = hardware(hw) if isinstance(hw, str) else hw
        if moe == "auto":
            moe = spec.moe
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
        # per-sequence constants of the hot path (spec properties recompute them per call)
        self._kv_per_token = spec.kv_bytes_per_token
        self._state_rw = 2 * spec.state_bytes
        self._prefill = spec.prefill_flops_table()  # spec.prefill_flops, without its calls
        self._decode_flops: dict[int, float] = {}  # context -> one decode token's FLOPs
        #: the batch sum in closed form, where the spec allows it (hycache.sim.decode_terms)
        self._decode_terms: DecodeTerms | None = decode_terms(
            self._token_decode_flops, self._window
        )

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
        return self._prefill.prefill_flops(cached, new)

    def decode_flops(self, context_lens: Sequence[int]) -> float:
        """FLOPs of one decode step: per sequence with ``c`` context tokens
        ``spec.prefill_flops(c, 1) + 2 * vocab * hidden``, summed left to right (in closed form
        where that gives the same float, ``hycache.sim.decode_terms``)."""
        terms = self._decode_terms
        if terms is not None:
            total = terms.total(context_lens)
            if total is not None:
                return total
        memo = self._decode_flops
        total = 0.0  # summed left to right from 0.0 (``sum`` may round differently)
        for context in context_lens:
            flops = memo.get(context)
            if flops is None:
                flops = memo[context] = self._token_decode_flops(context)
            total += flops
        return total

    def _token_decode_flops(self, context: int) -> float:
        """One decode token's FLOPs after ``context`` tokens."""
        return self._prefill.prefill_flops(context, 1) + self.lm_head_flops

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
        return self.kv_bytes(context) + self._kv_per_token * new + self._state_rw

    def decode_bytes(self, context_lens: Sequence[int]) -> float:
        """Bytes one decode step over a batch reads and writes: the weights
        ``len(context_lens)`` tokens touch, every sequence's context KV (sliding window capped),
        its new token's KV, and its recurrent state read + written."""
        return self.weight_bytes(len(context_lens)) + self._decode_sequences_bytes(context_lens)

    def _decode_sequences_bytes(self, contexts: Sequence[int]) -> int:
        """``sum(_sequence_bytes(c, 1) for c in contexts)``, in closed form (integers: the same
        number, without a call per sequence)."""
        if not contexts:
            return 0
        lowest = min(contexts)
        if lowest < 0:
            raise ValueError(f"context must be >= 0, got {lowest}")
        total = self._full_kv * sum(contexts)
        if self._swa_kv:
            window = self._window
            total += self._swa_kv * sum(c if c < window else window for c in contexts)
        return total + len(contexts) * (self._kv_per_token + self._state_rw)

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
        seqs += self._decode_sequences_bytes(decode_contexts)
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

    def load_time(self, bytes_by_tier: Mapping[str, int]) -> float:
        """Seconds to load these bytes into the device: ``host`` over the host link,
        ``storage`` (disk or remote, ``storage_kind``) at the slower of its own bandwidth and
        the host link; one transfer after another."""
        hw, seconds = self.hw, 0.0
        for tier, nbytes in bytes_by_tier.items():
            rate = hw.host_to_device_bandwidth
            if tier == "storage":
                own = hw.remote_bandwidth if self.storage_kind == "remote" else hw.disk_bandwidth
                rate = min(rate, own)
            seconds += nbytes / rate
        return seconds

    def exposed_load(self, load_s: float, prefill_s: float) -> float:
        """The part of a ``load_s`` load that a ``prefill_s`` prefill does not hide when both
        run layer by layer (layer i computes once its KV and state have arrived): the first
        layer's load, plus what each later layer's load exceeds a layer's compute."""
        layers = max(1, self.spec.num_layers)
        per_load, per_compute = load_s / layers, prefill_s / layers
        return per_load + (layers - 1) * max(0.0, per_load - per_compute)

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
