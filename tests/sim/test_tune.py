"""hycache.sim.tune: the seed's checkpoint economics, trace statistics, recommendations."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.request import Request
from hycache.sim.trace_stats import TraceStats, trace_stats
from hycache.sim.tune import (
    DEFAULT_HOLD_S,
    Recommendation,
    crossover_tokens,
    interval_cost,
    optimal_interval,
    recommend,
)
from hycache.spec.model import FullAttentionGroup, ModelSpec
from hycache.tree.keys import encode_tokens

MIB, KIB = 2**20, 2**10
QWEN = "qwen3-next-80b-a3b"
TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"

# the seed's executed model: 3 MiB state, 1 KiB of KV per token, T = 1M, alpha 1e-9, beta 1e-3
T, S, ALPHA, BETA = 1_000_000, 3 * MIB, 1.0e-9, 1.0e-3


# ---------------------------------------------------------------------------- economics


def test_crossover_is_3072_tokens_for_3_mib_vs_1_kib() -> None:
    assert crossover_tokens(3 * MIB, KIB) == 3072
    spec = ModelSpec.named(QWEN)  # 37.7 MiB of state = the KV of 1,608 tokens
    assert math.floor(crossover_tokens(spec.state_bytes, spec.kv_bytes_per_token)) == 1608
    with pytest.raises(ConfigError):
        crossover_tokens(3 * MIB, 0)


def test_optimal_interval_is_2508_tokens() -> None:
    i_star = optimal_interval(T, S, ALPHA, BETA)
    assert round(i_star) == 2508
    assert i_star == pytest.approx(math.sqrt(2 * T * S * ALPHA / BETA))


def test_grid_search_agrees_with_the_closed_form_within_2_percent() -> None:
    # the seed's grid: 4,000 points from 1,000 to 400,000 tokens (its minimum: 2,497)
    grid = [1000 + i * (400_000 - 1000) / 3999 for i in range(4000)]
    best = min(grid, key=lambda i: interval_cost(T, i, S, ALPHA, BETA))
    i_star = optimal_interval(T, S, ALPHA, BETA)
    assert round(best) == 2497
    assert abs(best - i_star) / i_star < 0.02


def test_100x_cheaper_recompute_moves_the_optimum_10x_further() -> None:
    base = optimal_interval(T, S, ALPHA, BETA)
    cheap = optimal_interval(T, S, ALPHA, BETA / 100)
    assert cheap / base == pytest.approx(10.0, rel=1e-9)
    assert round(cheap) == 25_083


@given(
    context=st.floats(1e3, 1e7),
    state=st.floats(1e4, 1e9),
    alpha=st.floats(1e-13, 1e-6),
    beta=st.floats(1e-7, 1e-2),
    factor=st.floats(0.01, 100.0),
)
def test_optimal_interval_minimises_interval_cost(
    context: float, state: float, alpha: float, beta: float, factor: float
) -> None:
    i_star = optimal_interval(context, state, alpha, beta)
    best = interval_cost(context, i_star, state, alpha, beta)
    assert best <= interval_cost(context, i_star * factor, state, alpha, beta) * (1 + 1e-12)
    # at the optimum storage and expected recompute cost the same
    assert (context / i_star) * state * alpha == pytest.approx(i_star / 2 * beta)


@pytest.mark.parametrize(
    "args", [(0, 10, S, ALPHA, BETA), (T, 0, S, ALPHA, BETA), (T, 10, S, -1.0, BETA)]
)
def test_interval_cost_rejects_non_positive_inputs(
    args: tuple[float, float, float, float, float],
) -> None:
    with pytest.raises(ConfigError):
        interval_cost(*args)
    with pytest.raises(ConfigError):
        optimal_interval(T, S, ALPHA, math.nan)


# ---------------------------------------------------------------------------- trace stats


def req(
    tokens: list[int],
    *,
    at: float = 0.0,
    session: str | None = None,
    namespace: str | None = None,
    out: int = 0,
) -> Request:
    return Request(
        request_id=f"r{at}",
        arrival_s=at,
        prompt=encode_tokens(tokens),
        output=encode_tokens(list(range(out))),
        session=session,
        namespace=namespace,
    )


def test_trace_stats_of_an_empty_trace() -> None:
    stats = trace_stats([])
    assert stats == TraceStats(
        requests=0,
        mean_prompt_len=0.0,
        p95_prompt_len=0,
        share_of_prompts_extending_previous=0.0,
        mean_shared_prefix_len=0.0,
    )


def test_trace_stats_sessions_follow_their_previous_prompt() -> None:
    a1 = [1, 2, 3, 4, 5]
    a2 = [*a1, 6, 7, 8, 9, 10, 11]
    a3 = [*a2, 12]
    b1 = [1, 2, 3, 4, 99, 98]
    b2 = [1, 2, 3, 4, 99, 97]  # edits its previous prompt: does not extend it
    trace = [
        req(a1, at=0.0, session="a", out=3),
        req(b1, at=1.0, session="b"),
        req(a2, at=10.0, session="a"),
        req(b2, at=5.0, session="b", out=1),
        req(a3, at=20.0, session="a"),
    ]
    stats = trace_stats(trace, block_tokens=2)
    assert stats.requests == 5 and stats.sessions == 2
    assert stats.share_of_prompts_extending_previous == pytest.approx(2 / 5)  # a2, a3
    assert stats.mean_prompt_len == pytest.approx((5 + 6 + 11 + 6 + 12) / 5)
    assert stats.p95_prompt_len == 12
    assert stats.mean_output_len == pytest.approx(4 / 5)
    # shared prefix: a1 0; b1 4 (blocks [1,2][3,4] of a1); a2 5 (exact: extends a1);
    # b2 4 (blocks of b1; the tail 99 is no whole block); a3 11 (extends a2)
    assert stats.mean_shared_prefix_len == pytest.approx((0 + 4 + 5 + 4 + 11) / 5)
    # turn gaps: a 10, b 4, a 10
    assert stats.mean_turn_gap_s == pytest.approx(8.0)


def test_trace_stats_without_sessions_find_the_turn_by_content() -> None:
    x1 = [5, 6, 7]
    y1 = [8, 9, 10, 11, 12]
    x2 = [5, 6, 7, 1, 2, 3]
    trace = [req(x1, at=0.0), req(y1, at=1.0), req(x2, at=4.0), req(x2, at=6.0)]
    stats = trace_stats(trace, block_tokens=2)
    assert stats.sessions == 0
    assert stats.share_of_prompts_extending_previous == pytest.approx(2 / 4)  # x2 (twice)
    assert stats.mean_shared_prefix_len == pytest.approx((0 + 0 + 3 + 6) / 4)
    assert stats.mean_turn_gap_s == pytest.approx((4.0 + 2.0) / 2)
    assert stats.prompt_end_share == 1.0


def test_trace_stats_isolate_namespaces() -> None:
    p = [1, 2, 3, 4]
    stats = trace_stats([req(p, namespace="a"), req(p, namespace="b"), req(p, namespace="a")])
    assert stats.share_of_prompts_extending_previous == pytest.approx(1 / 3)
    assert stats.mean_shared_prefix_len == pytest.approx(4 / 3)


def test_prompt_end_share_survives_a_rehashed_last_block() -> None:
    """Mooncake-style turns: the previous prompt's partial last block is hashed apart from the
    next turn's, so no turn extends another exactly, yet the reuse ends on prompt ends."""
    turns = [[1, 2, 3, 4, 50], [1, 2, 3, 4, 60, 61, 62, 63, 70], [1, 2, 3, 4, 60, 61, 62, 63, 80]]
    stats = trace_stats([req(t, at=float(i)) for i, t in enumerate(turns)], block_tokens=4)
    assert stats.share_of_prompts_extending_previous == 0.0
    assert stats.mean_shared_prefix_len == pytest.approx((0 + 4 + 8) / 3)
    assert stats.prompt_end_share == 1.0
    # a prefix shared mid-prompt (no earlier prompt ends there) is not a prompt end
    mid = trace_stats([req(list(range(12))), req([*range(8), 99, 99, 99, 99])], block_tokens=4)
    assert mid.mean_shared_prefix_len == pytest.approx(8 / 2)
    assert mid.prompt_end_share == 0.0


