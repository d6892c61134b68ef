"""hycache's one-time tuning of eviction and checkpoint skipping."""

from __future__ import annotations

import itertools

import pytest

from hycache.policy.tuning import CANDIDATES, MARGIN, tune_knobs
from hycache.sim import simulate
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec


def test_the_default_wins_unless_another_candidate_is_clearly_better() -> None:
    def scores(table: list[float]):  # type: ignore[no-untyped-def]
        return lambda knobs: table[CANDIDATES.index(knobs)]

    close = [100.0] + [100.0 * (1 + MARGIN / 2)] * (len(CANDIDATES) - 1)
    assert tune_knobs(scores(close))[0] is CANDIDATES[0]
    far = [100.0] + [100.0 * (1 + 2 * MARGIN)] + [0.0] * (len(CANDIDATES) - 2)
    chosen, got = tune_knobs(scores(far))
    assert chosen is CANDIDATES[1] and got == far


def test_the_margin_is_a_parameter() -> None:
    def scores(table: list[float]):  # type: ignore[no-untyped-def]
        return lambda knobs: table[CANDIDATES.index(knobs)]

    close = [100.0] + [100.0 * (1 + MARGIN / 2)] * (len(CANDIDATES) - 1)
    assert tune_knobs(scores(close), margin=0.0)[0] is CANDIDATES[1]
    assert tune_knobs(scores(close), margin=MARGIN)[0] is CANDIDATES[0]


def test_run_policy_passes_the_tune_margin_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def spy(replay, candidates=CANDIDATES, margin=MARGIN, **_):  # type: ignore[no-untyped-def]
        seen.append(margin)
        return candidates[0], [0.0] * len(candidates)

    monkeypatch.setattr(simulate, "tune_knobs", spy)
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), knobs={"hycache": {"tune_margin": 0.25}}
    )
    source = lambda: generate("chat", requests=10, seed=1)  # noqa: E731
    run_policy(config, "hycache", 2 * 10**9, source)
    assert seen == [0.25]


def test_run_policy_tunes_hycache_unless_its_knobs_are_set() -> None:
    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    source = lambda: generate("chat", requests=40, seed=1)  # noqa: E731
    tuned = run_policy(SimulationConfig(spec, cost), "hycache", 2 * 10**9, source)
    assert {k: tuned.knobs[k] for k in ("eviction", "adaptive")} in [dict(c) for c in CANDIDATES]
    fixed = SimulationConfig(spec, cost, knobs={"hycache": {"eviction": "gds"}})
    assert run_policy(fixed, "hycache", 2 * 10**9, source).knobs["eviction"] == "gds"


def test_a_bootstrap_window_without_reuse_is_doubled_until_the_whole_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No candidate reused a token in the window: it tells them apart no better than a coin,
    so the window doubles until some candidate reuses something or it holds everything."""
    windows: list[tuple[int, bool]] = []
    real_window = simulate._bootstrap_window

    def recorded(source, spec, capacity, multiplier):  # type: ignore[no-untyped-def]
        window = real_window(source, spec, capacity, multiplier)
        windows.append((sum(1 for _ in window.requests()), window.whole))
        assert window.count == windows[-1][0]
        return window

    def blind(replay, candidates=CANDIDATES, margin=MARGIN, **_):  # type: ignore[no-untyped-def]
        return candidates[0], [0.0] * len(candidates)

    monkeypatch.setattr(simulate, "_bootstrap_window", recorded)
    monkeypatch.setattr(simulate, "tune_knobs", blind)
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    run_policy(config, "hycache", 5 * 10**8, source)
    sizes = [size for size, _ in windows]
    wholes = [whole for _, whole in windows]
    assert len(windows) >= 3 and wholes == [False] * (len(sizes) - 1) + [True]
    assert all(later == 2 * earlier for earlier, later in itertools.pairwise(sizes[:-1]))
    assert sizes[-1] == 200


def test_a_bootstrap_window_with_reuse_is_not_extended(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[float]] = []
    real = simulate.tune_knobs

    def counted(replay, candidates=CANDIDATES, margin=MARGIN, **kwargs):  # type: ignore[no-untyped-def]
        chosen, scores = real(replay, candidates, margin, **kwargs)
        calls.append(scores)
        return chosen, scores

    monkeypatch.setattr(simulate, "tune_knobs", counted)
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    run_policy(config, "hycache", 5 * 10**8, source)
    assert len(calls) == 1 and any(calls[0])
