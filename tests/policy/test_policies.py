"""Policy unit tests: eviction order (vLLM LRU, SGLang per-component LRU, GDSF, Marconi),
Marconi's alpha bootstrap, admission, checkpoint planners and preset knobs.

Eviction tests drive a real cache (so entries are registered through the normal hooks) and
then ask the policy directly for its victims, evicting them the way the cache does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.cache.presets import KNOBS, build_cache, resolve_knobs
from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import ConfigError
from hycache.memory.layouts import shared_pool, split_pool
from hycache.memory.pool import MemoryPool
from hycache.policy.admission import AlwaysAdmit, SecondSighting
from hycache.policy.checkpoint.base import Checkpoint, CheckpointPolicy, PlanInput, PrefillPlan
from hycache.policy.checkpoint.chunks import chunk_ends
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.checkpoint.marconi import MarconiPlanner
from hycache.policy.checkpoint.sglang import SglangPlanner
from hycache.policy.checkpoint.vllm import VllmAlignPlanner
from hycache.policy.eviction.base import EvictionPolicy
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.heap import COMPACT_SLACK, HeapEviction
from hycache.policy.eviction.lru import LRUEviction
from hycache.policy.eviction.marconi import ALPHA_GRID, MarconiEviction, pick_alpha
from hycache.spec.model import FullAttentionGroup, ModelSpec, RecurrentGroup
from hycache.tree.node import Node

BIG = 1 << 40


def seq(base: int, n: int) -> list[int]:
    return list(range(base, base + n))


def spec(*, full: bool = True) -> ModelSpec:
    groups: list[object] = []
    if full:
        groups.append(
            FullAttentionGroup(layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2)
        )
    groups.append(
        RecurrentGroup(
            layers=4,
            mixer="mamba2",
            recurrent_state_bytes=256,
            conv_state_bytes=64,
            state_dtype="float32",
            conv_dtype="float32",
            proj_params_per_layer=4096,
        )
    )
    return ModelSpec(
        name="tiny",
        groups=tuple(groups),  # type: ignore[arg-type]
        hidden_size=64,
        vocab_size=1000,
        active_mlp_params_per_token=8192,
        num_layers=4,
    )


@dataclass
class Fixed(CheckpointPolicy):
    """Checkpoints at every multiple of ``every`` inside the prompt, or (``every`` 0) only
    at the prompt end rounded down to the page."""

    every: int = 0

    def plan(self, request: PlanInput) -> PrefillPlan:
        start, n, page = request.start, request.prompt_len, request.page_size
        if self.every:
            points = tuple(range(start - start % self.every + self.every, n + 1, self.every))
        else:
            end = n - n % page
            points = (end,) if end > start else ()
        ends = chunk_ends(start, n, request.token_budget, must_end_at=points)
        return PrefillPlan(
            tuple(ends), tuple(Checkpoint(p, "interval") for p in points), keep_final_state=False
        )


def make(
    eviction: EvictionPolicy, *, every: int = 0, pool: MemoryPool | None = None
) -> HybridPrefixCache:
    s = spec()
    return HybridPrefixCache(
        s,
        pool or split_pool(s, BIG, page_size=16),
        CacheConfig(page_size=16),
        checkpoint=Fixed(every),
        admission=AlwaysAdmit(),
        eviction=eviction,
    )


def run(cache: HybridPrefixCache, tokens: list[int]) -> Lease:
    lease = cache.admit(tokens)
    assert isinstance(lease, Lease)
    cache.record_planned(lease)
    cache.finish(lease)
    cache.check_integrity()
    return lease


def serve_turn(
    cache: HybridPrefixCache, history: list[int], rng: random.Random, output_len: int
) -> None:
    """One conversation turn: ``history`` is admitted, ``output_len`` random tokens decoded
    and appended to it; the budget and every invariant are checked after."""
    lease = cache.admit(history, max_new_tokens=output_len)
    assert isinstance(lease, Lease)
    cache.record_planned(lease, up_to=lease.prompt_len)
    output = [rng.randrange(1000) for _ in range(output_len)]
    cache.extend(lease, output)
    cache.record_planned(lease)
    cache.finish(lease)
    history.extend(output)
    cache.check_integrity()
    assert cache.pool.used_bytes <= cache.pool.budget_bytes


def random_turn(
    cache: HybridPrefixCache,
    sessions: list[list[int]],
    rng: random.Random,
    prompt: tuple[int, int],
    output_len: int,
) -> list[int]:
    """A turn of a random session: between ``prompt`` random tokens appended, then served
    (``serve_turn``). Returns the session's history."""
    history = sessions[rng.randrange(len(sessions))]
    history.extend(rng.randrange(1000) for _ in range(rng.randint(*prompt)))
    serve_turn(cache, history, rng, output_len)
    return history


