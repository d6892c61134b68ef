"""The simulator's ``disagg`` mode: bytes moved are the analytic minimum (computed here from
the spec's group fields and the decode cache's own admissions), decode-side hits reduce them,
TTFT includes the transfer, and neither instance's capacity is ever overrun."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.cache.presets import build_cache
from hycache.cli.fit import smallest_capacity
from hycache.cli.main import main
from hycache.sim.cost import CostModel
from hycache.sim.disagg import replay_disagg, transfer_for
from hycache.sim.hardware import hardware
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig
from hycache.sim.workloads import generate
from hycache.spec.model import FullAttentionGroup, ModelSpec, SlidingWindowGroup, load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
PRESETS = ("vllm", "sglang", "marconi", "hycache")
BIG = 40 * 10**9


def full_kv_per_token(spec: ModelSpec) -> int:
    """K and V of every full-attention layer, from the group's own fields."""
    g = spec.full
    assert g is not None
    return g.layers * 2 * g.kv_heads * g.head_dim * g.dtype_bytes


def state_bytes(spec: ModelSpec) -> int:
    r = spec.recurrent
    assert r is not None
    return r.layers * (r.recurrent_state_bytes + r.conv_state_bytes)


def spy_admits(cache: HybridPrefixCache, grid: list[int] | None = None) -> list[tuple[int, int]]:
    """(hit, kv_read_end) of every admission on ``cache``, in order; into ``grid``, the last
    checkpoint each plan places in ``(hit, N-1]`` (N-1 when none)."""
    seen: list[tuple[int, int]] = []
    admit = cache.admit

    def spying(tokens: object, **kwargs: object) -> Lease | Wait:
        lease = admit(tokens, **kwargs)  # type: ignore[arg-type]
        if isinstance(lease, Lease):
            seen.append((lease.hit, lease.kv_read_end))
            last = lease.prompt_len - 1
            points = [p.position for p in lease.plan.checkpoints if lease.hit < p.position <= last]
            if grid is not None:
                grid.append(max(points, default=last))
        return lease

    cache.admit = spying  # type: ignore[method-assign]
    return seen


def chat(n: int = 60) -> list[Request]:
    return list(generate("chat", requests=n, seed=0))


def holding_largest(preset: str, requests: list[Request]) -> int:
    """The fewest bytes at which ``preset`` holds the largest of ``requests``."""
    config = SimulationConfig(SPEC, CostModel(SPEC, hardware("h200")), mode="disagg")
    largest = max(requests, key=lambda r: r.prompt_len + r.output_len)
    need = smallest_capacity(config, preset, largest, 0)
    assert need is not None
    return need


@pytest.mark.parametrize("preset", PRESETS)
def test_bytes_moved_equal_the_analytic_minimum(preset: str) -> None:
    requests = chat()
    prefill = build_cache(SPEC, BIG, preset, track_ids=False)
    decode = build_cache(SPEC, BIG, preset, track_ids=False)
    admits = spy_admits(decode)
    cost = CostModel(SPEC, hardware("h200"))
    result = replay_disagg(prefill, decode, requests, cost)
    d = result.disagg
    assert d is not None and len(admits) == len(requests)
    expected = []
    for request, (hit, read_end) in zip(requests, admits, strict=True):
        last = request.prompt_len - 1
        start = max(hit, min(read_end, last))
        kv = (last - start) * full_kv_per_token(SPEC)
        expected.append(kv + (state_bytes(SPEC) if hit < last else 0))
    assert list(d.moved_samples) == expected
    assert d.bytes_moved == sum(expected) == d.kv_bytes_moved + d.state_bytes_moved
    assert d.decode_hit_tokens == sum(hit for hit, _ in admits)
    # the first request finds the decode cache cold: its whole N-1 prefix and one state
    first = requests[0].prompt_len - 1
    assert d.moved_samples[0] == first * full_kv_per_token(SPEC) + state_bytes(SPEC)
    assert result.requests == len(requests)
    prefill.check_integrity()
    decode.check_integrity()


