"""Byte sizes on the command line."""

from __future__ import annotations

import pytest

from hycache.cli.units import parse_size
from hycache.errors import ConfigError


def test_decimal_and_binary_units() -> None:
    assert parse_size("512KiB") == 512 * 1024
    assert parse_size("2MB") == 2_000_000
    assert parse_size("40GB") == 40 * 10**9
    assert parse_size("32GiB") == 32 * 2**30
    assert parse_size("1.5e6") == 1_500_000
    assert parse_size(" 7 ") == 7


@pytest.mark.parametrize("text", ["-3", "lots", "5 parsecs", "0", "0.2", ""])
def test_bad_sizes_name_the_input(text: str) -> None:
    with pytest.raises(ConfigError, match="capacity"):
        parse_size(text)