def victims(cache: HybridPrefixCache, resource: str, count: int) -> list[tuple[int, str]]:
    """The next ``count`` victims for ``resource`` as (node end, component kind), evicting
    each as the cache would."""
    order: list[tuple[int, str]] = []
    try:
        for _ in range(count):
            victim = cache.eviction.next_victim(resource)
            if victim is None:
                break
            node, component = victim
            order.append((node.end, component.kind))
            cache.accounting.evict(node, component)
    finally:
        cache.eviction.end_round()
    cache.check_integrity()
    return order


def state_at(cache: HybridPrefixCache, tokens: list[int]) -> bool:
    return cache.lookup(tokens)[0] == len(tokens)


# ====================================================================== vLLM LRU
def test_lru_frees_a_request_tail_first() -> None:
    """Entries inserted together are freed deepest first (vLLM frees a request's blocks in
    reverse order); attention KV only leaves from leaves."""
    cache = make(LRUEviction(), every=32)
    run(cache, seq(0, 120))  # states at 32, 64, 96; KV [0, 32) [32, 64) [64, 96) [96, 112)
    assert victims(cache, "state", 3) == [(96, "recurrent"), (64, "recurrent"), (32, "recurrent")]
    assert victims(cache, "kv", 4) == [(112, "full"), (96, "full"), (64, "full"), (32, "full")]
    assert list(cache.tree.iter_nodes()) == []


def test_lru_least_recent_first_and_locked_entries_are_skipped() -> None:
    cache = make(LRUEviction())
    run(cache, seq(0, 33))  # state at 32 (old)
    run(cache, seq(1000, 33))  # state at 32 on another path (newer)
    assert victims(cache, "state", 1) == [(32, "recurrent")]
    assert not state_at(cache, seq(0, 32)) and state_at(cache, seq(1000, 32))

    cache = make(LRUEviction())
    run(cache, seq(0, 33))
    run(cache, seq(1000, 33))
    lease = cache.admit([*seq(0, 32), 7])  # hit 32: locks the older path
    assert isinstance(lease, Lease) and lease.hit == 32
    assert victims(cache, "state", 5) == [(32, "recurrent")]  # only the unlocked one
    assert state_at(cache, seq(0, 32))
    assert victims(cache, "state", 5) == []  # the locked state is never offered
    cache.abort(lease)
    assert victims(cache, "state", 5) == [(32, "recurrent")]


@pytest.mark.parametrize(("refresh", "survivor"), [(True, 0), (False, 5000)])
def test_lru_refresh_scope_decides_the_first_state_victim(refresh: bool, survivor: int) -> None:
    """R1 stores states at 32 and 64 on one path; R2 one at 32 on another path later; R3
    resumes from R1's state at 64. vLLM's LRU refreshes every entry on the reused path, so
    R2's state goes first; SGLang's per-component LRU refreshes only the state it used, so
    R1's state at 32, the oldest, goes first."""
    cache = make(LRUEviction(refresh_state_path=refresh), every=32)
    run(cache, [*seq(0, 64), 1])  # states at 32 and 64 (t1)
    run(cache, [*seq(5000, 32), 1])  # state at 32 on another path (t2)
    reuse = cache.admit(seq(0, 64) + seq(300, 5))  # uses the state at 64 (t3)
    assert isinstance(reuse, Lease) and reuse.hit == 64
    cache.abort(reuse)
    assert victims(cache, "state", 1) == [(32, "recurrent")]
    assert state_at(cache, seq(survivor, 32))
    assert not state_at(cache, seq(5000 - survivor, 32))
    assert state_at(cache, seq(0, 64))  # the used state is the newest in both


