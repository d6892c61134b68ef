"""benchmarks/bootstrap_windows.py: its offline pick is the simulator's own bootstrap pick."""

from __future__ import annotations

import dataclasses

import pytest

from hycache.policy.tuning import CANDIDATES
from hycache.sim.simulate import footprint_bytes, run_policy
from tests.benchmarks.scripts import load_script

MODEL = "qwen3-next-80b-a3b"


@pytest.mark.parametrize(
    ("label", "pct", "evidence", "settle"),
    [
        ("shared-prefix:s1", 5, 0.0, False),
        ("shared-prefix:s1", 5, 1.0, False),
        ("shared-prefix:s8", 10, 1.0, False),
        ("shared-prefix:s8", 10, 1.0, True),  # its first window's halves disagree
    ],
)
def test_the_offline_pick_is_the_bootstraps(
    label: str, pct: int, evidence: float, settle: bool
) -> None:
    matrix = load_script("policy_matrix")
    windows = load_script("bootstrap_windows")
    config = matrix._config(MODEL, "serial")
    capacity = footprint_bytes(config, matrix.Source(label, 200)) * pct // 100
    curves = windows.replay_candidates((MODEL, label, 200, float(pct), capacity, CANDIDATES))
    index, size = windows.pick(curves, MODEL, 200, evidence, settle=settle)
    knobs = {"bootstrap_evidence": evidence, "bootstrap_settle": settle}
    config = dataclasses.replace(config, knobs={"hycache": knobs})
    result = run_policy(config, "hycache", capacity, matrix.Source(label, 200))
    assert result.tuned["window_requests"] == size
    assert result.token_hit_rate == curves.hit_rate[index]
    if settle:
        assert (index, size) != windows.pick(curves, MODEL, 200, evidence)


def test_other_candidates_and_the_switched_in_reference() -> None:
    matrix = load_script("policy_matrix")
    windows = load_script("bootstrap_windows")
    label = "chat:s0"
    config = matrix._config(MODEL, "serial")
    capacity = footprint_bytes(config, matrix.Source(label, 200)) * 5 // 100
    lru = {"eviction": "lru", "adaptive": True}
    curves = windows.replay_candidates((MODEL, label, 200, 5.0, capacity, (CANDIDATES[0], lru)))
    assert len(curves.reused) == 2
    for index, knobs in enumerate((CANDIDATES[0], lru)):
        fixed = dataclasses.replace(config, knobs={"hycache": dict(knobs)})  # no bootstrap
        alone = run_policy(fixed, "hycache", capacity, matrix.Source(label, 200))
        assert curves.hit_rate[index] == alone.token_hit_rate
    # switched in where a window ends: the first candidate's reuse before, the other's after
    window = 50
    assert curves.switched(0, window) == curves.hit_rate[0]
    before = curves.reused[0][window - 1]
    after = curves.reused[1][-1] - curves.reused[1][window - 1]
    assert curves.switched(1, window) == (before + after) / curves.prompt_tokens
    assert curves.switched(1, window) != curves.hit_rate[1]
