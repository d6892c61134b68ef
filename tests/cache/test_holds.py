"""What a request holds while it runs: KV read in place past its resume point
(``read_matched_kv``), the state at a published prompt (``pin_published_state``), a spare slot
for its prefill checkpoint (``reserve_checkpoint_slot``), and hycache's value eviction pinning
only states that requests pass through. Every step checks the cache's integrity and budget."""

from __future__ import annotations

import pytest

from hycache.cache.config import SPARE_SLOT_SHARE
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.cache.presets import build_cache
from hycache.policy.checkpoint.base import CheckpointPolicy
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.value import CHEAP_GUESS_SHARE, ValueEviction
from hycache.spec.model import ModelSpec
from tests.cache.test_facade import Points, direct_cache, per_request_bytes, seq, tiny_spec

BIG = 1 << 50


def make(
    spec: ModelSpec,
    budget: int = BIG,
    *,
    planner: CheckpointPolicy | None = None,
    eviction: GDSFEviction | ValueEviction | None = None,
    **options: bool,
) -> HybridPrefixCache:
    return direct_cache(spec, budget, eviction, planner=planner, **options)


def admit(cache: HybridPrefixCache, tokens: list[int], max_new: int = 0) -> Lease:
    lease = cache.admit(tokens, max_new_tokens=max_new)
    assert isinstance(lease, Lease), lease
    cache.check_integrity()
    assert cache.pool.used_bytes <= cache.pool.budget_bytes
    return lease


def finish(cache: HybridPrefixCache, lease: Lease) -> None:
    cache.record_planned(lease)
    cache.finish(lease)
    cache.check_integrity()
    assert cache.pool.used_bytes <= cache.pool.budget_bytes


def drop_state_at(cache: HybridPrefixCache, tokens: list[int], position: int) -> None:
    assert cache.recurrent is not None
    assert cache.tree.release_state_at(cache.recurrent, tokens, position)


# ====================================================================== read_matched_kv
def doc_with_state_at_128(cache: HybridPrefixCache) -> list[int]:
    """Cache a 256-token document's KV with the only state at 128."""
    doc = seq(0, 256)
    planner = cache.admitter.checkpoint
    cache.admitter.checkpoint = Points(prompt_end=False, branch=False, final=False)
    finish(cache, admit(cache, [*doc, *seq(5000, 16)]))
    first = admit(cache, [*doc[:128], *seq(7000, 32)])
    cache.record_checkpoint(first, 128)
    finish(cache, first)
    cache.admitter.checkpoint = planner
    return doc


def hold_in_flight(cache: HybridPrefixCache, tokens: list[int], session: str | None) -> Lease:
    """A request in flight whose published prompt locks the KV of ``tokens``."""
    lease = cache.admit([*tokens, *seq(60_000, 16)], max_new_tokens=4, session=session)
    assert isinstance(lease, Lease)
    cache.publish(lease)
    cache.check_integrity()
    return lease


@pytest.mark.parametrize("in_place", [False, True])
def test_recomputed_tokens_read_the_kv_another_request_holds_in_place(in_place: bool) -> None:
    """Attention matches 256 tokens but the only state sits at 128, and a request in flight
    holds that KV: the new one recomputes (128, 256) either way; reading that KV in place it
    holds 8 pages fewer, behind a KV-only lock."""
    spec = tiny_spec()
    cache = make(spec, planner=Points(prompt_end=False, branch=False), read_matched_kv=in_place)
    doc = doc_with_state_at_128(cache)
    holder = hold_in_flight(cache, doc, None)
    before = cache.pool.units["full"]
    lease = admit(cache, [*doc, *seq(9000, 40)], max_new=8)
    assert (lease.hit, lease.kv_hit) == (128, 256)
    pages = cache.pool.units["full"] - before
    assert pages == (296 + 8 - (256 if in_place else 128) + 15) // 16
    assert (lease.kv_locked is not None) == in_place
    if in_place:
        assert lease.kv_locked is not None and lease.kv_locked.end == 256
        assert all(n.lock_ref for n in lease.kv_locked.path_from_root())
        assert not cache.tree.state_lock_ends_at(lease.kv_locked)
    finish(cache, lease)
    cache.extend(holder, seq(61_000, 4))
    finish(cache, holder)
    assert all(n.lock_ref == 0 and n.state_ref == 0 for n in cache.tree.iter_nodes())
    assert cache.lookup([*doc, *seq(9000, 40), 1])[1] == 288


