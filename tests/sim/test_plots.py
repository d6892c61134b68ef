"""The report's figures: series at full resolution, the bound as its own trace, colours kept
per preset."""

from __future__ import annotations

import itertools

from hycache.cache.presets import build_cache
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult, Recorder
from hycache.sim.plots import (
    BOUND_NAME,
    COLORS,
    color,
    evictions_figure,
    hit_rate_figure,
    occupancy_figure,
    ttft_cdf_figure,
)
from hycache.sim.replay import replay_engine
from hycache.sim.serial import replay_serial
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))
CAPACITY = 2 * 10**9


def _replay(policy: str, mode: str = "serial") -> PolicyResult:
    cache = build_cache(SPEC, CAPACITY, policy)
    requests = generate("chat", requests=60, seed=0)
    if mode == "engine":
        return replay_engine(cache, requests, COST, token_budget=8192)
    return replay_serial(cache, requests, COST)


def test_recorder_keeps_every_change_and_the_end() -> None:
    rec = Recorder()
    for t, kv, state in [(0, 1, 1), (1, 1, 1), (2, 2, 1), (3, 2, 1), (4, 2, 1)]:
        rec.keep(float(t), kv, state)
    assert rec.timeline == [(0.0, 1, 1), (2.0, 2, 1)]
    assert rec.closed_timeline() == ((0.0, 1, 1), (2.0, 2, 1), (4.0, 2, 1))
    assert Recorder().closed_timeline() == ()


def test_serial_timeline_is_full_resolution() -> None:
    r = _replay("hycache")
    times = [t for t, _kv, _state in r.timeline]
    assert times[0] == 0.0 and times[-1] == 59.0 and times == sorted(times)
    # a point at every request whose bytes changed: far more than one per 50 requests
    assert len(times) > 30
    pairs = [point[1:] for point in r.timeline[:-1]]
    assert all(a != b for a, b in itertools.pairwise(pairs))


def test_occupancy_figure_plots_the_timeline_as_steps() -> None:
    results = {p: _replay(p) for p in ("vllm", "hycache")}
    fig = occupancy_figure(results, CAPACITY)
    assert len(fig.data) == 4  # KV and state per preset
    for trace in fig.data:
        r = results[trace.name]
        column = 1 if trace.yaxis == "y" else 2
        assert list(trace.x) == [p[0] for p in r.timeline]
        assert list(trace.y) == [p[column] / 1e9 for p in r.timeline]
        assert trace.line.shape == "hv" and trace.line.color == COLORS[trace.name]
    assert fig.layout.xaxis2.title.text == "request index"


def test_hit_rate_figure_draws_the_bound_and_every_preset() -> None:
    results = {p: _replay(p) for p in ("vllm", "hycache")}
    by_capacity = {CAPACITY: results, 2 * CAPACITY: results}
    fig = hit_rate_figure(by_capacity, bound=0.75)
    names = [trace.name for trace in fig.data]
    assert names == ["vllm", "hycache", f"{BOUND_NAME}: 75.0%"]
    assert list(fig.data[-1].y) == [0.75, 0.75] and list(fig.data[-1].x) == [2.0, 4.0]
    assert list(fig.data[0].y) == [results["vllm"].token_hit_rate] * 2
    assert [t.name for t in hit_rate_figure(by_capacity).data] == ["vllm", "hycache"]
    evictions = evictions_figure(by_capacity)
    assert list(evictions.data[1].y) == [results["hycache"].evictions] * 2


def test_ttft_cdf_has_a_step_per_request() -> None:
    results = {p: _replay(p, "engine") for p in ("marconi", "hycache")}
    fig = ttft_cdf_figure(results, CAPACITY)
    for trace in fig.data:
        samples = results[trace.name].ttft_samples
        assert list(trace.x) == sorted(samples)
        assert trace.y[-1] == 1.0 and len(trace.y) == len(samples)


def test_presets_without_a_colour_get_distinct_spare_ones() -> None:
    order = ["vllm", "lmcache", "hycache+tiers"]
    assert color("vllm", order) == COLORS["vllm"]
    assert len({color(p, order) for p in order}) == 3
