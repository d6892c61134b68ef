"""The checks of preset knob values: a ConfigError names the preset and the knob."""

from __future__ import annotations

import pytest

from hycache.cache.knobs import budget, number, optional_int, positive, share
from hycache.errors import ConfigError


def test_positive_integers() -> None:
    assert positive("p", "k", 3) == 3
    for bad in (0, -1, 1.5, None, "2"):
        with pytest.raises(ConfigError, match=r"p\.k"):
            positive("p", "k", bad)


def test_shares_lie_in_the_half_open_or_closed_unit_interval() -> None:
    assert share("p", "k", 1) == 1.0 and share("p", "k", 0.125) == 0.125
    assert share("p", "k", 0, closed=True) == 0.0
    for bad in (0, -0.5, 1.01, float("nan"), True, "x"):
        with pytest.raises(ConfigError, match=r"p\.k"):
            share("p", "k", bad)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        share("p", "k", 2, closed=True)


def test_numbers_optional_integers_and_budgets() -> None:
    assert number("p", "k", 2) == 2.0
    with pytest.raises(ConfigError, match=r"p\.k"):
        number("p", "k", float("inf"))
    assert optional_int("p", "k", None) is None and optional_int("p", "k", 4) == 4
    with pytest.raises(ConfigError, match=r"p\.k"):
        optional_int("p", "k", 1.5)
    assert budget(None) is None and budget(8) == 8
    with pytest.raises(ConfigError, match="budget"):
        budget(0)
