"""The tail-guess pinning rule's own checks; its behaviour through a real cache is in
tests/cache/test_holds.py (cheap or proven, and the reuse-rate rule)."""

from __future__ import annotations

import pytest

from hycache.errors import ConfigError
from hycache.policy.eviction.guesses import GuessPins
from hycache.policy.eviction.value import ValueEviction


@pytest.mark.parametrize("share", [0.0, -0.5, 1.5])
def test_a_cheap_share_outside_0_1_is_refused(share: float) -> None:
    with pytest.raises(ConfigError, match="cheap_share"):
        GuessPins(cheap_share=share, pin_reused=True)


def test_the_value_eviction_exposes_the_rule_it_was_built_with() -> None:
    eviction = ValueEviction(cheap_guess_share=0.25, pin_reused_guesses=False)
    assert eviction.cheap_guess_share == 0.25
    assert eviction.pin_reused_guesses is False
    assert ValueEviction().pin_reused_guesses is True


def test_a_reuse_ratio_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="reuse_ratio"):
        GuessPins(cheap_share=0.5, pin_reused=True, reuse_ratio=0)


def test_strict_pins_are_the_default_and_can_be_turned_off() -> None:
    assert ValueEviction().strict_guess_pins is True
    assert ValueEviction(strict_guess_pins=False).strict_guess_pins is False
