"""Checkpoint economics of a hybrid cache: crossover, retention interval, policy advice.

A recurrent checkpoint of ``S`` bytes weighs as much as the KV of
``crossover_tokens(S, kv_bytes_per_token) = S / kv_bytes_per_token`` tokens: below that many
tokens of context the state dominates memory, far above it the state is nearly free.

Retention interval (checkpoint every ``I`` tokens of a ``T``-token context): holding
``T / I`` states of ``S`` bytes costs ``alpha`` per byte; a resume at a uniformly random
position recomputes ``I / 2`` tokens on average at ``beta`` per token::

    cost(I) = (T / I) * S * alpha + (I / 2) * beta
    d cost / dI = 0  ->  I* = sqrt(2 * T * S * alpha / beta)

so the optimum moves with the square root of the storage-to-recompute price ratio (a 100x
cheaper recompute puts checkpoints 10x further apart). At ``I*`` both terms are equal.

``recommend`` prices both terms in accelerator-seconds (GPU-s), from the cost model:

- ``beta`` = compute seconds to recompute one token of a ``T``-token prompt
  (``CostModel.recompute_seconds_per_token``: ``prefill_flops(0, T) / T / (peak * mfu)``);
- ``alpha`` = ``hold_s / hbm_bytes``: a cache that fills device memory rents the whole
  accelerator for its bytes, so one byte is worth ``1 / hbm_bytes`` of a GPU-second per second,
  and a checkpoint is held ``hold_s`` seconds until its reuse (the trace's mean gap between
  consecutive turns when it has sessions, else ``DEFAULT_HOLD_S``).

A checkpoint pays for itself when a hit on it saves at least
``break_even_tokens = alpha * S / beta`` tokens of recompute; ``I* = sqrt(2 * T * break_even)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import Hardware
from hycache.sim.trace_stats import TraceStats
from hycache.spec.model import ModelSpec

DEFAULT_HOLD_S = 60.0
"""Seconds a checkpoint is held until reused when the trace gives no turn gap."""

REPLAY_SHARE = 0.3
"""Share of prompts extending an earlier prompt from which turns are called replaying."""

PROMPT_END_SHARE = 0.8
"""Share of the reused prefix ending on earlier prompt ends from which prompt-end checkpoints
are called sufficient (Mooncake conversation: 0.94)."""


def _require_positive(**values: float) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not value > 0 or not math.isfinite(value):
            raise ConfigError(f"'{name}' must be a finite number > 0, got {value!r}")


def crossover_tokens(state_bytes: float, kv_bytes_per_token: float) -> float:
    """Tokens of KV that weigh as much as one state: ``state_bytes / kv_bytes_per_token``
    (3 MiB vs 1 KiB per token: 3,072)."""
    _require_positive(state_bytes=state_bytes, kv_bytes_per_token=kv_bytes_per_token)
    return state_bytes / kv_bytes_per_token


def interval_cost(
    context_tokens: float, interval: float, state_bytes: float, alpha: float, beta: float
) -> float:
    """``(T / I) * S * alpha + (I / 2) * beta``: storage of a checkpoint every ``I`` tokens of
    a ``T``-token context plus the expected recompute of one resume."""
    _require_positive(
        context_tokens=context_tokens,
        interval=interval,
        state_bytes=state_bytes,
        alpha=alpha,
        beta=beta,
    )
    return (context_tokens / interval) * state_bytes * alpha + (interval / 2.0) * beta


def optimal_interval(context_tokens: float, state_bytes: float, alpha: float, beta: float) -> float:
    """``I* = sqrt(2 * T * S * alpha / beta)``, the minimum of ``interval_cost`` (T = 1M,
    S = 3 MiB, alpha = 1e-9, beta = 1e-3: 2,508 tokens)."""
    _require_positive(
        context_tokens=context_tokens, state_bytes=state_bytes, alpha=alpha, beta=beta
    )
    return math.sqrt(2.0 * context_tokens * state_bytes * alpha / beta)


@dataclass(frozen=True, kw_only=True)
class Recommendation:
    """A checkpoint policy for a model, a workload and an accelerator.

    ``checkpoint_policy``: ``"none"`` (no recurrent layers), or ``"prompt_end"`` joined by
    ``"+"`` with ``"branch"`` (a state where a prompt leaves a shared prefix) and ``"interval"``
    (a state every ``retention_interval`` tokens). ``retention_interval``: the knob value in
    vLLM's sense, 0 = no periodic checkpoints. ``optimal_interval``: ``round(I*)`` whatever the
    policy (0 without recurrent layers). Prices in GPU-seconds (see the module docstring).
    """

    model: str
    hardware: str
    context_tokens: int
    state_bytes: int
    kv_bytes_per_token: int
    crossover_tokens: float
    hold_s: float
    alpha: float
    beta: float
    break_even_tokens: float
    optimal_interval: int
    retention_interval: int
    checkpoint_policy: str
    explanation: str


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def recommend(
    spec: ModelSpec,
    stats: TraceStats,
    *,
    hw: Hardware | str = "h200",
    context_tokens: int | None = None,
    hold_s: float | None = None,
    cost_model: CostModel | None = None,
) -> Recommendation:
    """Recommend a checkpoint policy and retention interval for ``spec`` on ``stats``.

    ``T`` = ``context_tokens``, else the trace's mean prompt length; ``S`` =
    ``spec.state_bytes``; ``beta`` = ``cost_model.recompute_seconds_per_token(T)``; ``alpha``
    = ``hold_s / hbm_bytes`` with ``hold_s`` given, else the trace's mean turn gap, else
    ``DEFAULT_HOLD_S``. Policy rules, in order:

    1. no recurrent layers: ``"none"`` (KV alone is reusable at any page);
    2. a prompt-end checkpoint always (cheap: one state per prompt, where turns resume);
    3. ``"branch"`` when the mean shared prefix reaches ``break_even_tokens``: sharing goes
       deep enough that a state where prompts part ways (Marconi's speculative insertion,
       vLLM's shared-prefix boundary) repays its bytes;
    4. ``"interval"`` (retention interval ``I*``) when prefixes are shared, ``I* < T`` and
       reuse does not land on earlier prompt ends (``share_of_prompts_extending_previous <
       REPLAY_SHARE`` and ``prompt_end_share < PROMPT_END_SHARE``): it lands at unpredictable
       depths of long prompts. When turns replay, resumes land on the previous prompt's end
       and prompt-end checkpoints serve them: the interval stays 0.

    ``cost_model`` (optional) replaces ``CostModel(spec, hw)``; ``hw`` is then ignored.
    """
    cm = cost_model if cost_model is not None else CostModel(spec, hw)
    hw_obj = cm.hw
    origin = "given"
    if context_tokens is None:
        if stats.requests == 0 or stats.mean_prompt_len < 1:
            raise ConfigError("empty trace: pass context_tokens to recommend()")
        context_tokens = max(1, round(stats.mean_prompt_len))
        origin = f"mean prompt of {stats.requests:,} requests"
    _require_positive(context_tokens=context_tokens)
    if hold_s is None:
        gap = stats.mean_turn_gap_s
        hold_s = gap if gap is not None and gap > 0 else DEFAULT_HOLD_S
    _require_positive(hold_s=hold_s)
    state, kv = spec.state_bytes, spec.kv_bytes_per_token
    alpha = hold_s / hw_obj.hbm_bytes
    beta = cm.recompute_seconds_per_token(context_tokens)
    replay = stats.share_of_prompts_extending_previous
    lines = [
        f"{spec.name} on {hw_obj.name}, T = {context_tokens:,} tokens ({origin}).",
        f"Recompute costs beta = {beta:.3g} GPU-s per token; holding a byte for "
        f"{hold_s:.3g} s costs alpha = {hold_s:.3g} s / {hw_obj.hbm_bytes / 1e9:g} GB = "
        f"{alpha:.3g} GPU-s.",
    ]
    if state == 0:
        lines.append("No recurrent layers: KV is reusable at any page, no checkpoints needed.")
        return Recommendation(
            model=spec.name,
            hardware=hw_obj.name,
            context_tokens=context_tokens,
            state_bytes=0,
            kv_bytes_per_token=kv,
            crossover_tokens=0.0,
            hold_s=hold_s,
            alpha=alpha,
            beta=beta,
            break_even_tokens=0.0,
            optimal_interval=0,
            retention_interval=0,
            checkpoint_policy="none",
            explanation="\n".join(lines),
        )
    crossover = crossover_tokens(state, kv) if kv > 0 else math.inf
    break_even = alpha * state / beta
    i_star = optimal_interval(context_tokens, state, alpha, beta)
    lines += [
        f"One checkpoint is {_mib(state)} = the KV of {crossover:,.0f} tokens; it repays its "
        f"bytes when a hit on it saves >= alpha*S/beta = {break_even:,.0f} tokens.",
        f"Optimal interval I* = sqrt(2*T*S*alpha/beta) = {i_star:,.0f} tokens.",
        f"{replay:.0%} of prompts extend an earlier prompt; mean shared prefix "
        f"{stats.mean_shared_prefix_len:,.0f} tokens, {stats.prompt_end_share:.0%} of it "
        "ending on earlier prompt ends.",
    ]
    parts = ["prompt_end"]
    shared = stats.mean_shared_prefix_len >= break_even
    if shared:
        parts.append("branch")
        lines.append(
            "Shared prefixes reach the break-even length: checkpoint where prompts part ways."
        )
    else:
        lines.append("Shared prefixes are too short to repay a checkpoint beyond prompt ends.")
    retention = 0
    if replay >= REPLAY_SHARE or stats.prompt_end_share >= PROMPT_END_SHARE:
        lines.append(
            "Reuse resumes where earlier prompts ended (turns replay previous prompts), "
            "so prompt-end checkpoints serve it: retention interval 0."
        )
    elif shared and i_star < context_tokens:
        parts.append("interval")
        retention = round(i_star)
        lines.append(f"Reuse lands mid-prompt and I* < T: keep a state every {retention:,} tokens.")
    else:
        lines.append("No periodic checkpoints: retention interval 0.")
    policy = "+".join(parts)
    lines.append(f"Recommended: {policy}, retention interval {retention:,}.")
    return Recommendation(
        model=spec.name,
        hardware=hw_obj.name,
        context_tokens=context_tokens,
        state_bytes=state,
        kv_bytes_per_token=kv,
        crossover_tokens=crossover,
        hold_s=hold_s,
        alpha=alpha,
        beta=beta,
        break_even_tokens=break_even,
        optimal_interval=round(i_star),
        retention_interval=retention,
        checkpoint_policy=policy,
        explanation="\n".join(lines),
    )
