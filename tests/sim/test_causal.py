"""The causal bootstrap (``hycache.bootstrap_causal``): the run goes through the window with the
default candidate and switches to the pick in place where the window ends."""

from __future__ import annotations

import dataclasses

import pytest

from hycache.cache.presets import build_cache
from hycache.cache.retune import switch_candidate
from hycache.errors import ConfigError
from hycache.policy.tuning import CANDIDATES
from hycache.sim.cost import CostModel
from hycache.sim.forked import forked_contest
from hycache.sim.hardware import hardware
from hycache.sim.replay import EngineReplay
from hycache.sim.serial import SerialReplay
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")


def source():  # type: ignore[no-untyped-def]
    return generate("chat", requests=200, seed=10)  # its pick at 10% is the flat clock


def config(mode: str, causal: bool) -> SimulationConfig:
    return SimulationConfig(
        SPEC,
        CostModel(SPEC, hardware("h200")),
        mode=mode,
        reject_oversized=True,
        knobs={"hycache": {"bootstrap_causal": causal}},
    )


CAPACITY = footprint_bytes(config("serial", False), source) // 10


def test_the_window_is_the_defaults_and_the_rest_the_picks() -> None:
    plain = run_policy(config("serial", False), "hycache", CAPACITY, source)
    causal = run_policy(config("serial", True), "hycache", CAPACITY, source)
    assert causal.tuned == plain.tuned and plain.tuned["aging_horizon"] == 0  # not the default
    pick = {k: v for k, v in plain.tuned.items() if k != "window_requests"}
    window = plain.tuned["window_requests"]
    assert isinstance(window, int)
    # by hand: the default through the window, switched to the pick, then the rest
    cache = build_cache(SPEC, CAPACITY, "hycache", **CANDIDATES[0])  # type: ignore[arg-type]
    served = SerialReplay(cache, config("serial", True).cost, reject_oversized=True)
    requests = list(source())
    served.feed(requests[:window])
    switch_candidate(cache, pick)
    served.feed(requests[window:])
    assert causal.token_hit_rate == served.result().token_hit_rate
    assert causal.token_hit_rate != plain.token_hit_rate  # the window counted the pick's reuse


@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_forked_contests_switch_where_the_default_ran(mode: str) -> None:
    here = run_policy(config(mode, True), "hycache", CAPACITY, source)
    forked = run_policy(
        config(mode, True),
        "hycache",
        CAPACITY,
        source,
        contest=forked_contest(2, share_cores=True),
    )
    assert dataclasses.replace(forked, wall_s=0.0) == dataclasses.replace(here, wall_s=0.0)


def test_a_causal_bootstrap_needs_a_run_it_can_go_on_from() -> None:
    with pytest.raises(ConfigError, match="bootstrap_causal"):
        run_policy(config("disagg", True), "hycache", CAPACITY, source)


def test_an_engine_run_switches_where_its_window_leaves_the_queue() -> None:
    chat6 = lambda: generate("chat", requests=200, seed=6)  # noqa: E731 (not the default's)
    capacity = footprint_bytes(config("serial", False), chat6) // 20
    plain = run_policy(config("engine", False), "hycache", capacity, chat6)
    causal = run_policy(config("engine", True), "hycache", capacity, chat6)
    assert causal.tuned == plain.tuned
    pick = {k: v for k, v in plain.tuned.items() if k != "window_requests"}
    assert pick != dict(CANDIDATES[0])  # the run switches where the window ends
    window = plain.tuned["window_requests"]
    assert isinstance(window, int)
    cache = build_cache(SPEC, capacity, "hycache", **CANDIDATES[0])  # type: ignore[arg-type]
    run = config("engine", True)
    engine = EngineReplay(
        cache,
        chat6(),
        run.cost,
        token_budget=cache.config.token_budget or run.token_budget,
        reject_oversized=True,
        session_idle_s=run.session_idle_s,
    ).run_until(window)
    switch_candidate(cache, pick)
    assert causal.token_hit_rate == engine.result().token_hit_rate
    assert causal.token_hit_rate != plain.token_hit_rate
