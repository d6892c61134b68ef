"""benchmarks/bootstrap_windows.py: its offline pick is the simulator's own bootstrap pick."""

from __future__ import annotations

import dataclasses

import pytest

from hycache.sim.simulate import footprint_bytes, run_policy
from tests.benchmarks.scripts import load_script

MODEL = "qwen3-next-80b-a3b"


@pytest.mark.parametrize("evidence", [0.0, 1.0])
def test_the_offline_pick_is_the_bootstraps(evidence: float) -> None:
    matrix = load_script("policy_matrix")
    windows = load_script("bootstrap_windows")
    label = "shared-prefix:s1"
    config = matrix._config(MODEL, "serial")
    capacity = footprint_bytes(config, matrix.Source(label, 200)) * 5 // 100
    curves = windows.replay_candidates((MODEL, label, 200, 5.0, capacity))
    index, size = windows.pick(curves, MODEL, 200, evidence)
    config = dataclasses.replace(config, knobs={"hycache": {"bootstrap_evidence": evidence}})
    result = run_policy(config, "hycache", capacity, matrix.Source(label, 200))
    assert result.tuned["window_requests"] == size
    assert result.token_hit_rate == curves.hit_rate[index]
