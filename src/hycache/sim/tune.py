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

import hashlib
import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.sim.cost import CostModel, Hardware
from hycache.sim.request import Request
from hycache.spec import ModelSpec
from hycache.tree.keys import TOKEN_BYTES

DEFAULT_HOLD_S = 60.0
"""Seconds a checkpoint is held until reused when the trace gives no turn gap."""

REPLAY_SHARE = 0.3
"""Share of prompts extending an earlier prompt from which turns are called replaying."""

PROMPT_END_SHARE = 0.8
"""Share of the reused prefix ending on earlier prompt ends from which prompt-end checkpoints
are called sufficient (Mooncake conversation: 0.94)."""

DEFAULT_BLOCK_TOKENS = 512
"""Block granularity of ``trace_stats``' shared-prefix detection (Mooncake's hash blocks)."""

DEFAULT_MAX_ENTRIES = 1 << 20
"""Bound on each table ``trace_stats`` keeps (oldest entries dropped first)."""


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


# ---------------------------------------------------------------------------- trace stats


@dataclass(frozen=True, kw_only=True)
class TraceStats:
    """What a workload looks like to a checkpoint policy (see ``trace_stats``).

    ``share_of_prompts_extending_previous``: share of ALL requests whose prompt starts with
    a whole earlier prompt (multi-turn replay). ``mean_shared_prefix_len``: mean over all
    requests of the prompt prefix an infinite prompt cache could serve. ``sessions``:
    distinct session ids. ``mean_turn_gap_s``: mean seconds between a request and the earlier
    one it continues (None when no request continues another): how long a prompt-end state
    waits for its reuse. ``prompt_end_share``: share of
    the shared-prefix tokens that end on an earlier prompt's end (its last full block, or the
    whole prompt it extends): the part of the reuse prompt-end checkpoints can serve.
    """

    requests: int
    mean_prompt_len: float
    p95_prompt_len: int
    share_of_prompts_extending_previous: float
    mean_shared_prefix_len: float
    mean_output_len: float = 0.0
    sessions: int = 0
    mean_turn_gap_s: float | None = None
    prompt_end_share: float = 0.0


_FILTER_TOKENS = 4
"""Leading tail tokens ``trace_stats`` indexes prompt ends by, so that only tails that agree
on them are hashed."""


def _digest(head: bytes, data: bytes | memoryview = b"") -> bytes:
    """blake2b-128 of ``head + data`` (no copy of ``data``)."""
    h = hashlib.blake2b(head, digest_size=16)
    h.update(data)
    return h.digest()


def _put(table: dict[bytes, float], key: bytes, value: float, cap: int) -> None:
    """Insert or refresh ``key`` as the newest entry; drop the oldest beyond ``cap``."""
    table.pop(key, None)
    table[key] = value
    if len(table) > cap:
        del table[next(iter(table))]


@dataclass(frozen=True)
class _End:
    """Where a prompt ends: ``blocks`` full blocks with chain digest ``chain``, then a tail of
    ``tail`` tokens; ``digest`` = H(chain + tail bytes) identifies the whole prompt."""

    blocks: int
    chain: bytes
    tail: int
    digest: bytes
    arrival_s: float

    def length(self, block_tokens: int) -> int:
        return self.blocks * block_tokens + self.tail


def _is_prefix(end: _End, prompt: memoryview, chain: list[bytes], block_tokens: int) -> bool:
    """Whether the prompt ``end`` identifies is a prefix of ``prompt`` (chain digests
    ``chain``)."""
    start = end.blocks * block_tokens * TOKEN_BYTES
    return (
        end.blocks < len(chain)
        and end.length(block_tokens) * TOKEN_BYTES <= len(prompt)
        and chain[end.blocks] == end.chain
        and _digest(end.chain, prompt[start : start + end.tail * TOKEN_BYTES]) == end.digest
    )


