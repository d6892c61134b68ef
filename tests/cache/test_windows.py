"""Sliding windows in the cache (``hycache.cache.windows``): what finish and publish keep of a
request's SWA KV, and what a running request's working set charges for it. Every test checks
``check_integrity()`` and the budget after every step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.cache.windows import window_pages
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import CacheUsageError, CapacityError
from hycache.spec.model import FullAttentionGroup, ModelSpec, SlidingWindowGroup
from hycache.tree.keys import decode_tokens
from tests.cache.test_facade import Points, direct_cache, every, seq, tiny_spec

WINDOW = 64
PAGE = 16


def full_swa_spec() -> ModelSpec:
    """Full attention + sliding window, no recurrent layers (a Gemma 3 in miniature)."""
    shape = {"q_heads": 2, "kv_heads": 1, "head_dim": 8, "dtype_bytes": 2}
    return ModelSpec(
        name="tiny-fs",
        groups=(
            FullAttentionGroup(layers=1, **shape),
            SlidingWindowGroup(layers=5, window=WINDOW, **shape),
        ),
        hidden_size=64,
        vocab_size=1000,
        active_mlp_params_per_token=8192,
        num_layers=6,
    )


def swa_of(cache: HybridPrefixCache) -> SlidingWindowComponent:
    (swa,) = [c for c in cache.tree.components if isinstance(c, SlidingWindowComponent)]
    return swa


def live_swa(cache: HybridPrefixCache, tokens: list[int]) -> list[tuple[int, int]]:
    """The position ranges of ``tokens``' path whose SWA KV is live."""
    swa = swa_of(cache)
    spans: list[tuple[int, int]] = []
    for node in cache.tree.nodes_on(tokens):
        if swa.has(node):
            if spans and spans[-1][1] == node.start:
                spans[-1] = (spans[-1][0], node.end)
            else:
                spans.append((node.start, node.end))
    return spans


def tokens_of(lease: Lease) -> list[int]:
    return list(decode_tokens(lease.full_key))


def check(cache: HybridPrefixCache) -> None:
    cache.check_integrity()
    assert cache.pool.used_bytes <= cache.pool.budget_bytes


def serve(cache: HybridPrefixCache, tokens: list[int], max_new: int = 0) -> Lease:
    lease = cache.admit(tokens, max_new_tokens=max_new)
    assert isinstance(lease, Lease), lease
    check(cache)
    cache.record_planned(lease)
    if max_new:
        cache.extend(lease, seq(900_000 + lease.request_id * 1000, max_new))
        cache.record_planned(lease)
    check(cache)
    cache.finish(lease)
    check(cache)
    return lease


def test_with_states_only_the_windows_before_states_and_ends_stay() -> None:
    """Recurrent layers: a request resumes only at a state, so SWA KV outside the windows
    before the states, the resend point and the end is inserted as a tombstone."""
    cache = direct_cache(tiny_spec(swa_window=WINDOW), planner=every(256), page=PAGE)
    prompt = seq(0, 700)
    lease = serve(cache, prompt, max_new=100)
    # states at 256 and 512; resend point 688 (699 rounded down); insert end 800
    assert live_swa(cache, tokens_of(lease)) == [
        (192, 256),
        (448, 512),
        (624, 688),
        (736, 800),
    ]
    # every state still resumes; the prompt again resumes at 512 (no state at 688)
    assert cache.lookup([*prompt[:300], 7]) == (256, 288)
    assert cache.lookup(prompt) == (512, 688)


def test_without_states_the_prompt_stays_and_the_output_slides() -> None:
    """No recurrent layers: any prefix of the prompt may be resumed, so the prompt's SWA KV
    stays; the output beyond the window before the end is a tombstone."""
    cache = direct_cache(full_swa_spec(), planner=Points(), page=PAGE)
    prompt = seq(0, 300)
    tokens = tokens_of(serve(cache, prompt, max_new=200))
    assert live_swa(cache, tokens) == [(0, 288), (432, 496)]
    for cut in (48, 160, 288):  # a later request sharing any prefix of the prompt resumes
        assert cache.lookup([*prompt[:cut], 5, 5]) == (cut, cut)
    assert cache.lookup([*tokens[:400], 5]) == (288, 400)  # inside the output: no window
    assert cache.lookup([*tokens[:496], 5]) == (496, 496)  # the next turn resumes


def test_a_branch_revives_the_window_it_computed() -> None:
    cache = direct_cache(tiny_spec(swa_window=WINDOW), planner=Points(), page=PAGE)
    doc = seq(0, 512)
    serve(cache, [*doc, *seq(5000, 40)])
    assert cache.lookup([*doc, 1]) == (0, 512)  # the document end was never an anchor
    second = serve(cache, [*doc, *seq(6000, 40)])
    assert second.hit == 0 and second.kv_hit == 512
    # its branch state at 512 and the window before it are in the tree now
    assert cache.lookup([*doc, *seq(7000, 40)]) == (512, 512)


def test_publish_keeps_the_windows_the_prompt_needs() -> None:
    cache = direct_cache(tiny_spec(swa_window=WINDOW), planner=every(256), page=PAGE)
    prompt = seq(0, 600)
    lease = cache.admit(prompt, max_new_tokens=50)
    assert isinstance(lease, Lease)
    cache.record_planned(lease, up_to=600)
    check(cache)
    published = cache.publish(lease)
    check(cache)
    assert published.cached_tokens == 592 and published.states_inserted == (256, 512)
    assert live_swa(cache, prompt) == [(192, 256), (448, 512), (528, 592)]
    other = cache.admit([*prompt[:520], 9])
    assert isinstance(other, Lease) and other.hit == 512  # shares the published prompt
    cache.abort(other)
    cache.extend(lease, seq(8000, 50))
    cache.finish(lease)
    check(cache)


