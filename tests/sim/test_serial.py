"""Serial replay fed in parts ends where it ends fed at once."""

from __future__ import annotations

import dataclasses

import pytest

from hycache.cache.presets import build_cache
from hycache.errors import CapacityError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.request import Request
from hycache.sim.serial import SerialReplay, replay_serial
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))


@pytest.mark.parametrize("preset", ["vllm", "sglang", "marconi", "hycache"])
@pytest.mark.parametrize("split", [0, 7, 23, 40])
def test_feeding_in_parts_equals_feeding_at_once(preset: str, split: int) -> None:
    requests = list(generate("chat", requests=40, seed=3))
    whole = replay_serial(build_cache(SPEC, 3 * 10**9, preset), requests, COST, knobs={"k": 1})
    parts = SerialReplay(build_cache(SPEC, 3 * 10**9, preset), COST)
    parts.feed(requests[:split])
    assert parts.served == split
    ticks: list[int] = []
    parts.feed(requests[split:], lambda: ticks.append(1))
    assert len(ticks) == 40 - split and parts.served == 40
    got = parts.result({"k": 1})
    assert dataclasses.replace(got, wall_s=0.0) == dataclasses.replace(whole, wall_s=0.0)
    assert got.timeline and got.ttft_samples == whole.ttft_samples


def _oversized() -> list[Request]:
    small = list(generate("chat", requests=4, seed=0))
    huge = Request.of("huge", range(10**6, 10**6 + 400_000), [7, 8], arrival_s=0.5)
    return [small[0], huge, *small[1:]]


def test_an_oversized_request_is_counted_or_raises() -> None:
    requests = _oversized()
    replay = SerialReplay(build_cache(SPEC, 2 * 10**9, "vllm"), COST, reject_oversized=True)
    result = replay.feed(requests).result()
    assert replay.rejected == result.rejected == 1 and result.requests == 5
    strict = SerialReplay(build_cache(SPEC, 2 * 10**9, "vllm"), COST)
    with pytest.raises(CapacityError):
        strict.feed(requests)
    assert strict.served == 2  # the request that raised was fed
