"""Engine replay of in-kernel checkpoints: copied out of the piece that passes them, and a piece
stops at a planned state that is off the kernel grid from the piece's start."""

from __future__ import annotations

import dataclasses

from hycache.cache.lease import Lease
from hycache.cache.presets import build_cache
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.replay import _Flight, replay_engine
from hycache.sim.request import Request
from hycache.sim.serial import replay_serial
from hycache.spec.model import ModelSpec, RecurrentGroup, load_spec


def request(rid: str, tokens: list[int], out: int, arrival: float) -> Request:
    return Request.of(rid, tokens, [7] * out, arrival)


def without_kernel_grid(spec: ModelSpec) -> ModelSpec:
    groups = tuple(
        dataclasses.replace(g, kernel_chunk=None) if isinstance(g, RecurrentGroup) else g
        for g in spec.groups
    )
    return dataclasses.replace(spec, groups=groups)


def test_a_shared_prefix_state_costs_no_forward_pass_on_the_kernel_grid() -> None:
    """Two prompts share 3000 tokens; the third request diverges inside the shared part. The
    second one checkpoints the branch point: on the 64-token grid from inside its single chunk
    (its TTFT is one forward pass), without a kernel grid by ending a chunk there (two). The
    cache is nearly unlimited: ``free_room`` is off, else every grid point would be a state."""
    shared = list(range(3000))
    requests = [
        request("a", [*shared, *range(10_000, 10_500)], 4, 0.0),
        request("b", [*shared, *range(20_000, 20_700)], 4, 10.0),
        request("c", [*shared, *range(30_000, 30_300)], 4, 20.0),
    ]
    base = load_spec("qwen3-next-80b-a3b")
    results = {}
    for spec in (base, without_kernel_grid(base)):
        cost = CostModel(spec, hardware("h200"))
        cache = build_cache(
            spec, 10**12, "hycache", track_ids=False, adaptive=False, free_room=False
        )
        results[spec.recurrent.kernel_chunk if spec.recurrent else None] = (
            replay_engine(cache, requests, cost),
            cost,
        )
        cache.check_integrity()
    (grid, cost), (split, _) = results[64], results[None]
    # b reuses nothing (a kept no state inside the shared part) and takes the branch state
    assert abs(grid.ttft_samples[1] - cost.step_time([(0, 3700)], [])) < 1e-9
    assert grid.ttft_samples[1] < split.ttft_samples[1]
    # c resumes from that state: at 2944 (the grid below 3000) or exactly at 3000
    total = sum(r.prompt_len for r in requests)
    assert abs(grid.token_hit_rate - 2944 / total) < 1e-9
    assert abs(split.token_hit_rate - 3000 / total) < 1e-9
    assert grid.capacity_overrun_bytes == split.capacity_overrun_bytes == 0
    # serial mode prefills nothing, so cuts are free: the branch state sits exactly at 3000
    serial_cache = build_cache(
        base, 10**12, "hycache", track_ids=False, adaptive=False, free_room=False
    )
    serial = replay_serial(serial_cache, requests, cost)
    assert abs(serial.token_hit_rate - 3000 / total) < 1e-9


def test_a_piece_stops_at_a_planned_state_off_its_kernel_grid() -> None:
    spec = load_spec("qwen3-next-80b-a3b")
    cache = build_cache(spec, 10**12, "hycache", track_ids=False)
    lease = cache.admit(list(range(1000)), max_new_tokens=1)
    assert isinstance(lease, Lease)
    flight = _Flight(
        request("x", list(range(1000)), 1, 0.0), lease, 100, [292], {292: "tail"}, [1000]
    )
    assert flight.piece_end(1000, 64) == 1000  # 192 tokens from the piece's start: in-kernel
    assert flight.piece_end(1000, None) == 292  # no kernel grid: the piece ends there
    assert flight.piece_end(200, 64) == 200  # the state lies beyond this piece
    flight.position = 128  # the step budget had cut the earlier piece at 128
    assert flight.piece_end(1000, 64) == 292  # 164 from this piece's start: off the grid
    cache.abort(lease)


