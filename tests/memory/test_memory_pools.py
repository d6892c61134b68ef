"""Memory pools: vLLM's unified padded pool, SGLang's split pools, one shared budget.

Every pool is byte-accounted and never exceeds its budget: an allocation that does not fit
raises CapacityError and takes nothing; ``check_integrity`` catches corrupted accounting.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.errors import CapacityError, ConfigError, IntegrityError
from hycache.memory.layouts import shared_pool, split_pool, unified_layout, unified_pool
from hycache.memory.pool import MemoryPool, UnitCost
from hycache.memory.unbounded import UnboundedStore
from hycache.spec.model import FullAttentionGroup, ModelSpec, RecurrentGroup, SlidingWindowGroup

GIB = 1 << 30
QWEN35 = ModelSpec.named("qwen3.5-27b")


def tiny(*, recurrent: bool = True, full: bool = True, swa: bool = False) -> ModelSpec:
    groups: list[object] = []
    if full:
        groups.append(
            FullAttentionGroup(layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2)
        )
    if swa:
        groups.append(
            SlidingWindowGroup(
                layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2, window=64
            )
        )
    if recurrent:
        groups.append(
            RecurrentGroup(
                layers=4,
                mixer="gdn",
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
        vocab_size=100,
        active_mlp_params_per_token=0,
        num_layers=4,
    )


# ====================================================================== unified (vLLM)
def test_unified_qwen35_block_128_pads_to_896() -> None:
    """3,207,168 B per GDN layer / 4,096 B per token and layer = 783 tokens -> 896 with
    kalign 128 (vLLM: "Setting attention block size to 896 tokens")."""
    geo = unified_layout(QWEN35, 128)
    assert geo.attn_block == 896
    assert geo.page_bytes_per_layer == 896 * 4096  # the KV page is the larger one
    assert geo.layers_per_group == 16  # 16 attention + 48 GDN layers
    assert geo.groups == {"full": 1, "recurrent": 3}
    pool = unified_pool(QWEN35, 100 * GIB, 128)
    assert pool.details["attn_block_tokens"] == 896
    assert pool.details["block_bytes"] == geo.block_bytes


@pytest.mark.parametrize(("block", "expected"), [(16, 784), (64, 832), (128, 896), (256, 1024)])
def test_unified_padding_formula(block: int, expected: int) -> None:
    """attn_block = kalign * ceil(state / (kalign * kv_per_token)), kalign = max(16, block)."""
    assert unified_layout(QWEN35, block).attn_block == expected


def test_unified_small_block_is_raised_to_16() -> None:
    assert unified_layout(tiny(), 1).attn_block == unified_layout(tiny(), 16).attn_block == 16
    assert unified_layout(tiny(recurrent=False), 8).attn_block == 16


def test_unified_padding_waste_is_reported() -> None:
    pool = unified_pool(QWEN35, 100 * GIB, 128)
    assert pool.padding_waste_bytes() == 0
    pool.alloc("full", 2)
    assert pool.padding_waste_bytes() == 0  # an attention page is exactly one block
    pool.alloc("recurrent", 1)
    rec = QWEN35.recurrent
    assert rec is not None
    per_layer_waste = 896 * 4096 - rec.state_bytes_per_layer
    assert pool.padding_waste_bytes() == rec.layers * per_layer_waste > 0
    assert pool.costs["recurrent"].charged - pool.costs["recurrent"].data == (
        pool.padding_waste_bytes()
    )
    pool.check_integrity()


def test_unified_budget_is_whole_blocks() -> None:
    geo = unified_layout(QWEN35, 128)
    pool = unified_pool(QWEN35, 10 * geo.block_bytes + 123, 128)
    assert pool.budget_bytes == 10 * geo.block_bytes
    assert pool.details["num_blocks"] == 10
    assert pool.unit_bytes("full") == geo.block_bytes
    assert pool.unit_bytes("recurrent") == 3 * geo.block_bytes  # 48 GDN layers: 3 groups
    pool.alloc("full", 8)
    with pytest.raises(CapacityError):
        pool.alloc("recurrent", 1)  # three blocks, two free
    pool.alloc("full", 2)
    assert pool.free_bytes("blocks") == 0


# ====================================================================== split (SGLang)
@pytest.mark.parametrize("ratio", [0.9, 0.5, 2.0])
@pytest.mark.parametrize("budget", [10**6, 10**8, 7 * GIB])
def test_split_states_get_r_over_1_plus_r(ratio: float, budget: int) -> None:
    spec = QWEN35 if budget > 10**8 else tiny()
    pool = split_pool(spec, budget, page_size=1, ratio=ratio)
    state = spec.state_bytes
    target = budget * ratio / (1 + ratio)
    # SGLang's sizing: floor(target / state) - 1 usable slots plus one padding slot; the rest
    # of the budget (padding slot excluded) holds KV
    slots = pool.budgets["state"] // state
    assert target - 2 * state < pool.budgets["state"] <= target - state
    assert pool.budgets["state"] % state == 0
    assert pool.budgets["kv"] == budget - (slots + 1) * state
    assert pool.details["ratio"] == ratio


def test_split_default_ratio_is_09() -> None:
    pool = split_pool(tiny(), 19_000)
    assert pool.budgets["state"] == (9000 // 1280 - 1) * 1280


def test_split_pools_are_independent() -> None:
    spec = tiny()
    pool = split_pool(spec, 40_000, page_size=4)
    slots = pool.budgets["state"] // spec.state_bytes
    pool.alloc("recurrent", slots)
    with pytest.raises(CapacityError, match="state"):
        pool.alloc("recurrent", 1)
    pool.alloc("full", 1)  # KV pages come from the other budget
    assert pool.unit_bytes("full") == 4 * spec.kv_bytes_per_token
    pool.check_integrity()


def test_split_ratio_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="ratio"):
        split_pool(tiny(), 10**6, ratio=0)


def test_split_without_recurrent_or_attention() -> None:
    assert set(split_pool(tiny(recurrent=False), 10**6).budgets) == {"kv"}
    assert set(split_pool(tiny(full=False), 10**6).budgets) == {"state"}


# ====================================================================== shared
def test_shared_pool_has_one_budget_for_kv_and_states() -> None:
    spec = tiny(swa=True)
    pool = shared_pool(spec, 10_000, page_size=16)
    assert pool.budgets == {"bytes": 10_000}
    assert pool.unit_bytes("full") == 16 * 64
    assert pool.unit_bytes("swa") == 16 * 64
    assert pool.unit_bytes("recurrent") == spec.state_bytes
    pool.alloc("recurrent", 5)  # 6400 B
    pool.alloc("full", 3)  # 3072 B
    with pytest.raises(CapacityError):
        pool.alloc("swa", 1)
    assert pool.used_bytes == 5 * 1280 + 3 * 1024
    assert pool.padding_waste_bytes() == 0
    pool.check_integrity()


@pytest.mark.parametrize("bad", [0, -5])
def test_budget_must_be_positive(bad: int) -> None:
    for make in (shared_pool, split_pool, unified_pool):
        with pytest.raises(ConfigError, match="budget"):
            make(tiny(), bad)


def test_block_size_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="block_size"):
        unified_layout(tiny(), 0)


# ====================================================================== allocation contract
def test_alloc_beyond_budget_raises_and_takes_nothing() -> None:
    pool = shared_pool(tiny(), 5000, page_size=16)
    first = pool.alloc("full", 3)
    used, units, peak = pool.used_bytes, dict(pool.units), dict(pool.peak)
    with pytest.raises(CapacityError, match=r"shared pool: 2 full unit\(s\) need 2048 B"):
        pool.alloc("full", 2)
    assert pool.used_bytes == used and pool.units == units and pool.peak == peak
    pool.check_integrity()
    assert pool.shortfall({"full": 2}) == {"bytes": 2048 - (5000 - used)}
    assert pool.shortfall({"full": 1}) == {}
    assert pool.fits_empty({"full": 4}) and not pool.fits_empty({"full": 5})
    pool.free("full", first)
    assert pool.used_bytes == 0
    assert len(set(pool.alloc("full", 4))) == 4
    pool.check_integrity()


def test_ids_are_reused_densely() -> None:
    pool = shared_pool(tiny(), 10**6, page_size=1)
    a = pool.alloc("full", 4)
    assert list(a) == [0, 1, 2, 3]
    pool.free("full", [a[1], a[2]])
    b = pool.alloc("full", 3)
    assert sorted(b) == [1, 2, 4]
    assert pool.peak["bytes"] == 5 * 64
    pool.check_integrity()


def test_store_views() -> None:
    pool = shared_pool(tiny(), 10**6, page_size=1)
    pages = pool.page_store("full")
    slots = pool.slot_store("recurrent")
    got = pages.alloc_pages(3)
    slot = slots.alloc_slot()
    assert pages.pages_in_use == 3 and slots.slots_in_use == 1
    pages.free_pages(got)
    slots.free_slot(slot)
    assert pages.pages_in_use == 0 and slots.slots_in_use == 0
    assert pool.used_bytes == 0


def test_demand_bytes_and_describe() -> None:
    pool = split_pool(tiny(), 19_000, page_size=2)
    assert pool.demand_bytes({"full": 3, "recurrent": 2}) == {"kv": 3 * 128, "state": 2 * 1280}
    assert pool.describe().startswith("split(")


# ====================================================================== integrity
def test_check_integrity_catches_corrupted_used_bytes() -> None:
    pool = shared_pool(tiny(), 10_000, page_size=16)
    pool.alloc("full", 2)
    pool.check_integrity()
    pool.used["bytes"] += 1
    with pytest.raises(IntegrityError):
        pool.check_integrity()


def test_check_integrity_catches_corrupted_units() -> None:
    pool = shared_pool(tiny(), 10_000, page_size=16)
    pool.alloc("recurrent", 1)
    pool.units["recurrent"] += 1
    with pytest.raises(IntegrityError):
        pool.check_integrity()


def test_check_integrity_catches_a_leaked_id() -> None:
    pool = shared_pool(tiny(), 10_000, page_size=16)
    ids = pool.alloc("full", 2)
    pool._ids["full"].free.append(ids[0])  # freed id without giving the bytes back
    with pytest.raises(IntegrityError):
        pool.check_integrity()


def test_check_integrity_catches_over_budget() -> None:
    pool = MemoryPool("custom", {"bytes": 100}, {"x": UnitCost("bytes", 60, 60)})
    pool.alloc("x", 1)
    pool.budgets["bytes"] = 50  # the budget shrank under the holdings
    with pytest.raises(IntegrityError):
        pool.check_integrity()


def test_freeing_more_than_allocated_is_caught() -> None:
    pool = shared_pool(tiny(), 10_000, page_size=16)
    with pytest.raises(IntegrityError):
        pool.free("full", [0])


def test_accounting_only_pool_counts_without_ids() -> None:
    """``track_ids=False`` (the simulator): bytes and units are accounted exactly, ids are
    not remembered."""
    pool = shared_pool(tiny(), 10_000, page_size=16, track_ids=False)
    pages = pool.alloc("full", 3)
    assert list(pages) == [0, 1, 2]
    assert list(pool.alloc("full", 2)) == [0, 1]
    assert pool.used_bytes == 5 * 1024 and pool.units["full"] == 5
    with pytest.raises(CapacityError):
        pool.alloc("recurrent", 5)
    pool.check_integrity()
    pool.free("full", pages)
    pool.check_integrity()
    pool.used["bytes"] -= 1
    with pytest.raises(IntegrityError):
        pool.check_integrity()


def test_unbounded_store() -> None:
    store = UnboundedStore()
    pages = store.alloc_pages(3)
    assert list(pages) == [0, 1, 2]
    slot = store.alloc_slot()
    store.free_pages(pages)
    store.free_slot(slot)
    assert store.pages_in_use == store.slots_in_use == 0
    assert list(store.alloc_pages(1)) == [3]  # never reused
    store.check_integrity()


# ====================================================================== property
LAYOUTS = {
    "shared": lambda budget: shared_pool(tiny(swa=True), budget, page_size=4),
    "split": lambda budget: split_pool(tiny(swa=True), budget, page_size=4),
    "unified": lambda budget: unified_pool(tiny(swa=True), budget, block_size=16),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@settings(max_examples=60, deadline=None)
@given(
    budget=st.integers(1, 60_000),
    ops=st.lists(
        st.tuples(st.booleans(), st.sampled_from(["full", "swa", "recurrent"]), st.integers(0, 6)),
        max_size=60,
    ),
)
def test_random_alloc_free_never_exceeds_budget(
    layout: str, budget: int, ops: list[tuple[bool, str, int]]
) -> None:
    try:
        pool = LAYOUTS[layout](budget)
    except ConfigError:
        return
    held: dict[str, list[int]] = {"full": [], "swa": [], "recurrent": []}
    for is_alloc, kind, count in ops:
        if is_alloc:
            before = (pool.used_bytes, dict(pool.units))
            fits = not pool.shortfall({kind: count})
            try:
                held[kind].extend(pool.alloc(kind, count))
                assert fits
            except CapacityError:
                assert not fits
                assert (pool.used_bytes, dict(pool.units)) == before
        else:
            give, held[kind] = held[kind][:count], held[kind][count:]
            pool.free(kind, give)
        pool.check_integrity()
        for resource, limit in pool.budgets.items():
            assert pool.used[resource] <= limit
        assert all(len(set(ids)) == len(ids) for ids in held.values())
    for kind, ids in held.items():
        pool.free(kind, ids)
    assert pool.used_bytes == 0
    pool.check_integrity()
