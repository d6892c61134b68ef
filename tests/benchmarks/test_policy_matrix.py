"""benchmarks/policy_matrix.py's split: evaluation cells never include the tuning data."""

from __future__ import annotations

from pathlib import Path

import pytest

from hycache.sim.workloads import generate
from tests.benchmarks.scripts import load_script


def test_split_labels_keep_tuning_and_evaluation_apart() -> None:
    matrix = load_script("policy_matrix")
    names = ["chat", "mooncake_synthetic"]
    evaluation = matrix.split_sources(names, "eval", [1, 2, 3, 4, 5])
    tuning = matrix.split_sources(names, "tune", [1, 2, 3, 4, 5])
    assert evaluation == [*(f"chat:s{s}" for s in range(1, 6)), "mooncake_synthetic:h2"]
    assert tuning == ["chat:s0", "mooncake_synthetic:h1"]
    assert not set(evaluation) & set(tuning)
    with pytest.raises(SystemExit):
        matrix.split_sources(names, "all", [1])


def test_sources_yield_the_seed_and_the_half_they_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HYCACHE_CACHE_DIR", str(tmp_path))
    matrix = load_script("policy_matrix")
    seeded = [r.prompt for r in matrix.Source("chat:s3", 20)()]
    assert seeded == [r.prompt for r in generate("chat", requests=20, seed=3)]
    assert seeded != [r.prompt for r in generate("chat", requests=20, seed=0)]
    whole = [r.request_id for r in matrix.Source("mooncake_synthetic", 0)()]
    first = [r.request_id for r in matrix.Source("mooncake_synthetic:h1", 0)()]
    second = [r.request_id for r in matrix.Source("mooncake_synthetic:h2", 0)()]
    assert first + second == whole and len(first) == len(whole) // 2
    with pytest.raises(SystemExit):
        matrix.Source("nonesuch:s1", 20)