def test_a_window_loaded_from_storage_is_all_an_insert_keeps_past_the_hit() -> None:
    """The engine loaded ``[0, 288)`` from storage of its own and holds the SWA KV only from
    the window before 288: publish and finish keep none below it, so a later request sharing
    a shorter prefix resumes no deeper than the SWA KV that exists (the engine's tiers
    extend it), and the pool gives the pages back."""
    cache = direct_cache(full_swa_spec(), planner=Points(), page=PAGE)
    prompt = seq(0, 300)
    lease = cache.admit(prompt, max_new_tokens=20)
    assert isinstance(lease, Lease) and lease.hit == 0
    with pytest.raises(CacheUsageError):
        cache.window_loaded_from(lease, 301)
    cache.window_loaded_from(lease, 224)
    published = cache.publish(lease)
    check(cache)
    assert published.cached_tokens == 288
    assert min(ref.start for ref in published.pages["swa"]) == 224
    assert live_swa(cache, prompt) == [(224, 288)]
    with pytest.raises(CacheUsageError):
        cache.window_loaded_from(lease, 224)  # after publish: too late
    cache.extend(lease, seq(8000, 19))
    cache.finish(lease)
    check(cache)
    assert live_swa(cache, prompt) == [(224, 288)]
    assert cache.lookup([*prompt[:160], 5]) == (0, 160)  # no window before 160: no resume
    assert cache.lookup([*prompt[:288], 5]) == (288, 288)


@pytest.mark.parametrize(("budget", "expected"), [(None, 44), (32, 7), (1000, 44)])
def test_a_running_request_charges_the_window_and_one_chunk(
    budget: int | None, expected: int
) -> None:
    cache = direct_cache(tiny_spec(swa_window=WINDOW), planner=every(256), page=PAGE)
    lease = cache.admit(seq(0, 600), max_new_tokens=100, token_budget=budget)
    assert isinstance(lease, Lease)
    assert len(lease.working["swa"]) == expected  # 700 tokens = 44 pages; (63 + 32)/16 + 1
    assert len(lease.working["full"]) == 44
    check(cache)
    cache.abort(lease)
    check(cache)


def test_the_window_cap_lets_a_long_request_fit() -> None:
    spec = tiny_spec(swa_window=WINDOW)
    per_token = {g.kind: g.kv_bytes_per_token for g in spec.groups if g.kind != "recurrent"}
    budget = 2000 * per_token["full"] + 200 * per_token["swa"] + 4 * spec.state_bytes
    cache = direct_cache(spec, budget, planner=every(256), page=PAGE, token_budget=64)
    serve(cache, seq(0, 1800), max_new=100)
    whole = direct_cache(spec, budget, planner=every(256), page=PAGE)
    with pytest.raises(CapacityError):  # one chunk: the request's whole SWA KV at once
        whole.admit(seq(0, 1800), max_new_tokens=100)


def test_without_states_a_running_request_charges_its_prompt_and_one_window() -> None:
    cache = direct_cache(full_swa_spec(), planner=Points(), page=PAGE, token_budget=32)
    lease = cache.admit(seq(0, 300), max_new_tokens=200)
    assert isinstance(lease, Lease)
    assert len(lease.working["full"]) == 32  # 500 tokens
    assert len(lease.working["swa"]) == 19 + 5  # the prompt's 19 pages; 64 / 16 + 1 of output
    check(cache)
    cache.abort(lease)
    check(cache)


@settings(max_examples=80, deadline=None)
@given(
    window=st.integers(1, 200),
    prompt=st.integers(1, 400),
    output=st.integers(0, 400),
    chunk=st.one_of(st.none(), st.integers(1, 300)),
    page=st.sampled_from([1, 4, 16]),
    keeps_prompt=st.booleans(),
)
def test_window_pages_cover_what_a_running_request_holds_at_once(
    window: int, prompt: int, output: int, chunk: int | None, page: int, keeps_prompt: bool
) -> None:
    """Never more than all the request's pages; never less than what it holds at once: the
    window before a chunk plus the chunk (with states), or the prompt plus a window of output
    (without)."""
    tokens = prompt + output
    pages = -(-tokens // page)
    got = window_pages(window, tokens, output, chunk, page, keeps_prompt=keeps_prompt)
    assert got <= pages
    if got == pages:
        return
    if keeps_prompt:
        assert (got - -(-prompt // page)) * page >= window + page - 1
    else:
        assert chunk is not None and got * page >= window - 1 + chunk + page - 1


def test_many_requests_hold_the_budget_and_leave_nothing_behind() -> None:
    spec = tiny_spec(swa_window=WINDOW)
    budget = 3000 * spec.kv_bytes_per_token + 12 * spec.state_bytes
    cache = direct_cache(spec, budget, planner=Points(every=128), page=PAGE, token_budget=96)
    system = seq(0, 300)
    for i in range(30):
        turn = [*system, *seq(10_000 * (i % 5 + 1), 100 + 37 * i % 400)]
        serve(cache, turn, max_new=30 + i % 50)
    assert cache.stats().evictions
    cache.clear()
    check(cache)
    assert cache.pool.used_bytes == 0