@pytest.mark.parametrize("case", ["nobody holds it", "own session in flight", "no prefill"])
def test_no_in_place_read_of_unheld_kv_behind_its_own_session_or_without_prefill(
    case: str,
) -> None:
    """KV nobody in flight locks is not pinned for the read; a request whose session has a
    request in flight does not start early on a partial hit; and the serial replay
    (``kernel_grid=False``) prefills nothing to read it for."""
    spec = tiny_spec()
    cache = make(spec, planner=Points(prompt_end=False, branch=False), read_matched_kv=True)
    doc = doc_with_state_at_128(cache)
    holder = None
    if case != "nobody holds it":
        holder = hold_in_flight(cache, doc, "s" if case == "own session in flight" else "t")
    lease = cache.admit(
        [*doc, *seq(9000, 40)],
        max_new_tokens=8,
        session="s",
        kernel_grid=case != "no prefill",
    )
    assert isinstance(lease, Lease)
    assert (lease.hit, lease.kv_hit, lease.kv_locked) == (128, 256, None)
    finish(cache, lease)
    if holder is not None:
        cache.extend(holder, seq(61_000, 4))
        finish(cache, holder)


def test_in_place_kv_is_never_read_without_a_full_attention_group() -> None:
    """Sliding-window layers may have dropped their pages past the hit: no in-place read."""
    spec = tiny_spec(swa_window=64, full=False)
    cache = make(spec, read_matched_kv=True)
    finish(cache, admit(cache, seq(0, 256)))
    holder = hold_in_flight(cache, seq(0, 256), None)
    lease = admit(cache, seq(0, 256) + seq(9000, 16))
    assert lease.kv_locked is None
    finish(cache, lease)
    cache.abort(holder)
    cache.check_integrity()


def test_a_request_reading_kv_in_place_waits_and_aborts_cleanly() -> None:
    spec = tiny_spec()
    probe = make(spec)
    budget = per_request_bytes(probe, 700)
    cache = make(spec, budget, planner=Points(prompt_end=False, branch=False), read_matched_kv=True)
    doc = doc_with_state_at_128(cache)
    holder = hold_in_flight(cache, doc, None)
    running = admit(cache, [*doc, *seq(9000, 16)], max_new=16)
    assert running.kv_locked is not None
    waiting = cache.admit(seq(20_000, 300), max_new_tokens=16)
    assert isinstance(waiting, Wait)
    cache.check_integrity()
    cache.abort(running)
    cache.abort(holder)
    cache.check_integrity()
    assert all(n.lock_ref == 0 for n in cache.tree.iter_nodes())


# ====================================================================== pin_published_state
@pytest.mark.parametrize("pin", [True, False])
def test_a_published_prompt_pins_its_state_only_if_the_preset_says_so(pin: bool) -> None:
    spec = tiny_spec()
    cache = make(
        spec,
        planner=Points(branch=False, final=False),
        eviction=GDSFEviction(pins_published_state=pin),
    )
    lease = admit(cache, seq(0, 128), max_new=8)
    cache.record_planned(lease, up_to=lease.prompt_len)
    assert cache.publish(lease).states_inserted == (128,)
    cache.check_integrity()
    node = lease.locked
    assert cache.recurrent is not None and node is not None and cache.recurrent.has(node)
    full = next(c for c in cache.tree.components if c.kind == "full")
    assert cache.tree.pinned(node, full)
    assert cache.tree.pinned(node, cache.recurrent) == pin
    cache.extend(lease, seq(9000, 8))
    finish(cache, lease)


