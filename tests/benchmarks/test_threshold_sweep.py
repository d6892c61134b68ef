"""benchmarks/threshold_sweep.py: it sweeps every threshold knob of the hycache preset, and a
tiny run (one workload, one capacity, serial) prints a row per knob value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hycache.cache.hycache_preset import HYCACHE_KNOBS, THRESHOLD_KNOBS
from tests.benchmarks.scripts import load_script

#: the hand-picked thresholds the knobs replaced
THRESHOLDS = {
    "warmup",
    "reuse_ratio",
    "donated_reuse_ratio",
    "retry_every",
    "early_retry_every",
    "max_grid",
    "grid_share",
    "grid_warmup",
    "tail_warmup",
    "tail_memory",
    "default_tail",
    "superseded_weight",
    "dead_weight",
    "exponent",
    "aging_horizon",
    "typical_window",
    "cheap_guess_share",
    "spare_slot_share",
    "tune_margin",
    "bootstrap_evidence",
}


def test_the_sweep_covers_every_threshold_knob_with_two_other_values() -> None:
    load_script("policy_matrix")
    sweep = load_script("threshold_sweep")
    assert set(THRESHOLD_KNOBS) == THRESHOLDS
    for knob in THRESHOLD_KNOBS:
        low, high = sweep.sweep_values(knob)
        default = HYCACHE_KNOBS[knob].default
        assert isinstance(default, int | float)
        if knob in sweep.FIXED_VALUES:
            assert default not in (low, high) and low < high
        else:
            assert low < default < high
    assert sweep.sweep_values("reuse_ratio") == (5, 20)
    assert sweep.sweep_values("tune_margin") == (0.1, 0.2)


def test_a_tiny_run_prints_a_row_per_knob_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load_script("policy_matrix")
    sweep = load_script("threshold_sweep")
    results = tmp_path / "sweep.json"
    argv = ["--sources", "chat", "--capacities", "10", "--modes", "serial", "--requests", "30"]
    assert sweep.main([*argv, "--knobs", "warmup", "--results", str(results)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert set(rows) == {"default", "warmup=4", "warmup=16"}
    assert all(row[0].endswith("/2") for row in rows.values())  # one cell: two comparisons
    store = json.loads(results.read_text())
    assert sum(key.endswith("|hycache|warmup=4") for key in store) == 1
    assert sum(key.endswith("|marconi") for key in store) == 1  # the other presets, once
    with pytest.raises(SystemExit):
        sweep.main([*argv, "--knobs", "page_size", "--results", str(results)])