@pytest.mark.parametrize("preset", ["sglang", "marconi", "hycache"])
def test_decode_hits_reduce_bytes_moved(preset: str) -> None:
    """The same requests with a decode cache that remembers and with one that cannot (it
    holds about one request): the first moves less, request by request where it hit."""
    requests = chat()
    cost = CostModel(SPEC, hardware("h200"))
    small = holding_largest(preset, requests) * 11 // 10
    moved = {}
    for capacity in (BIG, small):
        prefill = build_cache(SPEC, BIG, preset, track_ids=False)
        decode = build_cache(SPEC, capacity, preset, track_ids=False)
        admits = spy_admits(decode)
        d = replay_disagg(prefill, decode, requests, cost).disagg
        assert d is not None
        moved[capacity] = (d, admits)
    (warm, hits), (cold, _) = moved[BIG], moved[small]
    assert warm.decode_hit_tokens > 0
    assert warm.bytes_moved < cold.bytes_moved
    for request, (hit, _end), nbytes in zip(requests, hits, warm.moved_samples, strict=True):
        everything = (request.prompt_len - 1) * full_kv_per_token(SPEC) + state_bytes(SPEC)
        assert nbytes <= everything
        if hit:
            assert nbytes < everything


def test_ttft_includes_the_transfer_at_the_network_bandwidth() -> None:
    request = Request.of("r", list(range(3000)), [5] * 10)
    hw = hardware("h200")
    slow = dataclasses.replace(hw, remote_bandwidth=hw.remote_bandwidth / 50)
    ttft = {}
    for profile in (hw, slow):
        cost = CostModel(SPEC, profile)
        prefill = build_cache(SPEC, BIG, "hycache", track_ids=False)
        decode = build_cache(SPEC, BIG, "hycache", track_ids=False)
        result = replay_disagg(prefill, decode, [request], cost)
        moved = 2999 * full_kv_per_token(SPEC) + state_bytes(SPEC)
        assert result.disagg is not None and result.disagg.bytes_moved == moved
        expected = (
            cost.prefill_time(0, 2999)
            + moved / profile.remote_bandwidth
            + cost.prefill_time(2999, 1)
        )
        assert result.ttft_samples == pytest.approx((expected,))
        ttft[profile.name, profile.remote_bandwidth] = result.ttft_samples[0]
    fast_s, slow_s = ttft.values()
    assert slow_s - fast_s == pytest.approx(moved * 49 / hw.remote_bandwidth)


def test_a_one_token_prompt_moves_nothing_and_skips_the_prefill() -> None:
    cost = CostModel(SPEC, hardware("h200"))
    prefill = build_cache(SPEC, BIG, "sglang", track_ids=False)
    decode = build_cache(SPEC, BIG, "sglang", track_ids=False)
    result = replay_disagg(prefill, decode, [Request.of("one", [42], [1, 2])], cost)
    d = result.disagg
    assert d is not None and d.bytes_moved == 0 and d.prefill_skipped == 1
    assert prefill.stats().requests == 0
    assert result.ttft_samples == (cost.prefill_time(0, 1),)


@pytest.mark.parametrize("preset", PRESETS)
def test_neither_capacity_is_overrun(preset: str) -> None:
    requests = chat(80)
    cost = CostModel(SPEC, hardware("h200"))
    p_cap = holding_largest(preset, requests) * 3
    d_cap = holding_largest(preset, requests) * 2
    prefill = build_cache(SPEC, p_cap, preset, track_ids=False)
    decode = build_cache(SPEC, d_cap, preset, track_ids=False)
    result = replay_disagg(prefill, decode, requests, cost, reject_oversized=True)
    d = result.disagg
    assert d is not None
    assert result.capacity_overrun_bytes == 0 and d.decode_overrun_bytes == 0
    assert result.peak_bytes <= p_cap and d.decode_peak_bytes <= d_cap
    assert result.evictions > 0 and d.decode_evictions > 0
    prefill.check_integrity()
    decode.check_integrity()


