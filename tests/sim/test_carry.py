"""A bootstrap's winning replay carried on to the end gives the result of a replay from the
start, and is carried whenever it can be."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hycache.cache.presets import build_cache
from hycache.errors import CapacityError
from hycache.sim import simulate as simulate_module
from hycache.sim.carry import HeadReplays
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.request import Request
from hycache.sim.serial import SerialReplay
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.trace_cache import load_trace
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")
COST = CostModel(SPEC, hardware("h200"))


def _replay(served: int) -> SerialReplay:
    replay = SerialReplay(build_cache(SPEC, 10**9, "vllm"), COST)
    return replay.feed(generate("chat", requests=served, seed=0))


def test_keeps_the_first_candidate_and_the_first_best() -> None:
    replays = {name: _replay(3) for name in "abcd"}
    kept: HeadReplays[str] = HeadReplays(3)
    for name, score in zip("abcd", [1.0, 5.0, 5.0, 2.0], strict=True):
        kept.offer(name, score, replays[name])
    assert kept.winner("b") is replays["b"]
    assert kept.winner("b") is None  # handed over once: nothing is kept after
    for name, score in zip("abcd", [1.0, 5.0, 5.0, 2.0], strict=True):
        kept.offer(name, score, replays[name])
    assert kept.winner("a") is replays["a"]
    for name, score in zip("abcd", [1.0, 5.0, 5.0, 2.0], strict=True):
        kept.offer(name, score, replays[name])
    assert kept.winner("c") is None  # tied with b but later: never a winner, not kept


def test_a_replay_of_less_than_the_head_is_not_kept() -> None:
    kept: HeadReplays[str] = HeadReplays(3)
    kept.offer("a", 1.0, _replay(2))
    assert kept.winner("a") is None


def _config(**changes: object) -> SimulationConfig:
    return dataclasses.replace(SimulationConfig(SPEC, COST, reject_oversized=True), **changes)


def _carried(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, int]]:
    """Records, for each run that could carry a replay on, whether it did and from where."""
    seen: list[tuple[bool, int]] = []
    real = simulate_module._can_carry

    def spy(config: SimulationConfig, replay: SerialReplay) -> bool:
        seen.append((real(config, replay), replay.served))
        return seen[-1][0]

    monkeypatch.setattr(simulate_module, "_can_carry", spy)
    return seen


@pytest.mark.parametrize("workload", ["chat", "docqa", "shared-prefix"])
@pytest.mark.parametrize("preset", ["marconi", "hycache"])
def test_carried_on_equals_replayed_from_the_start(
    monkeypatch: pytest.MonkeyPatch, workload: str, preset: str
) -> None:
    config = _config()

    def source() -> Iterator[Request]:
        return generate(workload, requests=60, seed=1)

    capacity = footprint_bytes(config, source) // 10
    seen = _carried(monkeypatch)
    carried = run_policy(config, preset, capacity, source)
    [(did, head)] = seen
    assert did and 0 < head <= 60
    monkeypatch.setattr(simulate_module, "_can_carry", lambda _c, _r: False)
    fresh = run_policy(config, preset, capacity, source)
    assert dataclasses.replace(carried, wall_s=0.0) == dataclasses.replace(fresh, wall_s=0.0)


def test_some_head_is_shorter_than_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parametrized test above covers carrying on from inside the source, not only from
    its end."""
    config = _config()

    def source() -> Iterator[Request]:
        return generate("chat", requests=60, seed=1)

    seen = _carried(monkeypatch)
    run_policy(config, "marconi", footprint_bytes(config, source) // 10, source)
    assert seen[0][1] < 60


def test_no_carry_where_the_run_starts_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A request the bootstrap served uncached must still raise in a strict run."""
    small = list(generate("chat", requests=30, seed=0))
    huge = Request.of("huge", range(10**6, 10**6 + 400_000), [7, 8], arrival_s=0.5)
    requests = [small[0], huge, *small[1:]]
    seen = _carried(monkeypatch)
    strict = _config(reject_oversized=False)
    with pytest.raises(CapacityError):
        run_policy(strict, "marconi", 2 * 10**9, lambda: iter(requests))
    assert [did for did, _head in seen] == [False]
    lenient = run_policy(_config(), "marconi", 2 * 10**9, lambda: iter(requests))
    assert lenient.rejected == 1 and seen[-1][0]


def test_a_parsed_trace_is_carried_on_from_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parsed trace reads its rest from its arrays (``window``), not by skipping the head.
    (The conversation trace: nearly every request reuses, so the window is a strict prefix;
    the synthetic trace's first requests reuse too rarely and its window is all of them.)"""
    traces = Path(__file__).resolve().parents[2] / "data" / "traces"
    trace = traces / "mooncake_conversation.jsonl.gz"
    parsed = load_trace(trace, limit=300)
    config = _config()
    capacity = footprint_bytes(config, parsed) // 10
    seen = _carried(monkeypatch)
    carried = run_policy(config, "hycache", capacity, parsed)
    [(did, head)] = seen
    assert did and 0 < head < len(parsed)
    monkeypatch.setattr(simulate_module, "_can_carry", lambda _c, _r: False)
    fresh = run_policy(config, "hycache", capacity, parsed)
    assert dataclasses.replace(carried, wall_s=0.0) == dataclasses.replace(fresh, wall_s=0.0)


def test_no_carry_under_tiers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bootstrap replays without prefetch: a run with tiers below the device starts anew."""
    from hycache.cache.tierconfig import TierConfig

    def source() -> Iterator[Request]:
        return generate("chat", requests=60, seed=1)

    config = _config(tiers=TierConfig(1 << 30))
    capacity = footprint_bytes(_config(), source) // 10
    seen = _carried(monkeypatch)
    offered = _offered(monkeypatch)
    run_policy(config, "marconi", capacity, source)
    assert seen == [] and offered == []  # nothing kept for a run that cannot carry it on


@pytest.mark.parametrize("preset", ["marconi", "hycache"])
def test_window_replays_are_kept_only_where_the_run_goes_on_from_them(
    monkeypatch: pytest.MonkeyPatch, preset: str
) -> None:
    """Marconi's alphas are replayed serially: an engine-mode run replays from the start, so
    holding a window replay's cache through it would only cost memory. hycache's candidates
    are replayed in the run's mode, so an engine-mode run goes on from its winner's replay."""

    def source() -> Iterator[Request]:
        return generate("chat", requests=60, seed=1)

    capacity = footprint_bytes(_config(), source) // 10
    offered = _offered(monkeypatch)
    run_policy(_config(mode="engine"), preset, capacity, source)
    assert (offered != []) == (preset == "hycache")
    offered.clear()
    run_policy(_config(), preset, capacity, source)
    assert offered


def _offered(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the head of every window replay offered to be carried on."""
    offered: list[int] = []
    real = HeadReplays.offer

    def spy(
        self: HeadReplays[object], candidate: object, score: float, replay: SerialReplay
    ) -> None:
        offered.append(self.head)
        real(self, candidate, score, replay)

    monkeypatch.setattr(HeadReplays, "offer", spy)
    return offered
