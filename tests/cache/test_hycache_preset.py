"""The hycache preset's threshold knobs reach the planner, the value eviction, the holds of
requests in flight and the bootstrap tuning; their defaults are the mechanisms' own, and bad
values raise a ConfigError naming the knob."""

from __future__ import annotations

import pytest

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.hycache_preset import (
    EVICTION_THRESHOLDS,
    HYCACHE_KNOBS,
    PLANNER_COUNTS,
    THRESHOLD_KNOBS,
)
from hycache.cache.presets import build_cache
from hycache.errors import ConfigError
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.eviction.value import ValueEviction
from hycache.policy.tuning import EVIDENCE_FILLS, MARGIN
from tests.cache.test_facade import tiny_spec

#: threshold knob -> a value other than its default
OTHER_VALUES: dict[str, object] = {
    "warmup": 3,
    "reuse_ratio": 7,
    "donated_reuse_ratio": 9,
    "retry_every": 5,
    "early_retry_every": 11,
    "max_grid": 1024,
    "grid_share": 0.6,
    "grid_warmup": 13,
    "tail_quantile": 0.5,
    "tail_warmup": 4,
    "tail_memory": 100,
    "default_tail": 64,
    "superseded_weight": 0.2,
    "dead_weight": 0.3,
    "exponent": 0.75,
    "aging_horizon": 400,
    "typical_window": 16,
    "cheap_guess_share": 0.25,
    "spare_slot_share": 0.5,
    "tune_margin": 0.3,
    "bootstrap_evidence": 2.5,
}
#: the simulator's thresholds (its bootstrap's): not part of a built cache
SIMULATOR_THRESHOLDS = ("tune_margin", "bootstrap_evidence")


def _cache(**knobs: object) -> HybridPrefixCache:
    spec = tiny_spec()
    return build_cache(spec, spec.kv_bytes_per_token * 2_000 + spec.state_bytes * 12, **knobs)


def _reached(cache: HybridPrefixCache) -> dict[str, object]:
    """Each threshold as the object it belongs to holds it (``SIMULATOR_THRESHOLDS`` are not
    part of a built cache)."""
    planner, eviction = cache.checkpoint_policy, cache.eviction
    assert isinstance(planner, HycachePlanner) and isinstance(eviction, ValueEviction)
    return _thresholds(planner, eviction, cache.holds.spare_slot_share)


def _thresholds(
    planner: HycachePlanner, eviction: ValueEviction, spare_slot_share: float
) -> dict[str, object]:
    """The threshold knobs' values as the planner, the value eviction and the holds keep them."""
    t = planner.thresholds
    values: dict[str, object] = {name: getattr(t, name) for name in PLANNER_COUNTS}
    values["grid_share"] = t.grid_share
    values["tail_quantile"] = t.tail_quantile
    for name in EVICTION_THRESHOLDS:
        values[name] = getattr(eviction, name)
    values["spare_slot_share"] = spare_slot_share
    return values


def test_the_knob_list_names_every_threshold_once() -> None:
    """Every threshold but ``tail_quantile``, which is unset by default (the tail is chosen
    from the stream) and so has no default to sweep; it still reaches the planner."""
    assert sorted(THRESHOLD_KNOBS) == sorted(set(OTHER_VALUES) - {"tail_quantile"})
    assert len(set(THRESHOLD_KNOBS)) == len(THRESHOLD_KNOBS)
    assert set(THRESHOLD_KNOBS) <= set(HYCACHE_KNOBS)


def test_defaults_are_the_mechanisms_own() -> None:
    own = _thresholds(HycachePlanner(), ValueEviction(), CacheConfig(page_size=1).spare_slot_share)
    assert _reached(_cache()) == own
    assert {name: HYCACHE_KNOBS[name].default for name in own} == own
    assert HYCACHE_KNOBS["tune_margin"].default == MARGIN
    assert HYCACHE_KNOBS["bootstrap_evidence"].default == EVIDENCE_FILLS


def test_each_threshold_knob_reaches_its_object() -> None:
    built = {k: v for k, v in OTHER_VALUES.items() if k not in SIMULATOR_THRESHOLDS}
    assert _reached(_cache(**built)) == built


@pytest.mark.parametrize(
    ("knob", "value"),
    [
        ("warmup", 0),
        ("reuse_ratio", 0),
        ("donated_reuse_ratio", 0),
        ("retry_every", 0),
        ("early_retry_every", 0),
        ("max_grid", 0),
        ("grid_warmup", 0),
        ("tail_warmup", 0),
        ("tail_memory", 0),
        ("default_tail", 0),
        ("grid_share", 0),
        ("grid_share", 1.2),
        ("typical_window", 0),
        ("tail_quantile", 1.5),
        ("cheap_guess_share", 0),
        ("cheap_guess_share", 1.5),
        ("spare_slot_share", 0),
        ("spare_slot_share", 2),
        ("tune_margin", -0.1),
        ("reuse_ratio", 2.5),
    ],
)
def test_bad_threshold_values_raise_a_config_error_naming_the_knob(
    knob: str, value: object
) -> None:
    with pytest.raises(ConfigError, match=rf"hycache\.{knob}"):
        _cache(**{knob: value})


def test_shares_and_the_quantile_take_their_bounds() -> None:
    cache = _cache(cheap_guess_share=1, spare_slot_share=1.0, tail_quantile=0)
    assert _reached(cache)["tail_quantile"] == 0
    assert cache.holds.spare_slot_share == 1
    assert _reached(_cache())["tail_quantile"] is None  # unset: the tail rule, not a quantile


def test_cache_config_checks_the_spare_share() -> None:
    with pytest.raises(ConfigError, match="spare_slot_share"):
        CacheConfig(page_size=1, spare_slot_share=0)
