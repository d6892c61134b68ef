"""The one size parser: bytes, binary/decimal units, percentages; bad sizes exit 2."""

from __future__ import annotations

import pytest

from hycache.cli.main import main
from hycache.cli.sizes import Size, parse_size, parse_size_or_percent, parse_sizes
from hycache.errors import ConfigError

MODEL = "qwen3-next-80b-a3b"


def test_decimal_and_binary_units() -> None:
    assert parse_size("512KiB") == 512 * 1024
    assert parse_size("2MB") == 2_000_000
    assert parse_size("40GB") == 40 * 10**9
    assert parse_size("1GiB") == 2**30
    assert parse_size("1.5e6") == 1_500_000
    assert parse_size(" 7 ") == 7


def test_percentages_resolve_against_the_footprint() -> None:
    size = parse_size_or_percent("10%")
    assert size.relative and size.resolve(1000) == 100
    assert parse_size_or_percent("0.01%").resolve(1000) == 1  # never below one byte
    assert parse_size_or_percent("1GB").resolve(None) == 10**9
    assert [s.resolve(200) for s in parse_sizes("5%, 50%,1KB")] == [10, 100, 1000]
    with pytest.raises(ConfigError, match="needs a workload footprint"):
        Size("10%", percent=10.0).resolve(None)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("-3", "greater than zero"),
        ("-5%", "greater than zero"),
        ("0", "greater than zero"),
        ("0%", "greater than zero"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("-inf%", "finite"),
        ("1e999", "finite"),
        ("0.2", "at least one byte"),
        ("lots", "expected a number"),
        ("5 parsecs", "expected a number"),
        ("", "expected a number"),
    ],
)
def test_bad_sizes_name_the_input(text: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=reason) as caught:
        parse_size_or_percent(text)
    assert repr(text) in str(caught.value)


def test_percentages_are_refused_where_there_is_no_footprint() -> None:
    with pytest.raises(ConfigError, match="percentage"):
        parse_size("10%")


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--capacity", "nan"],
        ["simulate", "--capacity=-1GB"],
        ["simulate", "--capacity", "0%"],
        ["compare", "--capacities=-5%,0%"],
        ["compare", "--capacities", "10%,"],
        ["compare", "--capacities", "inf%"],
    ],
)
def test_every_size_option_exits_2_at_parse_time(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    source = ["--workload", "chat", "--requests", "5", "--model", MODEL]
    assert main([*argv, *source]) == 2
    err = capsys.readouterr().err
    assert "argument --capacit" in err and "size" in err


def test_absurd_sizes_are_too_large() -> None:
    with pytest.raises(ConfigError, match="too large"):
        parse_size("1e30TB")
    with pytest.raises(ConfigError, match="too large"):
        parse_size_or_percent("1e300%").resolve(10**9)
