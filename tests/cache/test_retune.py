"""hycache.cache.retune: a running hycache cache switched to another candidate in place."""

from __future__ import annotations

import pytest

from hycache.cache.presets import build_cache
from hycache.cache.retune import switch_candidate
from hycache.errors import ConfigError
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.eviction.value import ValueEviction
from hycache.policy.tuning import CANDIDATES, VALUE_LED_EXPONENT
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.serial import SerialReplay
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))
CAPACITY = 1_000_000_000


def replay(knobs: dict[str, object], switch_to: dict[str, object] | None, at: int) -> float:
    cache = build_cache(SPEC, CAPACITY, "hycache", **knobs)  # type: ignore[arg-type]
    served = SerialReplay(cache, COST, reject_oversized=True)
    requests = list(generate("chat", requests=120, seed=3))
    served.feed(requests[:at])
    cache.check_integrity()
    if switch_to is not None:
        switch_candidate(cache, switch_to)
    served.feed(requests[at:])
    cache.check_integrity()
    return served.result().token_hit_rate


@pytest.mark.parametrize("candidate", CANDIDATES[1:])
def test_a_switch_before_the_first_request_is_a_cache_built_so(
    candidate: dict[str, object],
) -> None:
    built = replay(dict(candidate), None, 0)
    switched = replay(dict(CANDIDATES[0]), dict(candidate), 0)
    assert switched == built


def test_a_switch_later_changes_what_follows_only() -> None:
    default = replay(dict(CANDIDATES[0]), None, 60)
    flat = replay(dict(CANDIDATES[2]), None, 60)
    switched = replay(dict(CANDIDATES[0]), dict(CANDIDATES[2]), 60)
    assert default != flat  # the candidates differ on this stream ...
    assert switched not in (default, flat)  # ... and the switch is neither of them


@pytest.mark.parametrize(
    "knobs",
    [
        {"exponent": 0.0},
        {"exponent": True},
        {"reason_weight": "often"},
        {"eviction": "lru"},
        {"aging_horizon": 400},
        {"adaptive": "no"},
    ],
)
def test_what_cannot_be_switched_is_refused_before_anything_changes(
    knobs: dict[str, object],
) -> None:
    cache = build_cache(SPEC, CAPACITY, "hycache", adaptive=True)
    planner = cache.checkpoint_policy
    assert isinstance(planner, HycachePlanner)
    with pytest.raises(ConfigError):
        switch_candidate(cache, {"adaptive": False, **knobs})
    assert planner.adaptive is True
    eviction = cache.eviction
    assert isinstance(eviction, ValueEviction)
    assert (eviction.exponent, eviction.reason_weight) == (0.5, "rate")


def test_a_reweighed_cache_keys_every_entry_as_one_built_so() -> None:
    """Switched at the end of a stream, every entry's key is the one a cache built with the
    new weighting would give it for the same last access."""
    value_led = next(c for c in CANDIDATES if "exponent" in c)
    cache = build_cache(SPEC, CAPACITY, "hycache", adaptive=True)
    served = SerialReplay(cache, COST, reject_oversized=True)
    served.feed(list(generate("chat", requests=60, seed=3)))
    eviction = cache.eviction
    assert isinstance(eviction, ValueEviction)
    before = dict(eviction.live_keys())
    switch_candidate(cache, dict(value_led))
    cache.check_integrity()
    after = dict(eviction.live_keys())
    assert after.keys() == before.keys() and after != before
    assert (eviction.exponent, eviction.reason_weight) == (VALUE_LED_EXPONENT, "chance")
    components = {c.slot: c for c in cache.tree.components}
    for (node, slot), key in after.items():
        assert key == eviction.key(node, components[slot])


def test_only_a_hycache_cache_with_the_value_eviction_switches() -> None:
    for preset, knobs in (("vllm", {}), ("hycache", {"eviction": "lru"})):
        cache = build_cache(SPEC, CAPACITY, preset, **knobs)  # type: ignore[arg-type]
        with pytest.raises(ConfigError):
            switch_candidate(cache, {"adaptive": False})