# ====================================================================== reserve_checkpoint_slot
def stateless_prefix(cache: HybridPrefixCache, length: int = 128) -> list[int]:
    """Cache ``length`` tokens of KV (behind a one-page tail) without any state."""
    planner = cache.admitter.checkpoint
    cache.admitter.checkpoint = Points(prompt_end=False, branch=False, final=False)
    doc = seq(0, length)
    finish(cache, admit(cache, [*doc, *seq(5000, 16)]))
    cache.admitter.checkpoint = planner
    return doc


def test_a_spare_slot_is_reserved_at_admission_and_used_by_the_checkpoint() -> None:
    cache = make(tiny_spec(), planner=Points(prompt_end=False), reserve_checkpoint_slot=True)
    doc = stateless_prefix(cache)
    lease = admit(cache, [*doc, *seq(7000, 64)], max_new=4)
    assert (lease.hit, lease.kv_hit, len(lease.spare_slots)) == (0, 128, 1)
    slots = cache.pool.units["recurrent"]
    cache.record_planned(lease, up_to=lease.prompt_len)  # the branch state at 128
    assert not lease.spare_slots and cache.pool.units["recurrent"] == slots
    assert cache.publish(lease).states_inserted == (128,)
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


def test_a_spare_is_freed_when_the_plan_takes_no_prefill_checkpoint() -> None:
    cache = make(
        tiny_spec(), planner=Points(prompt_end=False, branch=False), reserve_checkpoint_slot=True
    )
    doc = stateless_prefix(cache)
    lease = admit(cache, [*doc, *seq(7000, 64)], max_new=4)
    assert lease.kv_hit == 128 and lease.spare_slots == []
    finish(cache, lease)


def test_a_spare_left_when_the_prefill_ends_is_freed_at_publish() -> None:
    cache = make(tiny_spec(), planner=Points(prompt_end=False), reserve_checkpoint_slot=True)
    doc = stateless_prefix(cache)
    lease = admit(cache, [*doc, *seq(7000, 64)], max_new=4)
    assert len(lease.spare_slots) == 1
    cache.publish(lease)  # no checkpoint recorded: the spare goes
    cache.check_integrity()
    assert lease.spare_slots == []
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


@pytest.mark.parametrize("case", ["no shared prefix", "slot too large", "nothing prefilled"])
def test_no_spare_without_a_shared_prefix_a_cheap_slot_or_a_prefill(case: str) -> None:
    """A request reserves a spare only for a shared prefix's state (attention matched past
    its resume point), while a slot is at most SPARE_SLOT_SHARE of the budget, and
    when it prefills (the serial replay inserts at once: ``kernel_grid=False``)."""
    spec = tiny_spec()
    budget = round(spec.state_bytes / SPARE_SLOT_SHARE) - 1 if case == "slot too large" else BIG
    cache = make(
        spec,
        budget,
        planner=Points(prompt_end=False),
        reserve_checkpoint_slot=True,
        read_matched_kv=True,
    )
    doc = stateless_prefix(cache, 32)
    prompt = seq(60_000, 48) if case == "no shared prefix" else [*doc, *seq(7000, 16)]
    lease = cache.admit(prompt, max_new_tokens=4, kernel_grid=case != "nothing prefilled")
    assert isinstance(lease, Lease)
    assert lease.spare_slots == []
    finish(cache, lease)


