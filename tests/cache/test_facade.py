"""HybridPrefixCache: the request lifecycle, the seed examples of issue 3 and bad input.

The seed examples (DESIGN.md section 1 and 2, issue 3 "Acceptance"):

(a) attention pages of 128, states every 896 tokens: attention matches 2432, the hit is 1792,
    640 tokens are recomputed;
(b) vLLM #54076: scheduler_grid="min" never lands a state on the 896 grid (reuse 0, off-grid
    states dropped and counted), "mamba" reuses 3584;
(c) LRU drops document A's branch-point state, Marconi's FLOP-aware eviction keeps it;
(d) second-sighting admission: 40 entries instead of 840, exactly 40 hits lost; 0 hits when
    every prefix is seen exactly twice.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.cache.presets import build_cache
from hycache.cache.stats import ReasonCounts
from hycache.conformance.reference import GroupConfig, ReferenceCache
from hycache.conformance.tree_target import build_components
from hycache.errors import CacheUsageError, CapacityError, ConfigError
from hycache.memory.layouts import shared_pool, unified_layout
from hycache.memory.unbounded import UnboundedStore
from hycache.policy.admission import AdmissionPolicy, AlwaysAdmit, SecondSighting
from hycache.policy.checkpoint.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends
from hycache.policy.checkpoint.marconi import MarconiPlanner
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.lru import LRUEviction
from hycache.policy.eviction.marconi import MarconiEviction
from hycache.policy.eviction.value import ValueEviction
from hycache.spec.model import FullAttentionGroup, ModelSpec, RecurrentGroup, SlidingWindowGroup
from hycache.tree.radix import RadixTree

GIB = 1 << 30
BIG = 1 << 50  # accounting only: "plenty of capacity"


def seq(base: int, n: int) -> list[int]:
    """``n`` distinct tokens starting at ``base`` (distinct bases never share a page)."""
    return list(range(base, base + n))


def tiny_spec(*, swa_window: int | None = None, full: bool = True) -> ModelSpec:
    groups: list[object] = []
    if full:
        groups.append(
            FullAttentionGroup(layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2)
        )
    if swa_window is not None:
        groups.append(
            SlidingWindowGroup(
                layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2, window=swa_window
            )
        )
    groups.append(recurrent_group())
    return ModelSpec(
        name="tiny",
        groups=tuple(groups),  # type: ignore[arg-type]
        hidden_size=64,
        vocab_size=1000,
        active_mlp_params_per_token=8192,
        num_layers=4,
    )


def recurrent_group() -> RecurrentGroup:
    return RecurrentGroup(
        layers=4,
        mixer="mamba2",
        recurrent_state_bytes=256,
        conv_state_bytes=64,
        state_dtype="float32",
        conv_dtype="float32",
        proj_params_per_layer=4096,
    )


@dataclass
class Points(CheckpointPolicy):
    """A fixed, deterministic test planner (the presets' planners evolve; these tests are
    about the cache): a checkpoint every ``every`` prompt tokens, at the prompt end and the
    branch point (rounded down to pages) and at the end of the request."""

    every: int = 0
    prompt_end: bool = True
    branch: bool = True
    final: bool = True

    def plan(self, request: PlanInput) -> PrefillPlan:
        start, n, page = request.start, request.prompt_len, request.page_size
        wanted: dict[int, str] = {}
        if self.every:
            for p in range(start - start % self.every + self.every, n + 1, self.every):
                wanted[p] = "interval"
        if self.prompt_end and n - n % page > start:
            wanted[n - n % page] = "prompt_end"
        branch = request.kv_hit - request.kv_hit % page
        if self.branch and branch > start:
            wanted[branch] = "branch"
        ends = chunk_ends(start, n, request.token_budget, must_end_at=tuple(wanted))
        total = n + request.max_new_tokens
        if self.final and request.max_new_tokens and total - total % page > n:
            wanted[total - total % page] = "final"
        checkpoints = tuple(Checkpoint(p, r) for p, r in sorted(wanted.items()))
        return PrefillPlan(tuple(ends), checkpoints, keep_final_state=False)


def every(n: int) -> Points:
    """Checkpoints at the multiples of ``n`` only."""
    return Points(every=n, prompt_end=False, branch=False, final=False)


def direct_cache(
    spec: ModelSpec,
    budget: int = BIG,
    eviction: LRUEviction | GDSFEviction | MarconiEviction | ValueEviction | None = None,
    *,
    planner: CheckpointPolicy | None = None,
    admission: AdmissionPolicy | None = None,
    page: int = 16,
    token_budget: int | None = None,
    **options: bool,
) -> HybridPrefixCache:
    """A cache on a shared pool (default: page 16, the ``Points`` planner, GDSF);
    ``options``: CacheConfig's boolean options (``read_matched_kv``, ...)."""
    return HybridPrefixCache(
        spec,
        shared_pool(spec, budget, page),
        CacheConfig(page_size=page, token_budget=token_budget, **options),
        checkpoint=planner or Points(),
        admission=admission or AlwaysAdmit(),
        eviction=eviction or GDSFEviction(),
    )


