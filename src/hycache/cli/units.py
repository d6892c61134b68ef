"""Byte sizes as people write them: "40GB" (10^9), "32GiB" (2^30), "1.5e9", "512MiB"."""

from __future__ import annotations

import re

from hycache.errors import ConfigError

_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """``text`` in bytes; ConfigError naming the input when it is not a positive size."""
    match = _SIZE.match(text)
    unit = match.group(2).upper() if match else ""
    if match is None or unit not in _UNITS:
        raise ConfigError(
            f"capacity {text!r}: expected a number with an optional unit "
            "(B, KB, MB, GB, TB = powers of 10; KiB, MiB, GiB, TiB = powers of 2)"
        )
    value = int(float(match.group(1)) * _UNITS[unit])
    if value < 1:
        raise ConfigError(f"capacity {text!r} must be at least one byte")
    return value