def test_sliding_window_sends_the_window_it_lacks() -> None:
    shape = {"q_heads": 2, "kv_heads": 1, "head_dim": 8, "dtype_bytes": 2}
    spec = ModelSpec(
        name="tiny-fs",
        groups=(
            FullAttentionGroup(layers=1, **shape),
            SlidingWindowGroup(layers=5, window=64, **shape),
        ),
        hidden_size=64,
        vocab_size=1000,
        active_mlp_params_per_token=8192,
        num_layers=6,
    )
    full, swa = 2 * 8 * 2, 5 * 2 * 8 * 2
    cold = transfer_for(spec, 0, 0, 200)
    assert (cold.kv_from, cold.kv_to, cold.state_bytes) == (0, 199, 0)
    assert cold.kv_bytes == 199 * full + 64 * swa
    warm = transfer_for(spec, 150, 150, 200)
    assert warm.kv_bytes == 49 * full + 49 * swa
    in_place = transfer_for(spec, 100, 180, 200)
    assert in_place.kv_from == 180 and in_place.kv_bytes == 19 * full + 64 * swa


CLI = ["simulate", "--workload", "chat", "--requests", "40", "--model", "qwen3-next-80b-a3b"]


def test_cli_reports_bytes_moved(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "d.json"
    args = [*CLI, "--capacity", "80%", "--decode-capacity", "60%", "--mode", "disagg"]
    assert main([*args, "--policy", "sglang,hycache", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "moved_GB" in text and "decode capacity" in text
    data = json.loads(out.read_text())
    assert data["mode"] == "disagg"
    for result in data["policies"].values():
        assert isinstance(result["bytes_moved"], int) and result["bytes_moved"] > 0
        assert result["capacity_overrun_bytes"] == 0
        assert result["decode_capacity_bytes"] < result["capacity_bytes"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--decode-capacity", "10%"], "--decode-capacity applies to --mode disagg only"),
        (["--mode", "disagg", "--host-capacity", "10%"], "runs without lower tiers"),
        (["--disagg-pull", "grid"], "--disagg-pull applies to --mode disagg only"),
    ],
)
def test_cli_refuses_what_disagg_does_not_take(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*CLI, "--capacity", "80%", "--policy", "hycache", *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("preset", PRESETS)
def test_grid_pull_resumes_at_the_decode_plan_and_keeps_that_state(preset: str) -> None:
    """``pull="grid"``: bytes are the minimum up to the resume point (the last planned
    checkpoint after the decode hit), the decode side computes the rest, and it hits more
    than under the engine's rule on a conversation."""
    requests = chat()
    cost = CostModel(SPEC, hardware("h200"))
    results = {}
    for pull in ("last", "grid"):
        prefill = build_cache(SPEC, BIG, preset, track_ids=False)
        decode = build_cache(SPEC, BIG, preset, track_ids=False)
        grid: list[int] = []
        admits = spy_admits(decode, grid)
        result = replay_disagg(prefill, decode, requests, cost, pull=pull)
        d = result.disagg
        assert d is not None and d.pull == pull
        expected, computed = [], 0
        for request, (hit, _end), point in zip(requests, admits, grid, strict=True):
            at = point if pull == "grid" else request.prompt_len - 1
            state = state_bytes(SPEC) if hit < at else 0
            expected.append((at - hit) * full_kv_per_token(SPEC) + state)
            computed += request.prompt_len - at
        assert list(d.moved_samples) == expected
        assert d.decode_prefill_tokens == computed
        prefill.check_integrity()
        decode.check_integrity()
        results[pull] = d
    assert results["last"].decode_prefill_tokens == len(requests)
    assert results["grid"].decode_hit_tokens > results["last"].decode_hit_tokens
    assert results["grid"].bytes_moved < results["last"].bytes_moved
