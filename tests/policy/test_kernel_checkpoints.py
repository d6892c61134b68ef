"""In-kernel checkpoints: a state on the recurrent kernel's grid inside a prefill chunk is copied
out of that chunk's forward pass instead of ending the chunk (hycache.policy.base)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.policy.checkpoint.base import PlanInput
from hycache.policy.checkpoint.chunks import chunk_ends, in_kernel, onto_kernel_grid, settle_ends
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.checkpoint.marconi import MarconiPlanner
from hycache.policy.checkpoint.sglang import SglangPlanner


def test_in_kernel_is_a_chunk_end_or_a_kernel_multiple_from_its_chunk_start() -> None:
    ends = [8192, 9000]
    assert in_kernel(0, ends, 64, 64)
    assert not in_kernel(0, ends, 100, 64)
    assert in_kernel(0, ends, 8192, 64)  # a chunk end
    assert in_kernel(0, ends, 8192 + 64, 64)  # from the second chunk's start
    assert not in_kernel(0, ends, 8200, 64)
    assert in_kernel(10, [500], 10 + 128, 64)  # counted from the prefill's start, not from 0
    assert not in_kernel(10, [500], 128, 64)
    assert not in_kernel(0, ends, 64, None)  # no kernel grid: only chunk ends
    assert in_kernel(0, ends, 9000, None)


def test_onto_kernel_grid_moves_down_within_the_chunk() -> None:
    assert onto_kernel_grid(10, [8202, 9000], 1000, 64, 1) == 10 + 960
    assert onto_kernel_grid(10, [8202, 9000], 50, 64, 1) == 50  # would land on the start
    assert onto_kernel_grid(10, [8202, 9000], 8202, 64, 1) == 8202  # already a chunk end
    assert onto_kernel_grid(10, [8202, 9000], 8300, 64, 1) == 8202 + 64
    assert onto_kernel_grid(32, [4000], 1000, 64, 16) == 32 + 960  # page-aligned too
    assert onto_kernel_grid(0, [4000], 1000, 64, 48) == 960  # lcm(64, 48) = 192 steps


def test_settle_ends_cuts_only_where_the_kernel_cannot_serve() -> None:
    assert settle_ends(0, 300, 100, [64], 64) == chunk_ends(0, 300, 100)
    assert settle_ends(0, 300, 100, [64, 130], 64) == [100, 130, 230, 300]
    # a forced end moves the chunks after it: 164 is re-checked against the new chunks
    assert settle_ends(0, 300, 100, [50, 164], 64) == [50, 150, 164, 264, 300]
    assert settle_ends(0, 300, 100, [64], None) == [64, 164, 264, 300]


def test_hycache_branch_checkpoint_is_copied_out_of_the_kernel() -> None:
    """A shared prefix of 1000 tokens: with a 64-token kernel the branch state is taken at 960
    inside the single chunk; without one it ends a chunk at 1000."""
    planner = HycachePlanner(adaptive=False)
    with_kernel = planner.plan(PlanInput(3000, 0, 1000, 1, 8192, 10, {}, 64))
    assert with_kernel.chunk_ends == (3000,)
    assert [(p.position, p.reason) for p in with_kernel.checkpoints] == [(960, "branch")]
    without = planner.plan(PlanInput(3000, 0, 1000, 1, 8192, 10, {}, None))
    assert without.chunk_ends == (1000, 3000)
    assert [(p.position, p.reason) for p in without.checkpoints] == [(1000, "branch")]


def test_sglang_extra_buffer_tracks_without_cutting_and_marconi_still_cuts() -> None:
    request = PlanInput(3000, 128, 2000, 1, 8192, 0, {}, 64)
    tracked = SglangPlanner("extra_buffer", 1, 256).plan(request)
    assert tracked.chunk_ends == (3000,)
    # one tracked state per extend: the branching length replaces the extend's end
    assert [(p.position, p.reason) for p in tracked.checkpoints] == [(1984, "branch")]
    alone = SglangPlanner("extra_buffer", 1, 256).plan(PlanInput(3000, 128, 128, 1, 8192, 0))
    assert [(p.position, p.reason) for p in alone.checkpoints] == [(128 + 2816, "prompt_end")]
    marconi = MarconiPlanner().plan(request)
    assert marconi.chunk_ends == (2000, 3000)  # Marconi's branch state ends a chunk


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 20_000),
    start_frac=st.floats(0, 1),
    hit_frac=st.floats(0, 1),
    budget=st.sampled_from([None, 256, 1000, 8192]),
    kernel=st.sampled_from([None, 64, 256]),
    page=st.sampled_from([1, 16]),
    new=st.integers(0, 500),
)
def test_every_prefill_checkpoint_is_a_chunk_end_or_in_kernel(
    n: int,
    start_frac: float,
    hit_frac: float,
    budget: int | None,
    kernel: int | None,
    page: int,
    new: int,
) -> None:
    start = int(start_frac * (n - 1)) // page * page
    kv_hit = max(start, int(hit_frac * (n - 1)) // page * page)
    request = PlanInput(n, start, kv_hit, page, budget, new, {}, kernel)
    planners = [HycachePlanner(adaptive=False), SglangPlanner("extra_buffer", page, 256)]
    for planner in planners:
        plan = planner.plan(request)
        ends = list(plan.chunk_ends)
        assert ends == sorted(set(ends)) and ends[-1] == n
        pieces = zip([start, *ends[:-1]], ends, strict=True)
        assert all(0 < b - a <= (budget or n) for a, b in pieces)
        for point in plan.checkpoints:
            assert point.position > start and point.position % page == 0
            if point.position < n:
                assert in_kernel(start, ends, point.position, kernel), (planner, point)