def run(cache: HybridPrefixCache, tokens: list[int], max_new: int = 0) -> Lease:
    """Admit, record every planned checkpoint, feed ``max_new`` decoded tokens, finish."""
    lease = cache.admit(tokens, max_new_tokens=max_new)
    assert isinstance(lease, Lease), lease
    cache.record_planned(lease)
    if max_new:
        cache.extend(lease, seq(900_000 + lease.request_id * 1000, max_new))
        cache.record_planned(lease)
    cache.finish(lease)
    cache.check_integrity()
    return lease


def state_positions(cache: HybridPrefixCache) -> list[int]:
    assert cache.recurrent is not None
    return sorted(n.end for n in cache.tree.iter_nodes() if cache.recurrent.has(n))


# ====================================================================== (a) 2432 / 1792 / 640
def test_seed_a_states_every_896_attention_pages_128() -> None:
    """Pages of 128 tokens, interval checkpoints every 896: request 2 shares 2500 tokens of
    request 1's 3000. Attention matches floor(2500, 128) = 2432; the deepest state at or
    below it is at 1792; 640 matched tokens are recomputed."""
    spec = ModelSpec.named("qwen3-next-80b-a3b")
    cache = direct_cache(spec, planner=every(896), page=128)
    first = run(cache, seq(0, 3000))
    assert [p.position for p in first.plan.checkpoints] == [896, 1792, 2688]
    assert state_positions(cache) == [896, 1792, 2688]
    assert cache.lookup(seq(0, 2500)) == (1792, 2432)

    second = cache.admit(seq(0, 2500) + seq(1_000_000, 500))
    assert isinstance(second, Lease)
    assert (second.kv_hit, second.hit, second.recompute) == (2432, 1792, 640)
    assert second.plan.chunk_ends[0] > 1792  # prefill starts at the hit
    stats = cache.stats()
    assert stats.kv_matched_tokens == 2432
    assert stats.reused_tokens == 1792
    assert stats.recompute_tokens == 640
    cache.abort(second)
    cache.check_integrity()


def test_seed_a_at_tree_level() -> None:
    """The same example on the bare tree (and the brute-force reference): states only at
    multiples of 896, KV in pages of 128."""
    groups = [GroupConfig("full"), GroupConfig("recurrent")]
    store = UnboundedStore()
    tree = RadixTree(128, build_components(groups, store))
    ref = ReferenceCache(128, groups)
    first = seq(0, 3000)
    tree.insert(first)
    recurrent = tree.components[1]
    for p in (896, 1792, 2688):
        node = tree.split_at(first, p)
        assert recurrent.put(node)  # type: ignore[attr-defined]
    ref.insert(first, states_at=(896, 1792, 2688))
    query = seq(0, 2500) + seq(1_000_000, 500)
    result = tree.match(query)
    assert (result.kv_hit, result.hit, result.recompute) == (2432, 1792, 640)
    assert ref.match(query) == (1792, 2432)


# ====================================================================== (b) vLLM #54076
QWEN35 = "qwen3.5-27b"


def vllm_54076(grid: str, backend: str = "flashinfer") -> HybridPrefixCache:
    return build_cache(
        ModelSpec.named(QWEN35),
        200 * GIB,
        "vllm",
        block_size=128,
        retention_interval=None,
        other_block_sizes="128",
        max_num_batched_tokens=2048,
        scheduler_grid=grid,
        gdn_backend=backend,
    )


def three_requests(cache: HybridPrefixCache) -> list[Lease]:
    shared = seq(0, 4000)
    leases = []
    for i in range(3):
        leases.append(run(cache, shared + seq(1_000_000 * (i + 1), 2000)))
    return leases


def test_seed_b_qwen35_block_pads_to_896() -> None:
    spec = ModelSpec.named(QWEN35)
    assert spec.recurrent is not None and spec.full is not None
    assert spec.recurrent.state_bytes_per_layer == 3_207_168  # GDN state fp32, conv bf16
    assert spec.full.kv_bytes_per_token_per_layer == 4096
    assert unified_layout(spec, 128).attn_block == 896
    cache = vllm_54076("mamba")
    assert cache.page_size == 896
    assert cache.checkpoint_policy.state_grid == 896


def test_seed_b_min_grid_reuses_nothing_and_never_publishes_off_grid() -> None:
    """Triton GDN backend (no state exported inside a chunk): the scheduler cuts 2048-token
    chunks on the 128 grid; chunk ends 2048, 4096 and 5888 are never multiples of 896, so every
    dense-retention state is dropped (and counted); request 2 matches 3584 tokens of attention
    but reuses 0. Only the shared-prefix junction it stops at (3584, on the grid) keeps a state,
    which request 3 reuses."""
    cache = vllm_54076("min", "triton")
    leases = three_requests(cache)
    assert leases[0].plan.chunk_ends == (2048, 4096, 5888, 6000)
    assert [lease.hit for lease in leases] == [0, 0, 3584]
    assert [lease.kv_hit for lease in leases] == [0, 3584, 3584]
    stats = cache.stats()
    assert stats.reused_tokens == 3584
    assert stats.recompute_tokens == 3584
    assert stats.offgrid_dropped == 8  # 3 + 3 + 2 off-grid chunk ends
    assert stats.offgrid_misplaced == 0
    assert stats.states_inserted == 1
    assert state_positions(cache) == [3584]


