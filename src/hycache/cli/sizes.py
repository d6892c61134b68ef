"""The one parser of sizes on the command line: "40GB" (10^9), "32GiB" (2^30), "1.5e9", "10%".

Every size option of every subcommand (``--capacity``, ``--capacities``) goes through here.
A percentage is a fraction of the workload's unlimited footprint
(``hycache.sim.simulate.footprint_bytes``) and resolves the same way everywhere:
``max(1, int(footprint * percent / 100))`` bytes. NaN, infinities, negative and zero sizes are
rejected with the input named. The ``*_arg`` functions are argparse ``type=`` callables: a bad
value is an argparse error (exit 2, the option named).
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

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
_MAX_BYTES = 2**63
_NUMBER = r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
_SIZE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z]*|%)\s*$")
_EXPECTED = (
    "expected a number with an optional unit (B, KB, MB, GB, TB = powers of 10; "
    "KiB, MiB, GiB, TiB = powers of 2)"
)


@dataclass(frozen=True)
class Size:
    """A size as given: ``nbytes`` bytes, or ``percent`` % of the workload's footprint."""

    text: str
    nbytes: int | None = None
    percent: float | None = None

    @property
    def relative(self) -> bool:
        return self.percent is not None

    def resolve(self, footprint: int | None) -> int:
        """Bytes; a percentage needs ``footprint`` (ConfigError without one)."""
        if self.nbytes is not None:
            return self.nbytes
        if footprint is None or self.percent is None:
            raise ConfigError(f"size {self.text!r}: a percentage needs a workload footprint")
        nbytes = footprint * self.percent / 100
        if not math.isfinite(nbytes) or nbytes >= _MAX_BYTES:
            raise ConfigError(f"size {self.text!r}: too large for a {footprint}-byte footprint")
        return max(1, int(nbytes))


def _non_finite(text: str) -> bool:
    try:
        return not math.isfinite(float(text.strip().removesuffix("%")))
    except ValueError:
        return False


def _parse(text: str, *, percent: bool) -> Size:
    if _non_finite(text):
        raise ConfigError(f"size {text!r}: must be a finite number")
    match = _SIZE.match(text)
    unit = match.group(2).upper() if match else ""
    if match is None or (unit not in _UNITS and unit != "%"):
        raise ConfigError(f"size {text!r}: {_EXPECTED}" + (", or a percentage" if percent else ""))
    value = float(match.group(1))
    if not math.isfinite(value):
        raise ConfigError(f"size {text!r}: must be a finite number")
    if value <= 0:
        raise ConfigError(f"size {text!r}: must be greater than zero")
    if unit == "%":
        if not percent:
            raise ConfigError(
                f"size {text!r}: a percentage of the footprint is not available here; "
                "give bytes (e.g. 512KiB)"
            )
        return Size(text.strip(), percent=value)
    nbytes = value * _UNITS[unit]
    if not math.isfinite(nbytes) or nbytes >= _MAX_BYTES:
        raise ConfigError(f"size {text!r}: too large")
    if int(nbytes) < 1:
        raise ConfigError(f"size {text!r}: must be at least one byte")
    return Size(text.strip(), nbytes=int(nbytes))


def parse_size(text: str) -> int:
    """``text`` in bytes (no percentages); ConfigError naming the input otherwise."""
    return _parse(text, percent=False).resolve(None)


def parse_size_or_percent(text: str) -> Size:
    """A byte size or a percentage of the footprint; ConfigError naming the input otherwise."""
    return _parse(text, percent=True)


def parse_sizes(text: str) -> list[Size]:
    """Comma-separated ``parse_size_or_percent`` items (at least one)."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise ConfigError(f"sizes {text!r}: expected a comma-separated list, e.g. 5%,10%,40GB")
    return [parse_size_or_percent(item) for item in items]


def _argparse(error: ConfigError) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(str(error))


def bytes_arg(text: str) -> int:
    """argparse ``type=``: bytes only."""
    try:
        return parse_size(text)
    except ConfigError as exc:
        raise _argparse(exc) from None


def size_arg(text: str) -> Size:
    """argparse ``type=``: bytes or a percentage of the footprint."""
    try:
        return parse_size_or_percent(text)
    except ConfigError as exc:
        raise _argparse(exc) from None


def sizes_arg(text: str) -> list[Size]:
    """argparse ``type=``: a comma-separated list of sizes or percentages."""
    try:
        return parse_sizes(text)
    except ConfigError as exc:
        raise _argparse(exc) from None


def format_bytes(nbytes: int) -> str:
    """``1234567890`` -> ``"1.23 GB"`` (powers of 10, like the tables)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"
