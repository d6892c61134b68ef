"""EngineReplay run in stages ends where it ends run at once, and a bootstrap's engine-mode
window replay carried on gives the result of the chosen knobs' replay from the start."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from hycache.cache.presets import build_cache
from hycache.sim import simulate as simulate_module
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.replay import EngineReplay, replay_engine
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))


def same(a: PolicyResult, b: PolicyResult) -> bool:
    """Equal but for the wall time and the record of what was tuned."""
    return dataclasses.replace(a, wall_s=0.0, tuned={}) == dataclasses.replace(
        b, wall_s=0.0, tuned={}
    )


@pytest.mark.parametrize("preset", ["vllm", "sglang", "marconi", "hycache"])
@pytest.mark.parametrize("stops", [(1,), (7, 23, 24, 41)])
def test_running_in_stages_equals_running_at_once(preset: str, stops: tuple[int, ...]) -> None:
    requests = list(generate("chat", requests=60, seed=3))
    whole = replay_engine(build_cache(SPEC, 3 * 10**9, preset), requests, COST, knobs={"k": 1})
    ticks: list[int] = []
    staged = EngineReplay(build_cache(SPEC, 3 * 10**9, preset), requests, COST)
    for stop in stops:
        assert staged.run_until(stop).served == stop
        assert staged.finished <= stop
    before = staged.finished
    staged.tick = lambda: ticks.append(1)
    got = staged.result({"k": 1})
    assert len(ticks) == 60 - before  # the tick set between stages sees the rest
    assert staged.served == staged.finished == 60
    assert same(got, whole) and got.ttft_samples == whole.ttft_samples and got.timeline


def test_a_carried_engine_window_gives_the_chosen_knobs_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hycache tunes in engine mode on engine replays of the window and carries the winner's
    on (no replay from the start): the result is the one the winning knobs give replayed from
    the start."""
    fresh: list[int] = []
    real = simulate_module.replay_engine

    def counted(*args: Any, **kwargs: Any) -> PolicyResult:
        fresh.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(simulate_module, "replay_engine", counted)
    config = SimulationConfig(SPEC, COST, mode="engine", reject_oversized=True)
    requests = list(generate("chat", requests=200, seed=6))
    capacity = footprint_bytes(config, lambda: requests) * 10 // 100
    tuned = run_policy(config, "hycache", capacity, lambda: requests)
    assert fresh == []  # the winner's window replay went on to the end
    chosen = {k: v for k, v in tuned.tuned.items() if k != "window_requests"}
    assert chosen and 0 < int(str(tuned.tuned["window_requests"])) < 200
    fixed = dataclasses.replace(config, knobs={"hycache": chosen})
    assert same(run_policy(fixed, "hycache", capacity, lambda: requests), tuned)
    assert fresh == [1]  # knobs set by the user: no bootstrap, one replay from the start
