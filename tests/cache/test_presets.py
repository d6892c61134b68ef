"""The hycache preset's ablation knobs reach the planner and the eviction policy; their
defaults are the mechanisms' own."""

from __future__ import annotations

import pytest

from hycache.cache.presets import KNOBS, build_cache
from hycache.errors import ConfigError
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.value import ValueEviction
from tests.cache.test_facade import tiny_spec

#: the planner's switches by knob name (the planner's attribute when it differs)
PLANNER_KNOBS = {"learn_grid": "learn_grid", "tail": "tail_checkpoint", "free_room": "free_room"}
#: the value eviction's knobs: each sets the ValueEviction attribute of that name
VALUE_KNOBS = (
    "by_reason",
    "reason_weight",
    "superseded_weight",
    "learn_superseded",
    "dead_weight",
    "exponent",
    "aging_horizon",
    "learn_aging",
    "pin_reused_guesses",
    "strict_guess_pins",
)


def _parts(**knobs: object) -> tuple[HycachePlanner, ValueEviction]:
    spec = tiny_spec()
    cache = build_cache(spec, spec.kv_bytes_per_token * 2_000 + spec.state_bytes * 12, **knobs)
    planner, eviction = cache.checkpoint_policy, cache.eviction
    assert isinstance(planner, HycachePlanner) and isinstance(eviction, ValueEviction)
    return planner, eviction


def test_defaults_are_the_mechanisms_own() -> None:
    planner, eviction = _parts()
    default_planner, default_eviction = HycachePlanner(), ValueEviction()
    for name in (*PLANNER_KNOBS.values(), "adaptive"):
        assert getattr(planner, name) == getattr(default_planner, name)
    assert planner.free_room is True  # offered by the cache until memory first runs short
    for name in VALUE_KNOBS:
        assert getattr(eviction, name) == getattr(default_eviction, name)


def test_each_ablation_knob_reaches_its_mechanism() -> None:
    planner, _ = _parts(learn_grid=False, tail=False, free_room=False)
    assert not (planner.learn_grid or planner.tail_checkpoint or planner.free_room)
    _, eviction = _parts(
        by_reason=False,
        reason_weight="chance",
        superseded_weight=1,
        learn_superseded=False,
        dead_weight=1,
        exponent=1,
        aging_horizon=0,
        learn_aging=False,
        pin_reused_guesses=False,
        strict_guess_pins=False,
    )
    assert not (eviction.by_reason or eviction.learn_superseded or eviction.pin_reused_guesses)
    assert eviction.reason_weight == "chance"
    assert not eviction.strict_guess_pins
    assert (eviction.superseded_weight, eviction.dead_weight, eviction.exponent) == (1, 1, 1)
    assert eviction.aging_horizon == 0 and eviction._superseded_factor() == 1.0
    assert not (eviction.learn_aging or eviction._aging.learn or eviction._aging.aged)


def test_value_knobs_are_checked_and_ignored_by_other_evictions() -> None:
    with pytest.raises(ConfigError, match=r"hycache\.exponent"):
        _parts(exponent=-1)
    with pytest.raises(ConfigError, match=r"hycache\.tail"):
        _parts(tail="sometimes")
    spec = tiny_spec()
    cache = build_cache(spec, spec.kv_bytes_per_token * 2_000, eviction="gds", by_reason=False)
    assert isinstance(cache.eviction, GDSFEviction)
    assert {*PLANNER_KNOBS, *VALUE_KNOBS} <= set(KNOBS["hycache"])