def test_a_room_state_off_the_kernel_grid_is_dropped_not_paid_for() -> None:
    """A ``room`` state was taken only because it displaced nothing: one that would stop a
    piece (a forward pass more) leaves the plan instead; on the grid it is kept."""
    spec = load_spec("qwen3-next-80b-a3b")
    cache = build_cache(spec, 10**12, "hycache", track_ids=False)
    lease = cache.admit(list(range(1000)), max_new_tokens=1)
    assert isinstance(lease, Lease)
    reasons = {292: "room", 420: "tail", 548: "room"}
    flight = _Flight(
        request("x", list(range(1000)), 1, 0.0), lease, 100, [292, 420, 548], {**reasons}, [1000]
    )
    assert flight.piece_end(1000, 64) == 1000  # all on the grid from 100: nothing dropped
    assert flight.checkpoints == [292, 420, 548]
    flight.position = 128  # the step budget had cut the earlier piece at 128
    # 292 is off the new piece's grid: dropped; the tail state at 420 stops the piece
    assert flight.piece_end(1000, 64) == 420
    assert flight.checkpoints == [420, 548] and set(flight.reasons) == {420, 548}
    flight.position = 420
    flight.record_due(cache)
    flight.position = 421  # the next piece starts off the grid: the room state at 548 goes
    assert flight.piece_end(1000, 64) == 1000
    assert flight.checkpoints == [420]
    cache.abort(lease)


def test_a_piece_the_budget_cuts_stays_on_the_kernel_grid_of_its_chunk() -> None:
    """The step budget cuts a piece before its planned chunk end: with an in-kernel state still
    ahead in that chunk the cut is floored onto the chunk's kernel grid, so the next piece
    starts on it and passes the state without stopping there."""
    spec = load_spec("qwen3-next-80b-a3b")
    cache = build_cache(spec, 10**12, "hycache", track_ids=False)
    lease = cache.admit(list(range(1000)), max_new_tokens=1)
    assert isinstance(lease, Lease) and lease.hit == 0
    flight = _Flight(
        request("x", list(range(1000)), 1, 0.0), lease, 0, [384], {384: "tail"}, [1000]
    )
    assert flight.budget_end(250, 1000, 64) == 192  # 3 * 64: the state at 384 is ahead
    assert flight.budget_end(250, 1000, None) == 250  # no kernel grid: nothing to keep
    assert flight.budget_end(50, 1000, 64) == 50  # the grid would leave nothing to run
    assert flight.budget_end(450, 1000, 64) == 450  # no state left past the cut
    assert flight.budget_end(250, 300, 64) == 250  # the state lies in a later chunk
    flight.position = 192
    assert flight.piece_end(1000, 64) == 1000  # 192 from 192: copied out of the kernel
    flight.position = 250  # the cut unfloored: that piece would stop at the state
    assert flight.piece_end(1000, 64) == 384
    cache.abort(lease)


def test_a_later_planned_chunk_is_the_grid_a_cut_is_floored_to() -> None:
    """The grid of the planned chunk the piece is in: from the chunk's planned start (the end
    of the chunk before it), not from where the prefill began."""
    spec = load_spec("qwen3-next-80b-a3b")
    cache = build_cache(spec, 10**12, "hycache", track_ids=False)
    lease = cache.admit(list(range(3000)), max_new_tokens=1)
    assert isinstance(lease, Lease)
    flight = _Flight(
        request("x", list(range(3000)), 1, 0.0), lease, 0, [2010], {2010: "tail"}, [1050, 3000]
    )
    flight.position = 1050
    assert flight.budget_end(1500, 3000, 64) == 1050 + 7 * 64
    cache.abort(lease)


def test_a_chunk_planned_with_room_for_decodes_runs_whole() -> None:
    """``b``'s 10,000-token prompt arrives while ``a`` decodes: a step gives it 8,191 of the
    8,192-token budget. Planned in chunks of the whole budget, its first chunk ends at 8,192:
    the step runs 8,191 tokens of it and the next one the last token alone, so its prefill
    takes three steps. With ``decode_room`` the chunks are 8,128 long (one token less per
    request in flight, on the grid): two steps."""
    requests = [
        request("a", list(range(100)), 2_000, 0.0),
        request("b", list(range(10_000, 20_000)), 4, 0.5),
    ]
    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    results = {}
    for room in (True, False):
        cache = build_cache(
            spec, 10**12, "hycache", track_ids=False, free_room=False, decode_room=room
        )
        results[room] = replay_engine(cache, requests, cost)
        cache.check_integrity()
    with_room, without = results[True], results[False]
    assert with_room.token_hit_rate == without.token_hit_rate == 0.0
    sliver = cost.step_time([(8_191, 1)], [100 + 1])  # the step that ran the last token
    saved = without.ttft_samples[1] - with_room.ttft_samples[1]
    assert saved > 0.9 * sliver