def _reference(trace: list[Request], block: int) -> tuple[int, int, int]:
    """Brute force: (extending requests, shared-prefix tokens, prompt-end tokens)."""
    extending = shared_sum = end_sum = 0
    for i, r in enumerate(trace):
        cur = r.prompt
        n = r.prompt_len
        earlier = [e for e in trace[:i] if e.namespace == r.namespace]
        if r.session is not None:
            prev = [e for e in earlier if e.session == r.session]
            exact = [prev[-1]] if prev and cur.startswith(prev[-1].prompt) else []
        else:
            exact = [e for e in earlier if cur.startswith(e.prompt)]
        extended = max((e.prompt_len for e in exact if e.prompt_len > 0), default=-1)
        extending += extended > 0
        best_blocks = 0
        for e in earlier:
            lcp = 0
            while (
                lcp < min(n, e.prompt_len)
                and cur[lcp * 8 : lcp * 8 + 8] == e.prompt[lcp * 8 : lcp * 8 + 8]
            ):
                lcp += 1
            best_blocks = max(best_blocks, lcp // block)
        shared_sum += max(best_blocks * block, extended)
        ends = [
            (e.prompt_len // block) * block
            for e in earlier
            if e.prompt_len >= block
            and cur[: (e.prompt_len // block) * block * 8]
            == e.prompt[: (e.prompt_len // block) * block * 8]
            and (e.prompt_len // block) * block <= n
        ]
        end_sum += max([*ends, extended, 0])
    return extending, shared_sum, end_sum


@settings(max_examples=300, deadline=None)
@given(
    block=st.integers(1, 4),
    raw=st.lists(
        st.tuples(
            st.lists(st.integers(0, 2), max_size=10),
            st.sampled_from([None, "s1", "s2"]),
            st.sampled_from([None, "ns"]),
        ),
        max_size=12,
    ),
)
def test_trace_stats_agree_with_brute_force(
    block: int, raw: list[tuple[list[int], str | None, str | None]]
) -> None:
    trace = [
        req(tokens, at=float(i), session=session, namespace=ns)
        for i, (tokens, session, ns) in enumerate(raw)
    ]
    stats = trace_stats(trace, block_tokens=block)
    extending, shared_sum, end_sum = _reference(trace, block)
    n = max(len(trace), 1)
    assert stats.share_of_prompts_extending_previous == pytest.approx(extending / n)
    assert stats.mean_shared_prefix_len == pytest.approx(shared_sum / n)
    assert stats.prompt_end_share == pytest.approx(end_sum / shared_sum if shared_sum else 0.0)
    if trace:
        lengths = sorted(r.prompt_len for r in trace)
        assert stats.p95_prompt_len == lengths[math.ceil(0.95 * len(lengths)) - 1]


def test_trace_stats_bounded_tables_still_count_requests() -> None:
    trace = [req([i, i + 1, i + 2, i + 3]) for i in range(50)]
    stats = trace_stats(trace, block_tokens=2, max_entries=4)
    assert stats.requests == 50 and stats.mean_prompt_len == 4.0
    with pytest.raises(ConfigError):
        trace_stats(trace, block_tokens=0)


@pytest.mark.slow
def test_mooncake_conversation_trace_stats() -> None:
    """DESIGN.md: infinite-cache token hit rate 0.374 (KV only), 0.350 with states only at each
    prompt's last full block: prompt-end checkpoints serve 94% of the reuse."""
    from hycache.sim.trace import read_trace

    stats = trace_stats(read_trace(TRACES / "mooncake_conversation.jsonl.gz"))
    assert stats.requests == 12_031
    assert stats.mean_prompt_len == pytest.approx(12_035, abs=1)
    assert stats.mean_shared_prefix_len / stats.mean_prompt_len == pytest.approx(0.374, abs=0.001)
    assert stats.prompt_end_share == pytest.approx(0.350 / 0.374, abs=0.005)
    rec = recommend(ModelSpec.named(QWEN), stats)
    assert rec.checkpoint_policy == "prompt_end+branch"
    assert rec.retention_interval == 0


# ---------------------------------------------------------------------------- recommend


def stats_of(
    *,
    replay: float = 0.0,
    shared: float = 0.0,
    prompt_end: float = 0.0,
    mean: float = 12_000.0,
    gap: float | None = None,
) -> TraceStats:
    return TraceStats(
        requests=1000,
        mean_prompt_len=mean,
        p95_prompt_len=int(3 * mean),
        share_of_prompts_extending_previous=replay,
        mean_shared_prefix_len=shared,
        mean_turn_gap_s=gap,
        prompt_end_share=prompt_end,
    )


def test_recommend_prices_storage_and_recompute_from_the_cost_model() -> None:
    spec = ModelSpec.named(QWEN)
    rec = recommend(spec, stats_of(replay=0.8, shared=8000.0), hw="h200")
    cm = CostModel(spec, "h200")
    assert isinstance(rec, Recommendation)
    assert rec.context_tokens == 12_000 and rec.hold_s == DEFAULT_HOLD_S
    assert rec.alpha == pytest.approx(DEFAULT_HOLD_S / 141e9)
    assert rec.beta == pytest.approx(cm.recompute_seconds_per_token(12_000))
    assert rec.state_bytes == spec.state_bytes
    assert rec.crossover_tokens == pytest.approx(spec.state_bytes / spec.kv_bytes_per_token)
    assert rec.break_even_tokens == pytest.approx(rec.alpha * spec.state_bytes / rec.beta)
    i_star = optimal_interval(12_000, spec.state_bytes, rec.alpha, rec.beta)
    assert rec.optimal_interval == round(i_star)
    assert 1000 < rec.optimal_interval < 12_000  # a few thousand tokens: sane
    # replaying sessions: prompt ends and branch points, no periodic checkpoints
    assert rec.checkpoint_policy == "prompt_end+branch"
    assert rec.retention_interval == 0
    assert "prompt-end checkpoints" in rec.explanation
    assert f"{rec.optimal_interval:,}" in rec.explanation


def test_recommend_policies() -> None:
    spec = ModelSpec.named(QWEN)
    long_shared = recommend(spec, stats_of(shared=6000.0, prompt_end=0.2))
    assert long_shared.checkpoint_policy == "prompt_end+branch+interval"
    assert long_shared.retention_interval == long_shared.optimal_interval > 0
    replay_by_ends = recommend(spec, stats_of(shared=6000.0, prompt_end=0.9))
    assert replay_by_ends.checkpoint_policy == "prompt_end+branch"
    assert replay_by_ends.retention_interval == 0
    nothing_shared = recommend(spec, stats_of(shared=10.0))
    assert nothing_shared.checkpoint_policy == "prompt_end"
    assert nothing_shared.retention_interval == 0
    # I* = sqrt(2 * T * break_even) >= T when break_even >= T / 2: no interval
    short = recommend(spec, stats_of(shared=900.0, mean=1000.0), hold_s=30.0)
    assert 500 <= short.break_even_tokens <= 900 < 1000 < short.optimal_interval
    assert short.checkpoint_policy == "prompt_end+branch"
    assert short.retention_interval == 0


def test_recommend_inputs() -> None:
    spec = ModelSpec.named(QWEN)
    empty = trace_stats([])
    with pytest.raises(ConfigError, match="context_tokens"):
        recommend(spec, empty)
    given_ctx = recommend(spec, empty, context_tokens=50_000, hw="b200")
    assert given_ctx.context_tokens == 50_000 and given_ctx.hardware == "b200"
    assert "given" in given_ctx.explanation
    gap = recommend(spec, stats_of(gap=30.0))
    assert gap.hold_s == 30.0
    longer_hold = recommend(spec, stats_of(gap=30.0), hold_s=120.0)
    assert longer_hold.optimal_interval == pytest.approx(2 * gap.optimal_interval, abs=1)
    # the optimum scales as sqrt(alpha / beta): 4x the holding time -> 2x the interval
    cm = CostModel(spec, "h100")
    assert recommend(spec, stats_of(), cost_model=cm, hw="b200").hardware == "h100"
    with pytest.raises(ConfigError):
        recommend(spec, stats_of(), hold_s=0.0)


def test_recommend_without_recurrent_layers() -> None:
    dense = ModelSpec(
        name="dense",
        groups=(FullAttentionGroup(layers=4, q_heads=8, kv_heads=2, head_dim=64, dtype_bytes=2),),
        hidden_size=512,
        vocab_size=1000,
        active_mlp_params_per_token=10**7,
        num_layers=4,
    )
    rec = recommend(dense, stats_of(replay=0.9, shared=5000.0))
    assert rec.checkpoint_policy == "none"
    assert rec.optimal_interval == rec.retention_interval == 0
    assert dataclasses.is_dataclass(rec)