def test_seed_b_flashinfer_exports_grid_states_despite_the_min_grid() -> None:
    """FlashInfer's GDN prefill exports the block-boundary state inside a chunk: request 1's
    first chunk leaves one at 1792, which request 2 resumes from."""
    leases = three_requests(vllm_54076("min"))
    assert [lease.hit for lease in leases] == [0, 1792, 3584]


def test_seed_b_mamba_grid_reuses_3584() -> None:
    """Cut on the recurrent block: chunk ends 1792, 3584, 5376 land on the grid; request 2 and
    3 resume from the state at 3584, the deepest 896-multiple inside the shared 4000."""
    cache = vllm_54076("mamba")
    leases = three_requests(cache)
    assert leases[0].plan.chunk_ends == (1792, 3584, 5376, 6000)
    assert [lease.hit for lease in leases] == [0, 3584, 3584]
    assert cache.stats().reused_tokens == 2 * 3584
    assert all(p % 896 == 0 for p in state_positions(cache))
    assert 3584 in state_positions(cache)


def test_seed_b_misplace_publishes_states_at_the_wrong_position() -> None:
    """The silent half of #54076 (opt-in): a state taken at 2048 is filed at 1792. It is
    counted, and the tree still only holds grid positions."""
    cache = build_cache(
        ModelSpec.named(QWEN35),
        200 * GIB,
        "vllm",
        block_size=128,
        retention_interval=None,
        other_block_sizes="128",
        max_num_batched_tokens=2048,
        scheduler_grid="min",
        offgrid="misplace",
    )
    three_requests(cache)
    assert cache.stats().offgrid_misplaced > 0
    assert all(p % 896 == 0 for p in state_positions(cache))


# ====================================================================== (c) LRU vs Marconi
def states_only_spec() -> ModelSpec:
    return ModelSpec(
        name="states-only",
        groups=(recurrent_group(),),
        hidden_size=64,
        vocab_size=1000,
        active_mlp_params_per_token=8192,
        num_layers=4,
    )


def capped_cache(eviction: LRUEviction | MarconiEviction) -> HybridPrefixCache:
    """A states-only cache: 5 cached states plus the running request's slot, page 512,
    prefill chunks of 1024 tokens, Marconi's checkpoints (branch point + end of sequence)."""
    spec = states_only_spec()
    unit = shared_pool(spec, 1, 512).unit_bytes("recurrent")
    pool = shared_pool(spec, (5 + 1) * unit, 512)
    return HybridPrefixCache(
        spec,
        pool,
        CacheConfig(page_size=512, running_slots=1, token_budget=1024),
        checkpoint=MarconiPlanner(),
        admission=AlwaysAdmit(),
        eviction=eviction,
    )


SYSTEM = seq(0, 1024)  # a system prompt every request of the session starts with
DOC_A = seq(10_000, 1536)  # document A: SYSTEM + DOC_A is the 2,560-token shared prefix


def marconi_vs_lru_requests() -> list[tuple[str, list[int]]]:
    return [
        ("R1", SYSTEM + DOC_A + seq(20_000, 512)),  # question 1 on A: state at its end
        ("R2", SYSTEM + DOC_A + seq(21_000, 512)),  # question 2 on A: branch state at 2560
        ("R3", SYSTEM + seq(22_000, 512)),  # plain chat: branch state at 1024
        ("X1", seq(100_000, 512)),  # one-off requests, nothing shared
        ("X2", seq(200_000, 512)),
        ("X3", seq(300_000, 512)),
        ("X4", seq(400_000, 512)),
        ("R4", SYSTEM + seq(23_000, 512)),  # chat again: resumes from 1024
        ("R5", SYSTEM + DOC_A + seq(24_000, 512)),  # question 5 on A
    ]


@pytest.mark.parametrize(
    ("name", "eviction", "expected"),
    [("lru", LRUEviction(), 1024), ("marconi", MarconiEviction(alpha=1.0), 2560)],
)
def test_seed_c_marconi_keeps_the_branch_point_lru_drops(
    name: str, eviction: LRUEviction | MarconiEviction, expected: int
) -> None:
    """Sequence (every request prefilled in 1024-token chunks, no decode):

    R1 = S + A + q1    S: 1,024-token system prompt, A: 1,536-token document;
                       stores the state at its end (3072).
    R2 = S + A + q2    attention/token match 2560 runs past the last state: Marconi's
                       speculative insertion checkpoints A's branch point 2560.
    R3 = S + q3        branch point 1024 (the system prompt) and its end 1536.
    X1..X4             four unrelated 512-token one-offs; each admission needs a slot.
    R4 = S + q4        resumes from 1024 (refreshes it).
    R5 = S + A + q5    resumes from 2560 if A's branch state survived, else from 1024.

    Both caches hold 5 states plus the running slot (6 after a finish donates the running
    state, until the next admission evicts). X2..X4 and R4 each need one slot:

    LRU (recency only): X2 evicts q1's end; X3 q2's end and X4 A's branch state (both stamped
    at R2; ties go tail first); R4 evicts R3's end. The state at 1024 was refreshed by R4, so
    R5 resumes from 1,024.
    Marconi (alpha 1): X2 and X3 also evict the two question ends (same FLOPs per byte, the
    oldest), but A's branch node, never a candidate while it had two children, is now a leaf
    whose 1,536-token edge gives the most FLOPs saved per byte: X4 evicts R3's end instead,
    R4 and R5 a one-off each, so R5 resumes from 2,560."""
    cache = capped_cache(eviction)
    hits = {}
    for label, tokens in marconi_vs_lru_requests():
        lease = run(cache, tokens)
        hits[label] = lease.hit
        assert cache.pool.used_bytes <= cache.pool.budget_bytes
        # never more than 5 cached states plus the (donated) running one
        assert len(state_positions(cache)) <= 6
    assert hits["R1"] == hits["R2"] == hits["R3"] == 0
    assert hits["R4"] == 1024
    assert hits["R5"] == expected, name
    assert cache.stats().evictions.get("recurrent", 0) > 0


