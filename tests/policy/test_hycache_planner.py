"""The hycache planner's learned tail checkpoint and its end-of-request state donation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.policy.checkpoint.base import PlanInput
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.checkpoint.thresholds import DEFAULT_THRESHOLDS, PlannerThresholds


def plan_input(
    n: int, *, start: int = 0, kv_hit: int = 0, page: int = 1, new: int = 0
) -> PlanInput:
    return PlanInput(n, start, kv_hit, page, None, new)


def test_tail_length_maximises_the_tokens_a_later_prompt_reuses() -> None:
    """Once tails were seen, the step back is the observed tail ``t`` with the most
    ``(prompt_len - t) * share of tails <= t``: all of them for a long prompt, fewer for a
    short one (covering the longest tail would leave little to reuse)."""
    planner = HycachePlanner()
    assert planner.tail_length(5000) == DEFAULT_THRESHOLDS.default_tail
    for tail in range(10, 110, 10):  # ten prompts that shared all but 10..100 tokens
        planner.plan(plan_input(5000, kv_hit=5000 - tail))
    assert planner.tail_length(5000) == 100  # 4900 tokens for every later prompt
    assert planner.tail_length(150) == 70  # 80 tokens for 7 in 10 (560) beat 50 for all (500)
    assert planner.tail_length(60) == 30  # 30 tokens for 3 in 10; a longer tail is past 0
    plan = planner.plan(plan_input(3000, kv_hit=0))
    positions = {p.position: p.reason for p in plan.checkpoints}
    assert positions.get(2900) == "tail" or 2900 not in positions  # at most one prefill point
    assert all(p.position in plan.chunk_ends for p in plan.checkpoints if p.position <= 3000)


@settings(max_examples=200, deadline=None)
@given(
    tails=st.lists(st.integers(1, 400), min_size=8, max_size=40),
    prompt_len=st.integers(2, 600),
)
def test_tail_length_matches_a_brute_force_search(tails: list[int], prompt_len: int) -> None:
    """Against every step back from 0 to the prompt length: none reuses more tokens in
    expectation than the one chosen (ties may pick either)."""
    planner = HycachePlanner()
    for tail in tails:
        planner.plan(plan_input(tail + 1000, kv_hit=1000))

    def reused(step: int) -> int:
        return max(0, prompt_len - step) * sum(t <= step for t in tails)

    best = max(reused(step) for step in range(prompt_len + 1))
    chosen = planner.tail_length(prompt_len)
    assert reused(chosen) == best or (best == 0 and chosen >= min(tails))


def test_tail_checkpoint_lands_before_a_later_divergence() -> None:
    """``twice``-like prompts: a prefix, then a short unique suffix. Once tails were seen,
    the tail checkpoint of a new prompt sits inside its prefix."""
    planner = HycachePlanner(adaptive=False)
    for i in range(20):
        planner.plan(plan_input(3000 + i, kv_hit=3000 + i - 64))
    plan = planner.plan(plan_input(4064))
    tails = [p.position for p in plan.checkpoints if p.reason == "tail"]
    assert tails == [4064 - planner.tail_length(4064)] and tails[0] <= 4000


def test_end_of_request_state_is_donated_on_page_aligned_ends() -> None:
    planner = HycachePlanner(adaptive=False)
    donated = planner.plan(plan_input(100, new=20, page=1))
    assert donated.keep_final_state and all(p.reason != "final" for p in donated.checkpoints)
    copied = planner.plan(plan_input(100, new=20, page=16))  # 120 is not a page end
    assert not copied.keep_final_state
    assert [p.position for p in copied.checkpoints if p.reason == "final"] == [112]


def test_prompt_end_sits_on_the_learned_divergence_grid() -> None:
    """Prompts that diverge on 512-token blocks teach a 512 grid: the prompt-end checkpoint is
    the last block boundary (the exact end only serves an identical prompt)."""
    planner = HycachePlanner(adaptive=False)
    for i in range(1, 30):
        planner.plan(plan_input(512 * i + 100, kv_hit=512 * i))
    assert planner.divergence_grid(1) == 512
    plan = planner.plan(plan_input(5000))
    ends = [p.position for p in plan.checkpoints if p.reason == "prompt_end"]
    assert ends == [] or ends == [4608]
    assert 5000 not in [p.position for p in plan.checkpoints]


def test_an_early_checkpoint_that_does_not_pay_is_only_retried_rarely() -> None:
    """A kind reused once in 40 stored states (below one in 10) is taken before the prompt end
    (here: splitting the prefill, no kernel grid given) only on the planner's rare re-tries
    (every 32nd plan), not on the every-16th re-try of the prompt end."""
    planner = HycachePlanner()
    record = {"tail": (40, 1), "prompt_end": (40, 1), "branch": (40, 20)}  # a better kind
    splits = 0
    for _ in range(64):
        plan = planner.plan(PlanInput(3000, 0, 0, 1, None, 10, record))
        splits += any(p.reason == "tail" for p in plan.checkpoints)
        assert len(plan.chunk_ends) <= 2
    assert splits == 64 // planner.thresholds.early_retry_every


def test_a_donated_end_state_is_kept_at_a_lower_reuse_bar_than_a_copied_one() -> None:
    """End states reused once per 15 stored: below the 1-in-10 bar for copies (kept only on
    the every-16th re-tries), above the 1-in-20 bar for a donated end state (the running state
    itself: no copy, no slot)."""
    record = {"final": (30, 2), "branch": (30, 20)}  # a better kind: final is not the best
    donating, copying = HycachePlanner(), HycachePlanner()
    donated = copied = 0
    for _ in range(64):
        donated += donating.plan(PlanInput(1000, 0, 0, 1, None, 24, record)).keep_final_state
        plan = copying.plan(PlanInput(1000, 0, 0, 16, None, 20, record))  # 1020: no page end
        assert not plan.keep_final_state
        copied += any(p.reason == "final" for p in plan.checkpoints)
    assert (donated, copied) == (64, 64 // copying.thresholds.retry_every)
    rarer_record = {"final": (50, 2), "branch": (30, 20)}
    rarer = HycachePlanner().plan(PlanInput(1000, 0, 0, 1, None, 24, rarer_record))
    assert not rarer.keep_final_state


def test_without_free_room_a_plan_takes_at_most_one_prefill_checkpoint() -> None:
    """Room for every candidate: with ``free_room`` the plan also takes the left-out ones, as
    reason ``room``; without it, or without the room, at most ``max_prefill_checkpoints``."""
    for roomy, free in ((True, 64), (False, 64), (True, 1)):
        planner = HycachePlanner(adaptive=False, free_room=roomy)
        plan = planner.plan(
            PlanInput(4000, 0, 2000, 1, None, 0, free_states=free, state_kv_tokens=500)
        )
        prefill = [p for p in plan.checkpoints if p.position <= 4000]
        reasons = {p.reason for p in prefill}
        if roomy and free > 1:
            assert len(prefill) > 1 and "room" in reasons and len(reasons - {"room"}) == 1
        else:
            assert len(prefill) == 1 and "room" not in reasons


def test_room_states_never_cut_the_prefill() -> None:
    """Room states ride along only where the kernel copies them out (or a chunk ends anyway):
    the points of the free-room grid inside the first kernel step past the start would each
    cost a forward pass, so they are left out and the chunks are those of the plan without
    free room."""
    roomy = PlanInput(
        4000, 1000, 0, 1, None, 0, kernel_chunk=64, free_states=1000, state_kv_tokens=20
    )
    with_room = HycachePlanner(adaptive=False).plan(roomy)
    without = HycachePlanner(adaptive=False, free_room=False).plan(roomy)
    assert with_room.chunk_ends == without.chunk_ends == (4000,)
    room = [p.position for p in with_room.checkpoints if p.reason == "room"]
    assert room and all((p - 1000) % 64 == 0 or p == 4000 for p in room)
    assert not {1020, 1040, 1060} & set(room)  # the grid points the kernel cannot copy out


def test_without_the_tail_checkpoint_no_tail_reason_appears() -> None:
    for tail in (True, False):
        planner = HycachePlanner(adaptive=False, free_room=False, tail_checkpoint=tail)
        reasons: set[str] = set()
        for i in range(20):
            plan = planner.plan(plan_input(3000 + i, kv_hit=3000 + i - 64))
            reasons |= {p.reason for p in plan.checkpoints}
        roomy = HycachePlanner(tail_checkpoint=tail).plan(
            PlanInput(4000, 0, 0, 1, None, 0, free_states=64, state_kv_tokens=500)
        )
        reasons |= {p.reason for p in roomy.checkpoints}
        assert ("tail" in reasons) is tail


def test_without_learn_grid_the_prompt_end_stays_on_the_page_grid() -> None:
    planner = HycachePlanner(adaptive=False, learn_grid=False)
    for i in range(1, 30):
        planner.plan(plan_input(512 * i + 100, kv_hit=512 * i))
    assert planner.divergence_grid(1) == 1


def test_the_tail_quantile_and_the_grid_cap_are_the_planner_s_own() -> None:
    """``tail_quantile`` picks the quantile of the tails; ``max_grid`` caps the learned
    divergence grid (prompts diverging on 512-token blocks, grid capped at 256)."""
    median = HycachePlanner(thresholds=PlannerThresholds(tail_quantile=0.5))
    for tail in range(10, 110, 10):
        median.plan(plan_input(5000, kv_hit=5000 - tail))
    assert median.tail_length(5000) == 60  # the middle of 10, 20, ..., 100 (index 5)
    capped = HycachePlanner(adaptive=False, thresholds=PlannerThresholds(max_grid=256))
    for i in range(1, 30):
        capped.plan(plan_input(512 * i + 100, kv_hit=512 * i))
    assert capped.divergence_grid(1) == 256
    uneven = HycachePlanner(adaptive=False, thresholds=PlannerThresholds(max_grid=300))
    for i in range(1, 30):  # a cap that is no power of two: the largest one within it
        uneven.plan(plan_input(512 * i + 100, kv_hit=512 * i))
    assert uneven.divergence_grid(1) == 256


def test_the_reuse_bar_warmup_and_retries_are_the_planner_s_own() -> None:
    """A kind reused once per 15 stored: below the default bar (1 in 10), above a bar of 1 in
    20; with a warm-up of 40 states it is still trusted blindly."""
    record = {"tail": (30, 2), "branch": (30, 20)}  # a better kind: tail is not the best
    strict = HycachePlanner(thresholds=PlannerThresholds(retry_every=1000))
    lenient = HycachePlanner(thresholds=PlannerThresholds(reuse_ratio=20))
    trusting = HycachePlanner(thresholds=PlannerThresholds(warmup=40, retry_every=1000))
    request = PlanInput(3000, 0, 0, 1, None, 0, record)
    for planner in (strict, lenient, trusting):
        planner.plan(plan_input(100))  # past the first plan, a re-try
    assert not strict._pays(
        "tail", request, strict.thresholds.reuse_ratio, strict.thresholds.retry_every
    )
    assert lenient._pays(
        "tail", request, lenient.thresholds.reuse_ratio, lenient.thresholds.retry_every
    )
    assert trusting._pays(
        "tail", request, trusting.thresholds.reuse_ratio, trusting.thresholds.retry_every
    )


def test_the_grid_and_tail_evidence_thresholds_are_the_planner_s_own() -> None:
    """``grid_warmup`` divergences before the grid is learned, ``grid_share`` of them on it;
    ``tail_warmup`` tails before the learned tail replaces ``default_tail``, the tail chosen from
    the last ``tail_memory`` of them."""
    # 29 prompts diverging on 512-token blocks, 1 in 4 of them a block off the 1024 grid
    eager = PlannerThresholds(grid_warmup=10, grid_share=0.7)
    patient = PlannerThresholds(grid_warmup=40, grid_share=0.7)
    loose, strict = PlannerThresholds(grid_share=0.7), PlannerThresholds(grid_share=0.8)
    grids = {}
    for name, t in (("eager", eager), ("patient", patient), ("loose", loose), ("strict", strict)):
        planner = HycachePlanner(adaptive=False, thresholds=t)
        for i in range(1, 30):
            blocks = 2 * i + (i % 4 == 0)
            planner.plan(plan_input(512 * blocks + 100, kv_hit=512 * blocks))
        grids[name] = planner.divergence_grid(1)
    assert grids["patient"] == 1 and grids["eager"] >= 1024
    assert grids["loose"] >= 1024 and grids["strict"] == 512
    short = HycachePlanner(thresholds=PlannerThresholds(tail_warmup=3, default_tail=77))
    assert short.tail_length(5000) == 77
    for tail in (500, 10, 20, 30):
        short.plan(plan_input(5000, kv_hit=5000 - tail))
    assert short.tail_length(5000) == 500  # covering all four, no warm-up of 8
    forgetful = HycachePlanner(thresholds=PlannerThresholds(tail_memory=8))
    for tail in (900, *range(10, 90, 10)):  # the 900 falls out of a memory of 8
        forgetful.plan(plan_input(5000, kv_hit=5000 - tail))
    assert forgetful.tail_length(5000) == 80


def test_the_best_reused_kind_is_never_skipped() -> None:
    """Every kind below the reuse bar (memory thrashes): the one reused at the highest rate is
    still taken on every plan with ``keep_best``; without it, only on the re-tries. A kind
    below another's rate is skipped either way, and a kind still in its warm-up does not
    count as a rival."""
    record = {"final": (100, 3), "prompt_end": (100, 1), "branch": (2, 2)}
    for keep in (True, False):
        planner = HycachePlanner(keep_best=keep, tail_checkpoint=False)
        donated = ended = 0
        for _ in range(64):
            plan = planner.plan(PlanInput(1000, 0, 0, 1, None, 24, record))
            donated += plan.keep_final_state
            ended += any(p.reason == "prompt_end" for p in plan.checkpoints)
        retries = 64 // planner.thresholds.retry_every
        assert donated == (64 if keep else retries)
        assert ended == retries


@pytest.mark.parametrize(
    ("record", "proven_first", "kept"),
    [
        # tail tried and not paid yet, prompt end untried: the fixed order keeps the tail; a
        # rate with a prior hit ranks the untried prompt end first (and so alternates)
        ({"tail": (1, 0)}, True, "tail"),
        ({"tail": (1, 0)}, False, "prompt_end"),
        # a kind resumed from outranks every kind never resumed from; the prior rate puts a
        # kind tried once (1 / 3) above one resumed from once in 9 (2 / 11)
        ({"tail": (1, 0), "prompt_end": (9, 1)}, True, "prompt_end"),
        ({"tail": (1, 0), "prompt_end": (9, 1)}, False, "tail"),
        # among kinds resumed from, the rate decides
        ({"tail": (4, 2), "prompt_end": (9, 1)}, True, "tail"),
    ],
)
def test_kinds_never_resumed_from_keep_the_fixed_order(
    record: dict[str, tuple[int, int]], proven_first: bool, kept: str
) -> None:
    planner = HycachePlanner(proven_first=proven_first, adaptive=False)
    plan = planner.plan(PlanInput(5000, 0, 0, 1, None, 0, record))
    assert [p.reason for p in plan.checkpoints] == [kept]


@pytest.mark.parametrize(
    ("start", "skip_first_step", "points", "ends"),
    [
        # the tail (prompt end less the default 256-token step back: 2825) lies 25 tokens past
        # the state the prefill resumes from: off the kernel grid, it would end a chunk. Not a
        # candidate: the one checkpoint goes to the next kind, the prompt end (a chunk end)
        (2800, True, [(3081, "prompt_end")], (3081,)),
        (2800, False, [(2825, "tail")], (2825, 3081)),
        # a grid step or more past it, the tail moves onto the grid (2764): copied out of the
        # kernel, no chunk ends there, whatever the knob
        (2700, True, [(2764, "tail")], (3081,)),
        (2700, False, [(2764, "tail")], (3081,)),
    ],
)
def test_a_checkpoint_within_the_first_grid_step_is_not_taken(
    start: int, skip_first_step: bool, points: list[tuple[int, str]], ends: tuple[int, ...]
) -> None:
    planner = HycachePlanner(adaptive=False, free_room=False, skip_first_step=skip_first_step)
    plan = planner.plan(PlanInput(3081, start, start, 1, None, 0, kernel_chunk=64))
    assert [(p.position, p.reason) for p in plan.checkpoints] == points
    assert plan.chunk_ends == ends


@pytest.mark.parametrize(
    ("in_flight", "decode_room", "kernel_chunk", "ends"),
    [
        # 8192 less 3 decoding requests, floored to the grid step (lcm(64, 16) = 64): 8128
        (3, True, 64, (8128, 16256, 20000)),
        (0, True, 64, (8192, 16384, 20000)),
        (3, False, 64, (8192, 16384, 20000)),
        # no kernel grid (serial replays): nothing is prefilled beside decodes
        (3, True, None, (8192, 16384, 20000)),
        # never below one grid step
        (8190, True, 64, (*range(64, 20000, 64), 20000)),
    ],
)
def test_chunks_leave_a_token_of_the_budget_per_request_in_flight(
    in_flight: int, decode_room: bool, kernel_chunk: int | None, ends: tuple[int, ...]
) -> None:
    planner = HycachePlanner(
        adaptive=False, free_room=False, tail_checkpoint=False, decode_room=decode_room
    )
    request = PlanInput(20000, 0, 0, 16, 8192, 0, kernel_chunk=kernel_chunk, in_flight=in_flight)
    plan = planner.plan(request)
    assert plan.chunk_ends == ends
    # the only state planned is the prompt's end, which ends the last chunk whatever the room
    assert [(p.position, p.reason) for p in plan.checkpoints] == [(20000, "prompt_end")]


@settings(max_examples=200, deadline=None)
@given(
    pages=st.integers(1, 4000),
    start_pages=st.integers(0, 3999),
    budget=st.integers(1, 20_000),
    in_flight=st.integers(0, 300),
    page=st.sampled_from([1, 16, 48]),
)
def test_every_chunk_but_the_last_fits_the_budget_left_by_the_decodes(
    pages: int, start_pages: int, budget: int, in_flight: int, page: int
) -> None:
    """A prompt whose only planned state is its end (a whole number of pages): every chunk but
    the last is one length, a multiple of the grid step (lcm of the kernel chunk, 64, and the
    page), at most the budget less the requests in flight, or one step where that leaves less."""
    n = pages * page
    start = min(start_pages, pages - 1) * page
    planner = HycachePlanner(adaptive=False, free_room=False, tail_checkpoint=False)
    request = PlanInput(n, start, start, page, budget, 0, kernel_chunk=64, in_flight=in_flight)
    ends = planner.plan(request).chunk_ends
    step = 64 * page // math.gcd(64, page)
    lengths = [b - a for a, b in zip((start, *ends), ends, strict=False)]
    assert ends[-1] == n
    assert len(set(lengths[:-1])) <= 1
    for length in lengths[:-1]:
        assert length % step == 0
        assert length <= max(step, budget - in_flight)