def shared_prefix_cache(spare_room: bool) -> tuple[HybridPrefixCache, list[int]]:
    """A 128-token prefix whose KV is cached (behind a 16-token tail of one page) and whose
    state is not. The budget leaves a request ``[*prefix, 16 new]`` room to run (evicting
    that KV if need be) but not for a spare besides: with ``spare_room``, while a 16-token
    request is in flight; without it, with nothing in flight."""
    spec = tiny_spec()
    probe = make(spec)
    page = probe.pool.demand_bytes({"full": 1})["bytes"]
    request = per_request_bytes(probe, 16)  # one page + one running slot
    budget = 8 * page + request + spec.state_bytes // 2 + (request if spare_room else 0)
    assert budget * SPARE_SLOT_SHARE >= spec.state_bytes  # a slot is cheap here
    cache = make(
        spec,
        budget,
        planner=Points(prompt_end=False),
        read_matched_kv=True,
        reserve_checkpoint_slot=True,
    )
    doc = seq(0, 128)
    finish(cache, admit(cache, [*doc, *seq(5000, 16)]))
    return cache, doc


def test_a_shared_prefix_checkpoint_waits_for_its_spare_when_a_slot_is_cheap() -> None:
    cache, doc = shared_prefix_cache(spare_room=True)
    filler = admit(cache, seq(50_000, 16))
    blocked = cache.admit([*doc, *seq(7000, 16)])
    assert isinstance(blocked, Wait)  # room to run, not for the spare: it waits
    cache.check_integrity()
    cache.finish(filler)
    cache.check_integrity()
    lease = admit(cache, [*doc, *seq(7000, 16)])
    assert (lease.hit, lease.kv_hit, len(lease.spare_slots)) == (0, 128, 1)
    finish(cache, lease)
    assert cache.lookup([*doc, 1])[0] == 128  # the branch state got its slot


def test_one_spare_per_missing_shared_state() -> None:
    """A second request for the same missing state reserves none: one state there is all
    the next requests need. Another prefix gets its own."""
    cache = make(tiny_spec(), planner=Points(prompt_end=False), reserve_checkpoint_slot=True)
    doc = stateless_prefix(cache)
    first = admit(cache, [*doc, *seq(7000, 64)], max_new=4)
    second = admit(cache, [*doc, *seq(8000, 64)], max_new=4)
    assert (len(first.spare_slots), first.spare_for) == (1, 128)
    assert (second.spare_slots, second.spare_for) == ([], None)
    other = stateless_prefix(cache, 96)  # seq(0, 96): a prefix of the same document
    third = admit(cache, [*other, *seq(9000, 64)], max_new=4)
    assert third.kv_hit == 96 and third.spare_for == 96
    for lease in (first, second, third):
        cache.abort(lease)
        cache.check_integrity()


def test_a_spare_never_causes_an_endless_wait() -> None:
    """With nothing in flight nobody would ever free the spare's room: run without it."""
    cache, doc = shared_prefix_cache(spare_room=False)
    lease = admit(cache, [*doc, *seq(7000, 16)])
    assert (lease.hit, lease.kv_hit, lease.spare_slots) == (0, 128, [])
    finish(cache, lease)


# ====================================================================== value eviction pins
def value_cache(
    budget: int = BIG, *, pin_reused_guesses: bool = True, strict: bool = True
) -> HybridPrefixCache:
    return make(
        tiny_spec(),
        budget,
        planner=Points(prompt_end=False, branch=False, final=False),
        eviction=ValueEviction(
            pins_published_state=False,
            pin_reused_guesses=pin_reused_guesses,
            strict_guess_pins=strict,
        ),
    )