def test_seed_c_branch_state_is_recorded() -> None:
    """R2's plan really takes the speculative branch-point checkpoint at 2560 and R3's at
    1024 (chunks end there so the state can be copied)."""
    cache = capped_cache(LRUEviction())
    requests = dict(marconi_vs_lru_requests())
    run(cache, requests["R1"])
    r2 = run(cache, requests["R2"])
    assert r2.kv_hit == 2560 and r2.hit == 0
    assert [(p.position, p.reason) for p in r2.plan.checkpoints] == [(2560, "branch")]
    assert 2560 in r2.plan.chunk_ends
    r3 = run(cache, requests["R3"])
    assert [(p.position, p.reason) for p in r3.plan.checkpoints] == [(1024, "branch")]
    assert state_positions(cache) == [1024, 1536, 2560, 3072, 3072]


# ====================================================================== (d) second sighting
PREFIX = 64


def replay_prefixes(admission: str, sightings: list[tuple[int, int]]) -> HybridPrefixCache:
    """Each sighting of prefix ``i`` is one request: the prefix (64 distinct tokens, no page
    shared with another prefix) plus one extra token, so its prompt-end checkpoint lands at
    the prefix end (page 16). Checkpoints at the prompt end and the branch point only."""
    policy = SecondSighting() if admission == "second_sighting" else AlwaysAdmit()
    cache = direct_cache(
        ModelSpec.named("qwen3-next-80b-a3b"), planner=Points(final=False), admission=policy
    )
    order = [i for i, times in sightings for _ in range(times)]
    random.Random(3).shuffle(order)
    for n, i in enumerate(order):
        run(cache, [*seq(i * PREFIX, PREFIX), 10_000_000 + n])
    return cache


def test_seed_d_preset_knob_selects_second_sighting() -> None:
    for preset in ("hycache", "vllm"):
        cache = build_cache(tiny_spec(), GIB, preset, admission="second_sighting")
        assert isinstance(cache.admission, SecondSighting)
        assert isinstance(build_cache(tiny_spec(), GIB, preset).admission, AlwaysAdmit)


def test_seed_d_second_sighting_stores_40_not_840_and_loses_40_hits() -> None:
    sightings = [(i, 1) for i in range(800)] + [(800 + i, 12) for i in range(40)]
    always = replay_prefixes("always", sightings).stats()
    second = replay_prefixes("second_sighting", sightings).stats()
    assert always.requests == second.requests == 800 + 40 * 12
    assert always.states_inserted == 840
    assert second.states_inserted == 40
    assert always.requests_hit == 40 * 11
    assert second.requests_hit == 40 * 10
    assert always.requests_hit - second.requests_hit == 40


def test_seed_d_every_prefix_seen_twice_gets_no_hit() -> None:
    sightings = [(i, 2) for i in range(300)]
    always = replay_prefixes("always", sightings).stats()
    second = replay_prefixes("second_sighting", sightings).stats()
    assert always.requests_hit == 300
    assert second.requests_hit == 0
    assert second.states_inserted == 300  # stored on the second sighting, never used


# ====================================================================== lifecycle
def test_lifecycle_admit_plan_record_extend_finish() -> None:
    spec = tiny_spec()
    cache = direct_cache(spec, token_budget=32)
    lease = cache.admit(seq(0, 100), max_new_tokens=28)
    assert isinstance(lease, Lease)
    assert lease.hit == 0 and lease.source_state is None
    assert lease.plan.chunk_ends[-1] == 100
    assert all(
        b - a <= 32
        for a, b in zip((0, *lease.plan.chunk_ends), lease.plan.chunk_ends, strict=False)
    )
    assert (96, "prompt_end") in [(p.position, p.reason) for p in lease.plan.checkpoints]
    slot = cache.record_checkpoint(lease, 96, "prompt_end")
    assert slot is not None
    assert cache.record_checkpoint(lease, 96, "prompt_end") == slot  # idempotent
    assert cache.record_checkpoint(lease, 40) is None  # off the page grid: dropped
    cache.extend(lease, seq(5000, 28))
    assert lease.length == 128
    cache.record_planned(lease)
    with pytest.raises(CacheUsageError):
        cache.extend(lease, [1])  # more than max_new_tokens
    result = cache.finish(lease)
    assert result.cached_tokens == 128
    assert {96, 128} <= set(result.states_inserted)  # prompt end + end of the request
    cache.check_integrity()
    # the next turn resumes at the end of the previous one
    turn = cache.admit(seq(0, 100) + seq(5000, 28) + seq(7000, 10))
    assert isinstance(turn, Lease)
    assert turn.hit == 128 and turn.source_state is not None
    assert cache.stats().cow_copies == 1
    cache.finish(turn)
    with pytest.raises(CacheUsageError):
        cache.finish(turn)  # not in flight any more
    with pytest.raises(CacheUsageError):
        cache.record_checkpoint(turn, 144)
    cache.check_integrity()


