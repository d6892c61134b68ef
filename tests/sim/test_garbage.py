"""The collector's pace during a replay: raised inside, restored after, results unchanged."""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator

import pytest

from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.garbage import YOUNG_THRESHOLD, fewer_collections
from hycache.sim.hardware import hardware
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))


@pytest.fixture(autouse=True)
def _interpreter_default() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_raises_inside_and_restores_after() -> None:
    with fewer_collections(5000):
        assert gc.get_threshold() == (5000, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


def test_restores_after_an_error() -> None:
    with pytest.raises(KeyError), fewer_collections(5000):
        raise KeyError("boom")
    assert gc.get_threshold() == (700, 10, 10)


def test_never_collects_more_often_nor_turns_a_stopped_collector_on() -> None:
    with fewer_collections(100):
        assert gc.get_threshold() == (700, 10, 10)
    with fewer_collections(None):
        assert gc.get_threshold() == (700, 10, 10)
    gc.set_threshold(0, 10, 10)
    with fewer_collections(5000):
        assert gc.get_threshold() == (0, 10, 10)


def test_a_bad_threshold_is_a_config_error_before_anything_changes() -> None:
    with pytest.raises(ConfigError, match="threshold must be >= 1"), fewer_collections(0):
        pass
    assert gc.get_threshold() == (700, 10, 10)
    with pytest.raises(ConfigError, match="gc_young"):
        SimulationConfig(SPEC, COST, gc_young=-5)


def _watched(seen: list[int]) -> Iterator[Request]:
    """A workload that notes the collector's threshold as each request is read."""
    for request in generate("chat", requests=60, seed=3):
        seen.append(gc.get_threshold()[0])
        yield request


@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_replays_run_at_the_configured_pace_with_the_same_results(mode: str) -> None:
    results = {}
    for young in (None, YOUNG_THRESHOLD, 1000):
        seen: list[int] = []
        config = SimulationConfig(SPEC, COST, mode=mode, gc_young=young, progress=False)
        config = dataclasses.replace(config, reject_oversized=True)
        result = run_policy(config, "hycache", 2 * 10**9, lambda seen=seen: _watched(seen))
        assert seen and set(seen) == {700 if young is None else young}
        assert gc.get_threshold() == (700, 10, 10)
        results[young] = dataclasses.replace(result, wall_s=0.0)
    assert results[None] == results[YOUNG_THRESHOLD] == results[1000]