@pytest.mark.parametrize(
    "policy",
    [LRUEviction(), LRUEviction(refresh_state_path=False), GDSFEviction(session_aware=True)],
)
def test_heap_policies_forget_entries_that_are_gone(policy: HeapEviction) -> None:
    """Regression: heap entries and per-entry records of evicted or pruned entries were kept
    forever (on a split pool the state heap is never popped when states leave with their KV
    leaf), growing with every request served and keeping dead nodes alive."""
    s = spec()
    kv_budget = 40 * 16 * s.kv_bytes_per_token  # 40 pages; states get 4x that: never short
    cache = make(policy, every=32, pool=split_pool(s, 5 * kv_budget, page_size=16, ratio=4.0))
    for i in range(1500):
        lease = cache.admit([*seq(10_000 * (i % 40), 64), *seq(10**6 + 100 * i, 1 + i % 50)])
        assert isinstance(lease, Lease)
        cache.record_planned(lease)
        cache.finish(lease)
    assert sum(cache.stats().evictions.values()) > 1000
    live = sum(1 for n in cache.tree.iter_nodes() for c in cache.tree.components if c.has(n))
    bound = policy.compact_factor * live + COMPACT_SLACK + 8
    parked = sum(len(entries) for entries in policy._parked.values())
    assert sum(len(h) for h in policy._heaps.values()) + parked <= bound
    assert len(policy._current) <= bound
    records = policy._stamp if isinstance(policy, LRUEviction) else policy._freq
    assert len(records) <= bound
    cache.check_integrity()


# ====================================================================== GDSF
def test_gdsf_keeps_the_entry_with_higher_cost_per_byte() -> None:
    """Two states of equal size: one stands for 512 tokens of prefill, the other for 32 and
    is more recent. GDSF evicts the cheap one; LRU would evict the old expensive one."""
    results = {}
    for name, policy in (("gdsf", GDSFEviction()), ("lru", LRUEviction())):
        cache = make(policy)
        run(cache, [*seq(0, 512), 1])  # state at 512
        run(cache, [*seq(5000, 32), 1])  # state at 32, newer
        results[name] = victims(cache, "state", 1)
    assert results["gdsf"] == [(32, "recurrent")]
    assert results["lru"] == [(512, "recurrent")]


def test_gdsf_frequency_counts() -> None:
    """Equal cost and size: the entry hit more often stays."""
    cache = make(GDSFEviction())
    run(cache, [*seq(0, 64), 1])
    run(cache, [*seq(5000, 64), 1])
    for i in range(3):
        lease = cache.admit(seq(0, 64) + seq(100 * i, 3))
        assert isinstance(lease, Lease) and lease.hit == 64
        cache.abort(lease)
    assert victims(cache, "state", 1) == [(64, "recurrent")]
    assert state_at(cache, seq(0, 64)) and not state_at(cache, seq(5000, 64))


def test_gdsf_state_cost_counts_back_to_the_previous_state() -> None:
    """A state's cost is the prefill from the previous state on its path: the state at 64
    right after one at 32 saves the prefill of positions 32..63 only."""
    cache = make(GDSFEviction(), every=32)
    run(cache, [*seq(0, 64), 1])  # states at 32 and 64
    policy = cache.eviction
    assert isinstance(policy, GDSFEviction)
    nodes = {n.end: n for n in cache.tree.iter_nodes()}
    rec = cache.recurrent
    assert rec is not None
    k32, k64 = policy.key(nodes[32], rec), policy.key(nodes[64], rec)
    flops = cache.spec.prefill_flops
    size = rec.bytes_on(nodes[32])
    assert k32[-1] == pytest.approx(flops(0, 32) / size)
    assert k64[-1] == pytest.approx(flops(32, 32) / size)


def test_gdsf_aging_lets_new_entries_outrank_old_ones() -> None:
    """After evictions the clock L has risen: a newly inserted cheap entry gets L + cost,
    so an old entry that is never used again eventually goes."""
    cache = make(GDSFEviction())
    run(cache, [*seq(0, 512), 1])  # expensive, never used again
    for i in range(1, 40):
        run(cache, [*seq(10000 * i, 32), 1])
        victims(cache, "state", 1)
        if not state_at(cache, seq(0, 512)):
            break
    assert not state_at(cache, seq(0, 512))


# ====================================================================== Marconi
def marconi_cache(alpha: float, *, every: int = 0) -> HybridPrefixCache:
    s = spec()
    return make(MarconiEviction(alpha), every=every, pool=shared_pool(s, BIG, 16))


@pytest.mark.parametrize(("alpha", "first"), [(0.0, 512), (2.0, 32)])
def test_marconi_ranks_by_flop_efficiency_and_recency(alpha: float, first: int) -> None:
    """An old leaf standing for 512 tokens and a new one for 32 (same bytes per token). With
    alpha 0 only recency counts and the old one goes; with alpha 2 FLOPs per byte dominate
    and the cheap new one goes."""
    cache = marconi_cache(alpha)
    run(cache, [*seq(0, 512), 1])
    run(cache, [*seq(5000, 32), 1])
    got = victims(cache, "bytes", 1)
    assert got == [(first, "full")]  # a leaf goes whole (KV and its state)
    assert not state_at(cache, seq(0 if first == 512 else 5000, first))