def test_last_prompt_token_is_always_recomputed() -> None:
    cache = direct_cache(tiny_spec())
    run(cache, seq(0, 64), max_new=0)  # prompt-end + final state at 64
    assert 64 in state_positions(cache)
    again = cache.admit(seq(0, 64))
    assert isinstance(again, Lease)
    assert again.hit == 48 or again.hit == 0  # never 64: at most n - 1, page-aligned
    assert again.hit <= 63
    cache.abort(again)


def test_record_checkpoint_outside_the_request_is_an_error() -> None:
    cache = direct_cache(tiny_spec())
    lease = cache.admit(seq(0, 40))
    assert isinstance(lease, Lease)
    with pytest.raises(CacheUsageError):
        cache.record_checkpoint(lease, 0)
    with pytest.raises(CacheUsageError):
        cache.record_checkpoint(lease, 48)
    with pytest.raises(CacheUsageError):
        cache.clear()  # a request is in flight
    cache.abort(lease)
    with pytest.raises(CacheUsageError):
        cache.abort(lease)
    with pytest.raises(CacheUsageError):
        cache.admit([])
    with pytest.raises(CacheUsageError):
        cache.admit([1, 2], max_new_tokens=-1)


def test_abort_releases_everything_and_inserts_nothing() -> None:
    cache = direct_cache(tiny_spec())
    run(cache, seq(0, 64))
    used, units = cache.pool.used_bytes, dict(cache.pool.units)
    before = [(n.start, n.end) for n in cache.tree.iter_nodes()]
    lease = cache.admit(seq(0, 64) + seq(500, 60), max_new_tokens=10)
    assert isinstance(lease, Lease)
    assert lease.hit == 64 and lease.locked is not None and lease.locked.lock_ref == 1
    assert cache.record_planned(lease)
    cache.extend(lease, seq(900, 10))
    assert cache.pool.used_bytes > used
    cache.abort(lease)
    cache.check_integrity()
    assert cache.pool.used_bytes == used and cache.pool.units == units
    assert all(n.lock_ref == 0 for n in cache.tree.iter_nodes())
    assert cache.lookup(seq(0, 64) + seq(500, 60)) == (64, 64)
    assert cache.stats().aborts == 1
    assert [(n.start, n.end) for n in cache.tree.iter_nodes()] == before


def test_finish_stores_whole_pages_and_only_states_it_can_place() -> None:
    """Finish never half-inserts: KV is cached in whole pages only (the partial tail page is
    dropped), a state past the cached KV is refused and its slot freed, and everything
    reported as stored is in the tree."""
    cache = direct_cache(tiny_spec())
    lease = cache.admit(seq(0, 70), max_new_tokens=5)
    assert isinstance(lease, Lease)
    cache.record_planned(lease)
    cache.extend(lease, seq(800, 5))
    slot = cache.record_checkpoint(lease, 75, "decode")  # off the page grid
    assert slot is None
    result = cache.finish(lease)
    assert result.cached_tokens == 64
    full = seq(0, 70) + seq(800, 5)
    assert cache.lookup(full)[1] == 64
    for p in result.states_inserted:
        assert cache.lookup(full[:p])[0] == p
    cache.check_integrity()


def test_finish_with_a_checkpoint_at_the_request_end_does_not_leak_the_running_slot() -> None:
    """Regression: with ``keep_final_state`` and a recorded checkpoint at the very end, the
    running slot was popped for a final state that was never stored and never freed."""
    cache = build_cache(tiny_spec(), BIG, "sglang", strategy="no_buffer")
    lease = cache.admit([7])  # one token: its only chunk ends at 1, the request end
    assert isinstance(lease, Lease)
    assert cache.record_planned(lease) == [1]
    cache.finish(lease)
    cache.check_integrity()  # pool units == tree holdings
    assert cache.pool.units["recurrent"] == 1
    cache.clear()
    assert cache.pool.used_bytes == 0


def test_states_only_finish_leaves_no_empty_leaf() -> None:
    """Regression: without a KV component, finish inserted a data-less path; the part past
    the last stored state stayed as an empty leaf (nothing to evict, a phantom match)."""
    cache = direct_cache(states_only_spec(), admission=SecondSighting())
    lease = run(cache, [*seq(0, 64), 99])  # prompt-end state refused (first sighting)
    assert lease.hit == 0
    assert list(cache.tree.iter_nodes()) == []
    assert cache.lookup(seq(0, 65)) == (0, 0)
    run(cache, [*seq(0, 64), 98])  # second sighting: stored
    assert state_positions(cache) == [64]
    third = run(cache, [*seq(0, 64), 97])
    assert third.hit == 64