@pytest.mark.parametrize("reason", ["tail", "branch"])
def test_value_eviction_pins_a_chain_state_others_pass(reason: str) -> None:
    """States at 64 (``reason``) and 256; the path forks at 128 with no state there. A request
    resuming at 256 passes 64, the deepest state above the fork: kept for the next arrivals
    (even a tail guess: others pass it), however dear a state. The state where it resumes is
    pinned by its lock; once it published its prompt, the lock ending there holds KV only and
    pins no state."""
    spec = tiny_spec()
    cache = value_cache(round(spec.state_bytes / CHEAP_GUESS_SHARE) - 1)
    doc = seq(0, 256)
    first = admit(cache, [*doc, *seq(5000, 16)])
    cache.record_checkpoint(first, 64, reason)
    cache.record_checkpoint(first, 256, "prompt_end")
    finish(cache, first)
    finish(cache, admit(cache, [*doc[:128], *seq(6000, 32)]))  # the fork at 128
    assert cache.recurrent is not None
    prompt = [*doc, *seq(8000, 32)]
    cache.admitter.checkpoint = Points(branch=False, final=False)  # a state at its prompt end
    lease = admit(cache, prompt, max_new=4)
    assert lease.hit == 256
    nodes = {n.end: n for n in cache.tree.nodes_on(prompt, None, length=256)}
    assert cache.recurrent.has(nodes[64]) and not cache.recurrent.has(nodes[128])
    assert len(nodes[128].children) == 2
    eviction = cache.eviction
    assert eviction.pinned(nodes[256], cache.recurrent)
    assert eviction.pinned(nodes[64], cache.recurrent)
    cache.record_planned(lease, up_to=lease.prompt_len)
    cache.publish(lease)
    cache.check_integrity()
    node = lease.locked
    assert node is not None and node.end == 288 and cache.recurrent.has(node)
    assert not eviction.pinned(node, cache.recurrent)  # the published prompt's own state
    assert cache.tree.pinned(node, next(c for c in cache.tree.components if c.kind == "full"))
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


@pytest.mark.parametrize("cheap", [True, False])
@pytest.mark.parametrize("reason", ["tail", "branch"])
def test_an_own_tail_guess_is_kept_while_its_request_decodes_only_if_cheap_or_proven(
    reason: str, cheap: bool
) -> None:
    """A request stored a state at 64 when it published its prompt and decodes behind it:
    its own lock is the only one passing there. Without the reuse-rate rule, a tail guess
    stays pinned only while a state is at most 1/64 of the budget, or once a request resumed
    from it."""
    spec = tiny_spec()
    budget = round(spec.state_bytes / CHEAP_GUESS_SHARE) - (0 if cheap else 1)
    cache = value_cache(budget, pin_reused_guesses=False)
    assert cache.recurrent is not None
    doc = seq(0, 256)
    lease = admit(cache, doc, max_new=4)
    cache.record_checkpoint(lease, 64, reason)
    assert cache.publish(lease).states_inserted == (64,)
    cache.check_integrity()
    (node,) = lease.published
    assert node.end == 64 and not cache.holds.passed_by_others(node)
    pinned = cache.eviction.pinned(node, cache.recurrent)
    assert pinned == (reason != "tail" or cheap)
    resumed = admit(cache, [*doc[:64], *seq(7000, 16)])  # resumes from it once
    assert resumed.hit == 64 and node.hits == 1
    cache.abort(resumed)
    assert cache.holds.passed_by_others(node) is False
    assert cache.eviction.pinned(node, cache.recurrent)  # proven now
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


@pytest.mark.parametrize("tails_pay", [True, False])
def test_an_own_tail_guess_is_kept_while_tail_states_pay_as_well_as_the_average(
    tails_pay: bool,
) -> None:
    """A dear tail guess its own request decodes behind stays pinned while tail states are
    resumed from at least as often as states on average, ``(hits + 1) / (stored + 2)`` each:
    here two branch states resumed from once each, two earlier tail guesses twice each or never;
    with the new guess, tails (4 + 1) / (3 + 2) against (6 + 1) / (5 + 2) for all (pinned), or
    (0 + 1) / 5 against (2 + 1) / 7 (not)."""
    spec = tiny_spec()
    cache = value_cache(round(spec.state_bytes / CHEAP_GUESS_SHARE) - 1)
    assert cache.recurrent is not None
    for k, reason in enumerate(["branch", "branch", "tail", "tail"]):
        base = seq(10_000 * (k + 1), 128)
        earlier = admit(cache, base)
        cache.record_checkpoint(earlier, 64, reason)
        finish(cache, earlier)
        for extra in range(1 if reason == "branch" else 2 if tails_pay else 0):
            again = admit(cache, [*base[:64], *seq(50_000 + 100 * extra + k, 8)])
            assert again.hit == 64
            cache.abort(again)
    doc = seq(0, 256)
    lease = admit(cache, doc, max_new=4)
    cache.record_checkpoint(lease, 64, "tail")
    assert cache.publish(lease).states_inserted == (64,)
    (node,) = lease.published
    assert node.hits == 0 and not cache.holds.passed_by_others(node)
    assert cache.eviction.pinned(node, cache.recurrent) == tails_pay
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)
    cache.check_integrity()


