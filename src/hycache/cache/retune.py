"""Switching a running ``hycache`` cache to another bootstrap candidate in place: what a cache
that ran the default while its bootstrap judged does once the choice is made (the ``hycache``
preset's knob ``bootstrap_causal``). Only the knobs the candidates set may change
(``hycache.policy.tuning.CANDIDATES``): skipping rarely reused checkpoint kinds, ageing by
GreedyDual's flat clock alone, and how the value eviction weighs a value (its exponent and
reason weight)."""

from __future__ import annotations

from collections.abc import Mapping

from hycache.cache.facade import HybridPrefixCache
from hycache.errors import ConfigError
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.eviction.value import ValueEviction, check_weighting

#: the knobs ``switch_candidate`` can set in place
SWITCHABLE = frozenset({"eviction", "adaptive", "aging_horizon", "exponent", "reason_weight"})


def switch_candidate(cache: HybridPrefixCache, knobs: Mapping[str, object]) -> None:
    """Set ``knobs`` (a candidate's) on ``cache``, a ``hycache`` cache with the value eviction,
    from its next call on. ConfigError, before anything changes, for a knob or value that
    cannot be switched in place (another eviction, an ageing horizon other than 0)."""
    unknown = set(knobs) - SWITCHABLE
    if unknown:
        raise ConfigError(f"cannot switch {sorted(unknown)} in place (only {sorted(SWITCHABLE)})")
    planner, eviction = cache.checkpoint_policy, cache.eviction
    if not isinstance(planner, HycachePlanner) or not isinstance(eviction, ValueEviction):
        raise ConfigError("switching in place needs the hycache planner and the value eviction")
    if knobs.get("eviction", "value") != "value":
        raise ConfigError(f"cannot switch to eviction={knobs['eviction']!r} in place")
    horizon = knobs.get("aging_horizon")
    if horizon is not None and horizon != 0:
        raise ConfigError(f"cannot switch to aging_horizon={horizon!r} in place (only 0)")
    adaptive = knobs.get("adaptive")
    if adaptive is not None and not isinstance(adaptive, bool):
        raise ConfigError(f"adaptive must be True or False, got {adaptive!r}")
    exponent, reason_weight = check_weighting(
        knobs.get("exponent", eviction.exponent), knobs.get("reason_weight", eviction.reason_weight)
    )
    if adaptive is not None:
        planner.adaptive = adaptive
    if horizon == 0:
        eviction.fix_flat_clock()
    if (exponent, reason_weight) != (eviction.exponent, eviction.reason_weight):
        eviction.reweigh(exponent=exponent, reason_weight=reason_weight)