def test_marconi_skips_nodes_with_several_children() -> None:
    """A branch point with two children is not a candidate; its children are."""
    cache = marconi_cache(0.0)
    run(cache, [*seq(0, 64), 1])
    run(cache, seq(0, 64) + seq(100, 32) + [1])
    run(cache, seq(0, 64) + seq(200, 32) + [1])
    branch = next(n for n in cache.tree.iter_nodes() if n.end == 64)
    assert len(branch.children) == 2
    got = victims(cache, "bytes", 2)
    assert all(end == 96 for end, _ in got)
    assert state_at(cache, seq(0, 64))  # untouched while it had two children


def test_marconi_refreshes_only_the_deepest_matched_node() -> None:
    """States at 32 and 64 on one path, then an unrelated leaf, then a hit at 64: with
    alpha 0 the state at 32 (refreshed by nobody) goes before the unrelated leaf."""
    cache = marconi_cache(0.0, every=32)
    run(cache, [*seq(0, 64), 1])
    run(cache, [*seq(5000, 32), 1])
    lease = cache.admit(seq(0, 64) + seq(300, 3))
    assert isinstance(lease, Lease) and lease.hit == 64
    cache.abort(lease)
    assert victims(cache, "bytes", 1) == [(32, "recurrent")]  # the single-child node's state
    assert state_at(cache, seq(0, 64)) and state_at(cache, seq(5000, 32))
    assert cache.lookup(seq(0, 64))[1] == 64  # its KV stays: the child needs it


def test_pick_alpha_picks_the_best_replay() -> None:
    scores = [-((a - 1.3) ** 2) for a in ALPHA_GRID]
    assert ALPHA_GRID[pick_alpha(ALPHA_GRID, scores)] == pytest.approx(1.3)
    assert len(ALPHA_GRID) == 21 and ALPHA_GRID[0] == 0.0 and ALPHA_GRID[-1] == 2.0
    assert pick_alpha(ALPHA_GRID, [5.0] * 21) == 0  # ties go to the smallest alpha
    assert pick_alpha((3.0, 1.0, 0.5), [1.0, 1.0, 0.0]) == 1  # the smallest, not the first


def test_pick_alpha_on_a_replay_of_the_cache() -> None:
    """A real bootstrap replay: the FLOPs saved depend on alpha, and the winner is one of
    the grid values with the top score."""
    s = spec()
    state = s.state_bytes
    page_bytes = 16 * s.kv_bytes_per_token

    def replay(alpha: float) -> float:
        cache = make(MarconiEviction(alpha), pool=shared_pool(s, 40 * page_bytes + 6 * state, 16))
        saved = 0.0
        for i in range(30):
            doc = seq(0, 256) if i % 3 == 0 else seq(10_000 * i, 64)
            lease = cache.admit([*doc, i])
            assert isinstance(lease, Lease)
            saved += s.prefill_flops(0, lease.hit)
            cache.record_planned(lease)
            cache.finish(lease)
        return saved

    grid = (0.0, 1.0, 2.0)
    scores = [replay(alpha) for alpha in grid]
    assert scores[pick_alpha(grid, scores)] == max(scores)


# ====================================================================== admission
def test_always_admit() -> None:
    policy = AlwaysAdmit()
    assert all(policy.admit(bytes([i]), "prompt_end") for i in range(5))


def test_second_sighting() -> None:
    policy = SecondSighting()
    assert not policy.admit(b"a", "prompt_end")
    assert policy.admit(b"a", "prompt_end")
    assert policy.admit(b"a", "final")
    assert policy.admit(b"b", "branch")  # a branch is itself a second sighting
    assert not policy.admit(b"c", "chunk")


def test_second_sighting_memory_is_bounded() -> None:
    policy = SecondSighting(memory=2)
    for key in (b"a", b"b", b"c"):
        assert not policy.admit(key, "prompt_end")
    assert not policy.admit(b"a", "prompt_end")  # forgotten: the oldest of three
    assert policy.admit(b"c", "prompt_end")


