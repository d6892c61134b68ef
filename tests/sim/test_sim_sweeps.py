"""Sweeps over policies x modes x sources: capacity is a promise, and Marconi's reported edge
over vLLM on multi-turn chat shows up."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.request import Request
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.trace import read_trace
from hycache.sim.workloads import WORKLOADS, generate
from hycache.spec.model import ModelSpec

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
POLICIES = ("vllm", "sglang", "marconi", "hycache")


def _sources() -> dict[str, Callable[[], Iterable[Request]]]:
    sources: dict[str, Callable[[], Iterable[Request]]] = {
        name: (lambda name=name: generate(name, requests=60, seed=1)) for name in WORKLOADS
    }
    for trace in ("mooncake_conversation", "mooncake_synthetic"):
        path = TRACES / f"{trace}.jsonl.gz"
        if path.is_file():
            sources[trace] = lambda path=path: read_trace(path, limit=120)
    return sources


SOURCES = _sources()


@pytest.mark.slow
@pytest.mark.parametrize(("source", "mode"), list(itertools.product(SOURCES, ("serial", "engine"))))
def test_no_policy_ever_holds_more_than_its_capacity(source: str, mode: str) -> None:
    spec = ModelSpec.named("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec,
        CostModel(spec, hardware("h200")),
        mode=mode,
        knobs={"marconi": {"alpha": 1.0}},
        reject_oversized=True,
    )
    capacity = 10**9  # a few requests' worth: the policies must evict
    evictions = 0
    for policy in POLICIES:
        result = run_policy(config, policy, capacity, SOURCES[source])
        assert result.capacity_overrun_bytes == 0, (policy, source, mode)
        assert result.peak_bytes <= capacity, (policy, source, mode)
        assert result.requests > 0
        evictions += result.evictions
    assert evictions > 0, "the sweep must put the policies under pressure"


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_whole_synthetic_trace_never_overruns(mode: str) -> None:
    """Every policy over the whole Mooncake synthetic trace (3,993 requests, 5% of its
    footprint, 28.6 GB): the bytes held never exceed the budget, checked after every request
    (serial) or engine step."""
    spec = ModelSpec.named("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec,
        CostModel(spec, hardware("h200")),
        mode=mode,
        knobs={"marconi": {"alpha": 0.0}},  # what its bootstrap picks at this capacity
        reject_oversized=True,
    )
    capacity = 28_580_226_662
    for policy in POLICIES:
        result = run_policy(
            config, policy, capacity, lambda: read_trace(TRACES / "mooncake_synthetic.jsonl.gz")
        )
        assert result.requests == 3993
        assert result.capacity_overrun_bytes == 0 and result.peak_bytes <= capacity, policy
        assert result.evictions > 0


@pytest.mark.slow
def test_marconi_beats_vllm_on_multi_turn_chat_at_small_capacity() -> None:
    """Marconi (MLSys 2025) reports large hit-rate gains over vLLM on multi-turn chat when the
    cache is small; on marconi-7b, serial mode, 200 chat requests (footprint about 15 GB) in a
    0.75 GB and a 1.5 GB cache we see >= 10% more reused tokens (measured: 0.542 vs 0.472 and
    0.676 vs 0.597, alpha tuned to 1.3)."""
    spec = ModelSpec.named("marconi-7b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))

    def source() -> Iterable[Request]:
        return generate("chat", requests=200, seed=0)

    for capacity in (750 * 10**6, 1500 * 10**6):
        vllm = run_policy(config, "vllm", capacity, source)
        marconi = run_policy(config, "marconi", capacity, source)
        assert marconi.token_hit_rate >= 1.10 * vllm.token_hit_rate, (capacity, marconi, vllm)
        assert marconi.capacity_overrun_bytes == vllm.capacity_overrun_bytes == 0
