"""Kept for ``benchmarks/simulate_speed.py``: the size parser lives in ``hycache.cli.sizes``."""

from __future__ import annotations

from hycache.cli.sizes import parse_size

__all__ = ["parse_size"]
