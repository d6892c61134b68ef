"""benchmarks/simulate_speed.py: its ``--gc-young`` list reads 'none' and positive integers and
nothing else."""

from __future__ import annotations

import argparse

import pytest

from tests.benchmarks.scripts import load_script


def test_gc_values_reads_none_and_positive_integers() -> None:
    speed = load_script("simulate_speed")
    assert speed.gc_values("none, 700,50000") == [None, 700, 50000]


@pytest.mark.parametrize("text", ["0", "-5", "1e4", "off", ""])
def test_gc_values_rejects_anything_else(text: str) -> None:
    speed = load_script("simulate_speed")
    with pytest.raises(argparse.ArgumentTypeError):
        speed.gc_values(text)
