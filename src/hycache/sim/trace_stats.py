"""What a request stream looks like to a checkpoint policy, in one pass (``trace_stats``):
prompt lengths, how many prompts replay an earlier one, how much prefix an infinite cache
could serve and how much of it ends on an earlier prompt's end, sessions and turn gaps.
Memory stays bounded: prompts are remembered by block-hash chains in capped tables."""

from __future__ import annotations

import hashlib
import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

from hycache.errors import ConfigError
from hycache.sim.request import Request
from hycache.tree.keys import TOKEN_BYTES

DEFAULT_BLOCK_TOKENS = 512
"""Block granularity of ``trace_stats``' shared-prefix detection (Mooncake's hash blocks)."""

DEFAULT_MAX_ENTRIES = 1 << 20
"""Bound on each table ``trace_stats`` keeps (oldest entries dropped first)."""


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
        prompt, n = memoryview(bytes(req.prompt)), req.prompt_len
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