# ====================================================================== checkpoint planners
def test_chunk_ends() -> None:
    assert chunk_ends(0, 100, None) == [100]
    assert chunk_ends(0, 100, 40) == [40, 80, 100]
    assert chunk_ends(0, 100, 40, grid=16) == [32, 64, 100]  # the last chunk reaches the end
    assert chunk_ends(0, 100, 40, must_end_at=(50,)) == [40, 50, 90, 100]
    assert chunk_ends(10, 20, 40, must_end_at=(5, 10, 20, 30)) == [20]
    assert chunk_ends(0, 10, 4, grid=16) == [4, 8, 10]  # the grid would leave it empty


def plan_input(
    n: int, start: int = 0, kv: int = 0, page: int = 16, budget: int | None = None, new: int = 0
) -> PlanInput:
    return PlanInput(n, start, kv, page, budget, new)


def test_vllm_planner_retention() -> None:
    dense = VllmAlignPlanner(block=64, scheduler_grid=64, retention_interval=None)
    plan = dense.plan(plan_input(300, budget=128, page=64))
    assert plan.chunk_ends == (128, 256, 300)
    assert [c.position for c in plan.checkpoints] == [128, 256]  # the partial block: none
    assert dense.state_grid == 64 and not plan.keep_final_state

    sparse = VllmAlignPlanner(block=64, scheduler_grid=64, retention_interval=0)
    plan = sparse.plan(plan_input(300, kv=192, budget=128, page=64))
    assert [(c.position, c.reason) for c in plan.checkpoints] == [
        (192, "branch"),
        (256, "prompt_end"),
    ]
    interval = VllmAlignPlanner(block=64, scheduler_grid=64, retention_interval=128)
    plan = interval.plan(plan_input(600, budget=64, page=64))
    reasons = {c.position: c.reason for c in plan.checkpoints}
    assert reasons == {
        128: "interval",
        256: "interval",
        384: "interval",
        512: "interval",
        576: "prompt_end",
    }


def test_vllm_min_grid_misses_the_block_grid() -> None:
    buggy = VllmAlignPlanner(block=896, scheduler_grid=128, retention_interval=None)
    plan = buggy.plan(plan_input(6000, budget=2048, page=896))
    assert plan.chunk_ends == (2048, 4096, 5888, 6000)
    assert all(c.position % 896 for c in plan.checkpoints)


def test_sglang_planners() -> None:
    no_buffer = SglangPlanner("no_buffer", page_size=1, track_interval=256)
    plan = no_buffer.plan(plan_input(100, page=1, budget=40))
    assert plan.chunk_ends == (40, 80, 100)
    assert [c.position for c in plan.checkpoints] == [40, 80, 100]
    assert plan.keep_final_state

    extra = SglangPlanner("extra_buffer", page_size=16, track_interval=256)
    plan = extra.plan(plan_input(300, start=32, kv=200, new=600))
    reasons = {c.position: c.reason for c in plan.checkpoints}
    # tracked: 32 + floor(268 / 64) * 64 = 288; the branch floor(200, 64) = 192 is off the
    # grid from the extend's start (160 tokens in), so not tracked; decode 512, 768
    assert reasons == {288: "prompt_end", 512: "decode", 768: "decode"}
    plan = extra.plan(plan_input(300, start=0, kv=200, new=0))
    assert [(c.position, c.reason) for c in plan.checkpoints] == [(192, "branch")]
    assert 192 in plan.chunk_ends  # no kernel grid given: the tracked state ends a chunk
    assert not plan.keep_final_state


def test_marconi_planner_speculative_branch() -> None:
    planner = MarconiPlanner()
    plan = planner.plan(plan_input(300, start=64, kv=200, page=1, budget=100))
    assert [(c.position, c.reason) for c in plan.checkpoints] == [(200, "branch")]
    assert 200 in plan.chunk_ends and plan.keep_final_state
    assert planner.plan(plan_input(300, start=64, kv=64, page=1)).checkpoints == ()


PLANNERS: dict[str, CheckpointPolicy] = {
    "vllm": VllmAlignPlanner(block=32, scheduler_grid=32, retention_interval=0),
    "vllm-dense": VllmAlignPlanner(block=32, scheduler_grid=32, retention_interval=None),
    "vllm-interval": VllmAlignPlanner(block=32, scheduler_grid=32, retention_interval=64),
    "sglang-no_buffer": SglangPlanner("no_buffer", page_size=1, track_interval=32),
    "sglang-extra_buffer": SglangPlanner("extra_buffer", page_size=16, track_interval=32),
    "marconi": MarconiPlanner(),
    "hycache": HycachePlanner(),
    "hycache-interval": HycachePlanner(interval=48),
}
PAGES = {"vllm": 32, "sglang-no_buffer": 1, "sglang-extra_buffer": 16}