def trace_stats(
    requests: Iterable[Request],
    *,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    max_entries: int = DEFAULT_MAX_ENTRIES,
) -> TraceStats:
    """``TraceStats`` of a request stream, in one pass over it.

    Each prompt is cut into ``block_tokens``-token blocks with chain digests
    ``h_k = blake2b(h_{k-1} + block_k)`` (``h_0`` from the namespace: tenants share nothing),
    and its end is identified by ``blake2b(h_nb + tail tokens)``. Then:

    - extends previous: with a session id, the session's previous prompt is a prefix of this
      one (equal included); without one, ANY earlier non-empty prompt of the namespace is (the
      trace has no turns to follow, so the turn is found by content: Mooncake-style traces).
      Exact up to digest collisions.
    - shared prefix: the longest prefix shared with an earlier prompt, block-granular (the
      deepest chain digest seen before, times ``block_tokens``), and exact (not rounded) when
      a whole earlier prompt it extends is longer.
    - prompt-end reach: the deepest earlier prompt end within the shared prefix, block-granular
      (the last full block of an earlier prompt: where vLLM's retention interval 0 keeps its
      state; it survives traces like Mooncake's, whose last partial block is hashed apart from
      the next turn's) or exact (a whole earlier prompt it extends).
    - turn gap: arrival gap to the session's previous request; without a session, to the
      latest earlier prompt it extends, else to the latest one whose end it reaches.

    Memory: the block digests, prompt ends and tail lengths seen (each table capped at
    ``max_entries``, oldest first dropped) plus one end per live session; prompt lengths
    (for the p95, nearest rank) as an int64 array.
    """
    if block_tokens <= 0 or max_entries <= 0:
        raise ConfigError("block_tokens and max_entries must be > 0")
    block_bytes = block_tokens * TOKEN_BYTES
    filter_bytes = _FILTER_TOKENS * TOKEN_BYTES
    seen_chains: dict[bytes, float] = {}  # chain digest -> 0.0 (value unused)
    # chain digest + first min(tail, _FILTER_TOKENS) tail tokens -> tail lengths ending there
    tail_index: dict[bytes, set[int]] = {}
    ends: dict[bytes, float] = {}  # prompt digest -> latest arrival
    last_in_session: dict[tuple[str | None, str], _End] = {}
    lengths = array("q")
    n_requests = extending = 0
    block_ends: dict[bytes, float] = {}  # where a prompt's full blocks end -> arrival
    prompt_sum = output_sum = shared_sum = prompt_end_sum = 0
    gap_sum, gaps = 0.0, 0
    for req in requests:
        prompt, n = memoryview(req.prompt), req.prompt_len
        n_requests += 1
        lengths.append(n)
        prompt_sum += n
        output_sum += req.output_len
        root = _digest(b"ns:" + (req.namespace or "").encode())
        blocks = n // block_tokens
        chain = [root]
        for k in range(blocks):
            chain.append(_digest(chain[-1], prompt[k * block_bytes : (k + 1) * block_bytes]))
        shared_blocks = 0
        while shared_blocks < blocks and chain[shared_blocks + 1] in seen_chains:
            shared_blocks += 1

        extended_len = -1
        gap: float | None = None
        if req.session is not None:
            prev = last_in_session.get((req.namespace, req.session))
            if prev is not None:
                gap = req.arrival_s - prev.arrival_s
                if prev.length(block_tokens) > 0 and _is_prefix(prev, prompt, chain, block_tokens):
                    extended_len = prev.length(block_tokens)
        else:
            for k in range(shared_blocks, -1, -1):  # deepest earlier prompt first
                best, start = -1, k * block_bytes
                for p in range(min(_FILTER_TOKENS, n - k * block_tokens) + 1):
                    head = chain[k] + prompt[start : start + p * TOKEN_BYTES].tobytes()
                    for tail in tail_index.get(head, ()):
                        length = k * block_tokens + tail
                        if not best < length <= n or length == 0:
                            continue
                        key = _digest(chain[k], prompt[start : start + tail * TOKEN_BYTES])
                        if key in ends:
                            best, gap = length, req.arrival_s - ends[key]
                if best > 0:
                    extended_len = best
                    break
        end_blocks = shared_blocks
        while end_blocks > 0 and chain[end_blocks] not in block_ends:
            end_blocks -= 1
        if extended_len > 0:
            extending += 1
        elif req.session is None and end_blocks > 0:
            gap = req.arrival_s - block_ends[chain[end_blocks]]
        if gap is not None:
            gap_sum += gap
            gaps += 1
        shared_sum += max(shared_blocks * block_tokens, extended_len)
        prompt_end_sum += max(end_blocks * block_tokens, extended_len, 0)

        # record this prompt
        for digest in chain[1:]:
            _put(seen_chains, digest, 0.0, max_entries)
        tail = n - blocks * block_tokens
        start = blocks * block_bytes
        end_digest = _digest(chain[blocks], prompt[start:])
        _put(ends, end_digest, req.arrival_s, max_entries)
        head = chain[blocks] + prompt[start : start + filter_bytes].tobytes()
        tails = tail_index.pop(head, set())
        tails.add(tail)
        tail_index[head] = tails
        if len(tail_index) > max_entries:
            del tail_index[next(iter(tail_index))]
        if blocks:
            _put(block_ends, chain[blocks], req.arrival_s, max_entries)
        if req.session is not None:
            last_in_session[(req.namespace, req.session)] = _End(
                blocks, chain[blocks], tail, end_digest, req.arrival_s
            )

    if n_requests == 0:
        return TraceStats(
            requests=0,
            mean_prompt_len=0.0,
            p95_prompt_len=0,
            share_of_prompts_extending_previous=0.0,
            mean_shared_prefix_len=0.0,
        )
    ordered = sorted(lengths)
    return TraceStats(
        requests=n_requests,
        mean_prompt_len=prompt_sum / n_requests,
        p95_prompt_len=ordered[math.ceil(0.95 * n_requests) - 1],
        share_of_prompts_extending_previous=extending / n_requests,
        mean_shared_prefix_len=shared_sum / n_requests,
        mean_output_len=output_sum / n_requests,
        sessions=len(last_in_session),
        mean_turn_gap_s=gap_sum / gaps if gaps else None,
        prompt_end_share=prompt_end_sum / shared_sum if shared_sum else 0.0,
    )


# ---------------------------------------------------------------------------- recommendation


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