def test_finish_reports_no_state_the_per_path_cap_removed() -> None:
    """Regression: FinishResult listed states that the per-path cap dropped at once."""
    cache = build_cache(
        tiny_spec(),
        BIG,
        "sglang",
        strategy="extra_buffer",
        page_size=16,
        track_interval=16,
        max_states_per_path=1,
    )
    lease = cache.admit(seq(0, 9), max_new_tokens=23)
    assert isinstance(lease, Lease)
    cache.extend(lease, seq(500, 23))
    cache.record_planned(lease)
    result = cache.finish(lease)
    full = seq(0, 9) + seq(500, 23)
    assert cache.stats().states_capped >= 1
    for p in result.states_inserted:
        assert cache.lookup(full[:p])[0] == p
    assert len(state_positions(cache)) == 1


# ====================================================================== memory: wait / capacity
def per_request_bytes(cache: HybridPrefixCache, tokens: int) -> int:
    page = cache.page_size
    need = cache.pool.demand_bytes(
        {**{c.kind: -(-tokens // page) for c in cache.kv_components}, "recurrent": 1}
    )
    return sum(need.values())


def test_wait_when_memory_is_held_by_a_request_in_flight() -> None:
    spec = tiny_spec()
    probe = direct_cache(spec)
    budget = per_request_bytes(probe, 112) + per_request_bytes(probe, 64) // 2
    cache = direct_cache(spec, budget)
    first = cache.admit(seq(0, 100), max_new_tokens=12)
    assert isinstance(first, Lease)
    second = cache.admit(seq(1000, 64))
    assert isinstance(second, Wait)
    assert second.short_bytes and all(v > 0 for v in second.short_bytes.values())
    assert cache.stats().waits == 1
    cache.check_integrity()
    cache.finish(first)
    again = cache.admit(seq(1000, 64))  # fits once the first request is done (evicting it)
    assert isinstance(again, Lease)
    cache.finish(again)
    cache.check_integrity()
    assert cache.pool.used_bytes <= cache.pool.budget_bytes


def test_capacity_error_names_the_pool_and_the_bytes() -> None:
    spec = tiny_spec()
    cache = build_cache(spec, 4096, "hycache", page_size=16)
    with pytest.raises(CapacityError, match=r"bytes.*shared\(bytes=0/4096B\)"):
        cache.admit(seq(0, 500))
    cache.check_integrity()
    assert cache.pool.used_bytes == 0
    split = build_cache(spec, 4096, "sglang")
    with pytest.raises(CapacityError, match=r"split\(.*kv=.*B"):
        split.admit(seq(0, 500))
    unified = build_cache(spec, 4096, "vllm")
    with pytest.raises(CapacityError, match=r"unified\(blocks="):
        unified.admit(seq(0, 500))


def test_capacity_error_counts_the_reused_prefix_too() -> None:
    """A request whose whole sequence can never fit is refused even when a long cached
    prefix makes its new part small (the prefix pages are part of its working set)."""
    spec = tiny_spec()
    probe = direct_cache(spec)
    cache = direct_cache(spec, per_request_bytes(probe, 96))
    run(cache, seq(0, 80))
    with pytest.raises(CapacityError):
        cache.admit(seq(0, 80) + seq(900, 40))
    cache.check_integrity()
    assert all(n.lock_ref == 0 for n in cache.tree.iter_nodes())


def test_own_reused_path_never_causes_an_endless_wait() -> None:
    """Regression: with nothing in flight, a request whose locked prefix (and the states on
    it) left too little room for its new tokens got a Wait no finish could ever end. It is
    now admitted as a miss (the cached prefix is evicted as needed)."""
    spec = tiny_spec()
    # one 174-token sequence plus one state
    cache = build_cache(spec, 174 * spec.kv_bytes_per_token + spec.state_bytes, "marconi")
    zeros = [0] * 200

    def request(prompt: int, new: int) -> Lease:
        lease = cache.admit(zeros[:prompt], max_new_tokens=new)
        assert isinstance(lease, Lease), lease
        cache.extend(lease, zeros[:new])
        cache.record_planned(lease)
        cache.finish(lease)
        cache.check_integrity()
        return lease

    request(94, 20)  # state at 114
    request(114, 16)  # branch state at 113, state at 130
    assert cache.lookup(zeros[:146])[0] == 130
    lease = request(147, 4)  # 130 locked + 21 new pages + 3 states > budget: a miss
    assert lease.hit == 0


@pytest.mark.parametrize("eviction", [LRUEviction, GDSFEviction, MarconiEviction])
def test_eviction_cascades_to_a_parent_that_became_a_leaf(
    eviction: type[LRUEviction] | type[GDSFEviction] | type[MarconiEviction],
) -> None:
    """Regression: one eviction round could not evict a node whose last child it had just
    evicted (Marconi ranks the candidates once per round, a heap policy sets a non-leaf
    aside), so a request that fits the empty pool got a Wait with nothing in flight."""
    spec = tiny_spec()
    budget = 10 * 16 * spec.kv_bytes_per_token + spec.state_bytes  # 160 tokens + 1 state
    cache = direct_cache(spec, budget, eviction(), planner=every(32))
    run(cache, seq(0, 32))  # parent [0, 32) with a state at 32
    second = run(cache, seq(0, 32) + seq(100, 33))  # refreshes the parent; child [32, 64)
    assert second.hit == 32
    big = cache.admit(seq(5000, 160))  # needs the whole budget
    assert isinstance(big, Lease), big
    cache.finish(big)
    cache.check_integrity()
    assert cache.lookup(seq(0, 64)) == (0, 0)


@pytest.mark.parametrize("eviction", [LRUEviction, GDSFEviction])
def test_nodes_created_by_state_splits_stay_evictable(
    eviction: type[LRUEviction] | type[GDSFEviction],
) -> None:
    """Regression: the upper node a state split creates holds KV pages the heap policies had
    never been told about, so they could never be evicted: the next request had to wait
    forever although nothing was in flight."""
    spec = tiny_spec()
    budget = 8 * 16 * spec.kv_bytes_per_token + 4 * spec.state_bytes
    cache = direct_cache(spec, budget, eviction(), planner=every(32))
    first = run(cache, seq(0, 120))  # states at 32, 64, 96 split [0, 112) into four nodes
    assert first.hit == 0
    assert [(n.start, n.end) for n in cache.tree.iter_nodes()] != [(0, 112)]
    assert state_positions(cache) == [32, 64, 96]
    second = run(cache, seq(10_000, 120))  # needs all 8 pages: the first request must go
    assert second.hit == 0
    assert cache.lookup(seq(0, 120)) == (0, 0)
    assert state_positions(cache) == [32, 64, 96]


# ====================================================================== bad configuration
def test_page_size_must_divide_the_window() -> None:
    spec = tiny_spec(swa_window=100)
    with pytest.raises(ConfigError, match=r"page size 16 .*window 100"):
        build_cache(spec, GIB, "hycache", page_size=16)
    build_cache(spec, GIB, "hycache", page_size=4)  # 4 divides 100


def test_unknown_preset_or_knob() -> None:
    spec = tiny_spec()
    with pytest.raises(ConfigError, match="nope"):
        build_cache(spec, GIB, "nope")
    with pytest.raises(ConfigError, match="bogus"):
        build_cache(spec, GIB, "vllm", bogus=1)
    with pytest.raises(ConfigError, match="track_interval"):
        build_cache(spec, GIB, "vllm", track_interval=64)  # an sglang knob


@pytest.mark.parametrize(
    ("preset", "knobs", "names"),
    [
        ("vllm", {"scheduler_grid": "x"}, "scheduler_grid"),
        ("vllm", {"block_size": "big"}, "block_size"),
        ("vllm", {"block_size": 0}, "block_size"),
        ("vllm", {"mamba_cache_mode": "all"}, "mamba_cache_mode"),
        ("vllm", {"retention_interval": -1}, "retention_interval"),
        ("vllm", {"offgrid": "ignore"}, "offgrid"),
        ("sglang", {"strategy": "no_buffer", "page_size": 16}, "no_buffer"),
        ("sglang", {"strategy": "ping_pong"}, "strategy"),
        ("sglang", {"strategy": "extra_buffer", "page_size": 16, "track_interval": 24}, "24"),
        ("sglang", {"mamba_full_memory_ratio": 0}, "ratio"),
        ("sglang", {"session_aware": "maybe"}, "session_aware"),
        ("marconi", {"alpha": "high"}, "alpha"),
        ("hycache", {"admission": "sometimes"}, "admission"),
        ("hycache", {"page_size": 2.5}, "page_size"),
        ("hycache", {"token_budget": 0}, "budget"),
    ],
)
def test_bad_knob_values(preset: str, knobs: dict[str, object], names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        build_cache(tiny_spec(), GIB, preset, **knobs)


def test_bad_budget_is_a_config_error() -> None:
    for preset in ("vllm", "sglang", "marconi", "hycache"):
        with pytest.raises(ConfigError, match="budget"):
            build_cache(tiny_spec(), 0, preset)


def test_knob_strings_are_coerced() -> None:
    cache = build_cache(
        tiny_spec(), GIB, "vllm", retention_interval="none", block_size="32", scheduler_grid="mamba"
    )
    assert cache.page_size == 32
    cache = build_cache(tiny_spec(), GIB, "sglang", session_aware="true")
    assert cache.name == "sglang"


def test_mamba_cache_mode_none_keeps_no_state() -> None:
    cache = build_cache(tiny_spec(), GIB, "vllm", mamba_cache_mode="none")
    lease = run(cache, seq(0, 100))
    assert lease.hit == 0
    assert state_positions(cache) == []
    assert cache.lookup(seq(0, 100)) == (0, 96)


# ====================================================================== stats and namespaces
def test_stats_keep_kv_and_state_apart() -> None:
    cache = direct_cache(tiny_spec())
    run(cache, seq(0, 64))
    stats = cache.stats()
    spec = cache.spec
    assert stats.kv_bytes == 64 * spec.kv_bytes_per_token
    assert stats.state_bytes == len(state_positions(cache)) * spec.state_bytes
    assert stats.used_bytes == stats.kv_bytes + stats.state_bytes
    assert stats.padding_waste_bytes == 0  # shared pool: nothing padded
    assert stats.component_misses == {"full": 1, "recurrent": 1}
    lease = run(cache, seq(0, 64) + seq(70, 10))
    assert lease.hit == 64
    stats = cache.stats()
    assert stats.component_hits == {"full": 1, "recurrent": 1}
    assert stats.token_hit_rate == pytest.approx(64 / (64 + 74))


def test_namespaces_never_share() -> None:
    cache = direct_cache(tiny_spec())
    lease = cache.admit(seq(0, 64), namespace="a")
    assert isinstance(lease, Lease)
    cache.record_planned(lease)
    cache.finish(lease)
    other = cache.admit([*seq(0, 64), 1], namespace="b")
    assert isinstance(other, Lease) and other.hit == 0 and other.kv_hit == 0
    cache.abort(other)
    same = cache.admit([*seq(0, 64), 1], namespace="a")
    assert isinstance(same, Lease) and same.hit == 64
    cache.abort(same)
    cache.check_integrity()


@pytest.mark.parametrize("eviction", [LRUEviction, GDSFEviction])
def test_session_aware_protects_live_sessions(
    eviction: type[LRUEviction] | type[GDSFEviction],
) -> None:
    """Entries of a live session go last; after end_session they lose that protection."""
    spec = tiny_spec()
    budget = 3 * (4 * 16 * spec.kv_bytes_per_token + 3 * spec.state_bytes)
    cache = direct_cache(spec, budget, eviction(session_aware=True), planner=every(32))
    lease = cache.admit(seq(0, 64), session="s")
    assert isinstance(lease, Lease)
    cache.record_planned(lease)
    cache.finish(lease)
    for i in range(1, 8):
        run(cache, seq(1000 * i, 64))
        assert cache.lookup(seq(0, 64)) == (64, 64)  # the live session survives the churn
    assert cache.stats().evictions
    cache.end_session("s")
    for i in range(8, 12):
        run(cache, seq(1000 * i, 64))
    assert cache.lookup(seq(0, 64)) == (0, 0)


def test_publish_shares_a_running_requests_prompt_and_states() -> None:
    """After ``publish`` a request arriving while the first still decodes reuses its prompt
    up to the state the first copied during prefill; the budget holds at every step."""
    s = tiny_spec()
    budget = s.kv_bytes_per_token * 2000 + s.state_bytes * 8
    cache = direct_cache(s, budget, planner=every(64))
    doc = seq(1000, 256)
    first = cache.admit([*doc, *seq(5000, 20)], max_new_tokens=30)
    assert isinstance(first, Lease)
    cache.record_planned(first, up_to=first.prompt_len)
    assert cache.lookup([*doc, 1])[1] == 0  # nothing shared before publishing
    stored = cache.publish(first).states_inserted
    cache.check_integrity()
    assert stored and max(stored) == 256 and cache.pool.used_bytes <= budget
    second = cache.admit([*doc, *seq(7000, 40)], max_new_tokens=5)
    assert isinstance(second, Lease) and second.hit == 256
    cache.check_integrity()
    cache.extend(first, seq(9000, 30))
    cache.finish(first)
    cache.check_integrity()
    cache.finish(second)
    cache.check_integrity()
    assert cache.pool.used_bytes <= budget and not cache.requests_in_flight()


def test_publish_without_room_keeps_the_request_whole() -> None:
    """A request whose pages cannot move into the tree keeps them; nothing is published."""
    s = tiny_spec()
    cache = direct_cache(s, planner=every(64))
    lease = cache.admit(seq(1000, 128), max_new_tokens=4)
    assert isinstance(lease, Lease)
    cache.record_planned(lease, up_to=lease.prompt_len)
    before = dict(cache.pool.units)
    cache.accounting.ensure = lambda demand: {"bytes": 1}  # type: ignore[method-assign]
    assert cache.publish(lease).cached_tokens == 0
    assert dict(cache.pool.units) == before and cache.lookup(seq(1000, 128))[1] == 0
    del cache.accounting.ensure
    cache.extend(lease, seq(9000, 4))
    cache.finish(lease)
    cache.check_integrity()


def test_stats_count_checkpoints_by_reason_skipped_ones_included() -> None:
    """A checkpoint that no state slot can be had for (the budget holds the working set and
    less than one more state) is skipped and counted under its reason; stored states and the
    hits that resume from them are counted under theirs."""
    spec = tiny_spec()
    probe = direct_cache(spec)
    lease = probe.admit(seq(0, 100), max_new_tokens=28)
    assert isinstance(lease, Lease)
    working = probe.usage().used_bytes
    probe.abort(lease)
    tight = direct_cache(spec, budget=working + spec.state_bytes - 1)
    lease = tight.admit(seq(0, 100), max_new_tokens=28)
    assert isinstance(lease, Lease)
    assert tight.record_checkpoint(lease, 96, "prompt_end") is None
    tight.abort(lease)
    stats = tight.stats()
    assert stats.checkpoints_skipped == 1
    assert stats.reasons["prompt_end"] == ReasonCounts(inserted=0, hits=0, skipped=1)
    roomy = direct_cache(spec)
    first = run(roomy, seq(0, 100), max_new=28)
    output = seq(900_000 + first.request_id * 1000, 28)  # what ``run`` decoded
    again = run(roomy, [*seq(0, 100), *output, *seq(7000, 10)])
    assert again.hit == 128  # resumed from the end of the first request
    stats = roomy.stats()
    assert stats.reasons["final"].hits == 1 and stats.reasons["final"].inserted >= 1
    assert sum(c.inserted for c in stats.reasons.values()) == stats.states_inserted
    assert sum(c.skipped for c in stats.reasons.values()) == stats.checkpoints_skipped == 0