@pytest.mark.parametrize("name", sorted(PLANNERS))
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_planner_contract(name: str, data: st.DataObject) -> None:
    """Every planner: increasing chunk ends from the hit to the prompt end, within the token
    budget; checkpoints strictly increasing, past the hit, within the request, and every
    prefill checkpoint is a chunk end (the state is copied between chunks)."""
    planner = PLANNERS[name]
    page = PAGES.get(name.split("-")[0], PAGES.get(name, 16))
    n = data.draw(st.integers(1, 700))
    start = data.draw(st.integers(0, (n - 1) // page)) * page
    kv = data.draw(st.integers(start // page, (n - 1) // page)) * page
    budget = data.draw(st.none() | st.integers(1, 300))
    new = data.draw(st.integers(0, 300))
    plan = planner.plan(PlanInput(n, start, kv, page, budget, new))
    ends = plan.chunk_ends
    assert ends and ends[-1] == n
    assert all(a < b for a, b in zip((start, *ends), ends, strict=False))
    if budget is not None:
        assert all(b - a <= budget for a, b in zip((start, *ends), ends, strict=False))
    positions = [c.position for c in plan.checkpoints]
    assert positions == sorted(set(positions))
    for p in positions:
        assert start < p <= n + new
        if p <= n:
            assert p in ends


# ====================================================================== presets
def test_every_knob_is_documented() -> None:
    for preset, knobs in KNOBS.items():
        for name, knob in knobs.items():
            assert knob.doc and knob.upstream, f"{preset}.{name}"
            if knob.choices:
                assert knob.default in knob.choices


def test_resolve_knobs_defaults_and_overrides() -> None:
    values = resolve_knobs("vllm", {"block_size": "64", "retention_interval": "null"})
    assert values["block_size"] == 64 and values["retention_interval"] is None
    assert values["scheduler_grid"] == "min"
    with pytest.raises(ConfigError, match=r"unknown knob vllm\.strategy; known: block_size"):
        resolve_knobs("vllm", {"strategy": "x"})
    with pytest.raises(ConfigError, match=r"unknown preset 'x'; known: vllm, sglang"):
        resolve_knobs("x", {})
    with pytest.raises(ConfigError, match="cannot be None"):
        resolve_knobs("vllm", {"block_size": None})


@pytest.mark.parametrize("preset", sorted(KNOBS))
@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "qwen3.5-27b", "marconi-7b"])
def test_every_preset_builds_and_runs(preset: str, name: str) -> None:
    model = ModelSpec.named(name)
    cache = build_cache(model, 200 << 30, preset)
    assert cache.name == preset
    lease = cache.admit(seq(0, 3000))
    assert isinstance(lease, Lease)
    cache.record_planned(lease)
    cache.finish(lease)
    again = cache.admit(seq(0, 3000) + seq(10_000, 100))
    assert isinstance(again, Lease)
    assert again.hit <= again.kv_hit and again.hit % cache.page_size == 0
    cache.abort(again)
    cache.check_integrity()
    cache.clear()
    assert cache.pool.used_bytes == 0


def test_preset_layouts() -> None:
    model = ModelSpec.named("qwen3-next-80b-a3b")
    assert build_cache(model, 1 << 34, "vllm").pool.layout == "unified"
    sglang = build_cache(model, 1 << 34, "sglang", strategy="extra_buffer", page_size=16)
    # the request's own slot plus extra_buffer's two ping-pong track slots
    assert sglang.pool.layout == "split" and sglang.config.running_slots == 3
    no_buffer = build_cache(model, 1 << 34, "sglang", strategy="no_buffer")
    assert no_buffer.config.running_slots == 1
    assert build_cache(model, 1 << 34, "marconi").pool.layout == "shared"
    assert build_cache(model, 1 << 34, "hycache").pool.layout == "shared"
    assert isinstance(build_cache(model, 1 << 34, "marconi").eviction, MarconiEviction)
    lru = build_cache(model, 1 << 34, "sglang").eviction
    assert isinstance(lru, LRUEviction) and not lru.refresh_state_path


def test_victims_helper_types() -> None:
    """The helper above relies on the cache's victim contract: (node, component)."""
    cache = make(LRUEviction())
    run(cache, seq(0, 33))
    victim = cache.eviction.next_victim("state")
    cache.eviction.end_round()
    assert victim is not None
    node, component = victim
    assert isinstance(node, Node) and isinstance(component, Component)
    assert isinstance(component, RecurrentComponent)