@pytest.mark.parametrize("strict", [True, False])
def test_an_own_tail_guess_is_cheap_only_while_the_guesses_of_all_in_flight_are(
    strict: bool,
) -> None:
    """One state is exactly the cheap share of the budget. With a second request in flight,
    ``strict_guess_pins`` counts a guess for each (two states: not cheap, so not pinned);
    without it one state is weighed against the budget (pinned). Alone again, it is cheap
    either way."""
    spec = tiny_spec()
    cache = value_cache(
        round(spec.state_bytes / CHEAP_GUESS_SHARE), pin_reused_guesses=False, strict=strict
    )
    assert cache.recurrent is not None
    other = admit(cache, seq(20_000, 32), max_new=4)
    lease = admit(cache, seq(0, 256), max_new=4)
    cache.record_checkpoint(lease, 64, "tail")
    assert cache.publish(lease).states_inserted == (64,)
    (node,) = lease.published
    assert node.hits == 0 and not cache.holds.passed_by_others(node)
    assert cache.requests_in_flight() == 2
    assert cache.eviction.pinned(node, cache.recurrent) == (not strict)
    cache.abort(other)
    cache.check_integrity()
    assert cache.eviction.pinned(node, cache.recurrent)
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


@pytest.mark.parametrize("strict", [True, False])
def test_tails_above_the_average_but_below_the_planners_bar_do_not_pay(strict: bool) -> None:
    """Ten branch states never resumed from, thirty tail guesses resumed from once: tails,
    (1 + 1) / (31 + 2) with the new guess, beat the average (1 + 1) / (41 + 2), but stay
    under one reuse in ``reuse_ratio`` (10). With ``strict_guess_pins`` that is not paying
    (the dear guess is not pinned); without it, beating the average is enough."""
    spec = tiny_spec()
    cache = value_cache(round(spec.state_bytes / CHEAP_GUESS_SHARE) - 1, strict=strict)
    assert cache.recurrent is not None
    for k, reason in enumerate(["branch"] * 10 + ["tail"] * 30):
        earlier = admit(cache, seq(10_000 * (k + 1), 128))
        cache.record_checkpoint(earlier, 64, reason)
        finish(cache, earlier)
    again = admit(cache, [*seq(10_000 * 40, 64), *seq(900_000, 8)])
    assert again.hit == 64  # the last tail guess, resumed from once
    cache.abort(again)
    lease = admit(cache, seq(0, 256), max_new=4)
    cache.record_checkpoint(lease, 64, "tail")
    assert cache.publish(lease).states_inserted == (64,)
    (node,) = lease.published
    view = cache.eviction.context
    rate, mean = view.state_reuse_rate(node), view.mean_state_reuse_rate()
    assert (rate, mean) == (2 / 33, 2 / 43)
    assert cache.eviction.pinned(node, cache.recurrent) == (not strict)
    cache.extend(lease, seq(9000, 4))
    finish(cache, lease)


def test_hycache_preset_turns_the_three_on_and_the_others_keep_them_off() -> None:
    spec = tiny_spec()
    hycache = build_cache(spec, BIG, "hycache")
    assert hycache.config.read_matched_kv and hycache.config.reserve_checkpoint_slot
    assert not hycache.eviction.pins_published_state
    for preset in ("vllm", "sglang", "marconi"):
        other = build_cache(spec, BIG, preset)
        assert not other.config.read_matched_kv and not other.config.reserve_checkpoint_slot
        assert other.eviction.pins_published_state
