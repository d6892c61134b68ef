"""hycache's one-time tuning of eviction, checkpoint skipping and the aging clock."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping

import pytest

from hycache.cache.knobs import KnobValue
from hycache.cache.presets import build_cache
from hycache.policy.bootstrap import Outcome, in_order
from hycache.policy.tuning import (
    CANDIDATES,
    MARGIN,
    VALUE_LED_EXPONENT,
    candidates_for,
    has_evidence,
    pick_knobs,
)
from hycache.sim import bootstrap as sim_bootstrap
from hycache.sim import simulate
from hycache.sim.bootstrap import Window
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.replay import EngineReplay
from hycache.sim.report import tuned_notes
from hycache.sim.request import Request
from hycache.sim.serial import SerialReplay
from hycache.sim.simulate import SimulationConfig, footprint_bytes, run_policy
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec


def test_the_default_wins_unless_another_candidate_is_clearly_better() -> None:
    margin = 0.1
    close = [100.0] + [100.0 * (1 + margin / 2)] * (len(CANDIDATES) - 1)
    assert pick_knobs(close, margin=margin) == 0
    far = [100.0] + [100.0 * (1 + 2 * margin)] + [0.0] * (len(CANDIDATES) - 2)
    assert pick_knobs(far, margin=margin) == 1


def test_the_margin_is_a_parameter() -> None:
    close = [100.0] + [105.0] * (len(CANDIDATES) - 1)
    assert pick_knobs(close, margin=0.0) == 1
    assert pick_knobs(close, margin=0.1) == 0


def test_by_default_the_best_score_wins_and_ties_go_to_the_first() -> None:
    assert MARGIN == 0.0
    clock_best = [100.0, 90.0, 101.0]
    assert pick_knobs(clock_best) == 2
    assert pick_knobs([100.0, 100.0, 100.0]) == 0
    assert pick_knobs([90.0, 100.0, 100.0]) == 1


def test_the_clock_candidates_are_left_out_where_the_user_decided() -> None:
    assert candidates_for(()) == CANDIDATES
    clock = [c for c in CANDIDATES if "aging_horizon" in c]
    assert len(clock) == 3 and all(c["aging_horizon"] == 0 for c in clock)
    without = tuple(c for c in CANDIDATES if "aging_horizon" not in c)
    assert candidates_for(("aging_horizon",)) == without
    assert candidates_for(("exponent", "aging_horizon")) == without
    assert candidates_for((), tune_clock=False) == without


def test_the_value_led_candidate_is_left_out_where_the_user_set_its_weighting() -> None:
    value_led = [c for c in CANDIDATES if "exponent" in c]
    assert len(value_led) == 1
    assert value_led[0]["exponent"] == VALUE_LED_EXPONENT
    assert value_led[0]["reason_weight"] == "chance"
    rest = tuple(c for c in CANDIDATES if c not in value_led)
    assert candidates_for(("exponent",)) == rest
    weighted = tuple(c for c in CANDIDATES if "reason_weight" not in c)
    assert candidates_for(("reason_weight",)) == weighted
    assert candidates_for(("dead_weight",)) == CANDIDATES


def test_the_lineage_candidate_is_left_out_where_the_user_set_its_knobs() -> None:
    lineage = [c for c in CANDIDATES if c.get("reason_weight") == "lineage"]
    assert len(lineage) == 1 and "exponent" not in lineage[0]
    assert lineage[0] in candidates_for(("exponent",))
    for knob in ("reason_weight", "aging_horizon"):
        assert lineage[0] not in candidates_for((knob,))
    assert lineage[0] not in candidates_for((), tune_clock=False)
    without = candidates_for((), tune_lineage=False)
    assert without == tuple(c for c in CANDIDATES if c is not lineage[0])


def test_run_policy_passes_the_tune_margin_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []

    def spy(scores, margin=MARGIN):  # type: ignore[no-untyped-def]
        seen.append(margin)
        return 0

    monkeypatch.setattr(sim_bootstrap, "pick_knobs", spy)
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), knobs={"hycache": {"tune_margin": 0.25}}
    )
    source = lambda: generate("chat", requests=10, seed=1)  # noqa: E731
    run_policy(config, "hycache", 2 * 10**9, source)
    assert seen and set(seen) == {0.25}  # the window and its first half


def test_run_policy_tunes_hycache_unless_its_knobs_are_set() -> None:
    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    source = lambda: generate("chat", requests=40, seed=1)  # noqa: E731
    tuned = run_policy(SimulationConfig(spec, cost), "hycache", 2 * 10**9, source)
    assert {k: tuned.knobs[k] for k in ("eviction", "adaptive")} in [dict(c) for c in CANDIDATES]
    fixed = SimulationConfig(spec, cost, knobs={"hycache": {"eviction": "gds"}})
    assert run_policy(fixed, "hycache", 2 * 10**9, source).knobs["eviction"] == "gds"


def _record_windows(monkeypatch: pytest.MonkeyPatch) -> list[Window]:
    """Every bootstrap window the simulator builds from now on, in order."""
    recorded: list[Window] = []
    real_window = simulate.bootstrap_window

    def recording(source, spec, capacity, multiplier, *, returns=False):  # type: ignore[no-untyped-def]
        recorded.append(real_window(source, spec, capacity, multiplier, returns=returns))
        return recorded[-1]

    monkeypatch.setattr(simulate, "bootstrap_window", recording)
    return recorded


@pytest.mark.parametrize(
    ("reused", "hits"), [(0.0, 0), (5000.0, 1)], ids=["no-reuse", "one-request-hit"]
)
def test_a_bootstrap_window_without_evidence_is_doubled_until_the_whole_source(
    monkeypatch: pytest.MonkeyPatch, reused: float, hits: int
) -> None:
    """The candidates reused tokens in fewer requests than fill the cache once (none, or one):
    a handful of events tells them apart no better than a coin, so the window doubles until
    some candidate's hits number a cache fill of requests, or it holds everything."""
    recorded = _record_windows(monkeypatch)

    def blind(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        """Every candidate scored as if its window replay reused ``reused`` tokens in
        ``hits`` requests."""
        return in_order(lambda c: (replay(c), (reused, hits, reused))[1], candidates, pick, finish)

    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    run_policy(config, "hycache", 5 * 10**8, source, contest=blind)
    assert all(w.count == sum(1 for _ in w.requests()) for w in recorded)
    sizes = [w.count for w in recorded]
    wholes = [w.whole for w in recorded]
    fills = {w.fill for w in recorded}
    assert len(fills) == 1 and all(fill is not None and fill > hits for fill in fills)
    assert len(recorded) >= 3 and wholes == [False] * (len(sizes) - 1) + [True]
    assert all(later == 2 * earlier for earlier, later in itertools.pairwise(sizes[:-1]))
    assert sizes[-1] == 200


def test_evidence_counts_requests_that_reused_tokens_in_cache_fills() -> None:
    assert not has_evidence([0, 0, 0], 5)
    assert not has_evidence([4, 2, 0], 5) and has_evidence([5, 0, 0], 5)
    assert has_evidence([0, 1], 5, 0.0) and not has_evidence([0, 0], 5, 0.0)  # one request
    assert has_evidence([3], 5, 0.5) and not has_evidence([2], 5, 0.5)  # rounded up
    assert not has_evidence([9], 5, 2.0) and has_evidence([10], 5, 2.0)


@pytest.mark.parametrize("settle", [True, False])
def test_a_window_whose_first_half_picks_another_candidate_is_doubled(
    monkeypatch: pytest.MonkeyPatch, settle: bool
) -> None:
    """``bootstrap_settle``: the first window's pick (the second candidate) is overturned on
    its first half (the first candidate reused more there), so the window doubles; on the
    second window both halves agree and the second candidate wins. Without it the first
    window decides. The doubled window replays every candidate again."""
    recorded = _record_windows(monkeypatch)
    entrants: list[int] = []

    def overturned(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        entrants.append(len(candidates))

        def score(candidate):  # type: ignore[no-untyped-def]
            replay(candidate)
            second = candidate is candidates[1]
            half = (50.0 if len(recorded) == 1 else 150.0) if second else 100.0
            return (200.0 if second else 100.0), 10**6, half

        return in_order(score, candidates, pick, finish)

    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), knobs={"hycache": {"bootstrap_settle": settle}}
    )
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    result = run_policy(config, "hycache", 5 * 10**8, source, contest=overturned)
    sizes = [w.count for w in recorded]
    assert sizes == ([sizes[0], 2 * sizes[0]] if settle else [sizes[0]])
    assert entrants == [len(CANDIDATES)] * len(sizes)
    assert sizes[-1] < 200 and result.tuned["window_requests"] == sizes[-1]
    assert result.knobs["adaptive"] is False  # the second candidate


def test_evidence_zero_judges_a_window_on_one_request_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    """``bootstrap_evidence`` 0: the rule before evidence counted, any reused token."""
    recorded = _record_windows(monkeypatch)

    def one_hit(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        return in_order(lambda c: (replay(c), (5000.0, 1, 5000.0))[1], candidates, pick, finish)

    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(
        spec, CostModel(spec, hardware("h200")), knobs={"hycache": {"bootstrap_evidence": 0.0}}
    )
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    run_policy(config, "hycache", 5 * 10**8, source, contest=one_hit)
    assert len(recorded) == 1 and recorded[0].count < 200


def test_a_bootstrap_window_with_evidence_is_not_extended(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chat: nearly every request of the window reuses its conversation's earlier turns, so
    the first window holds more hits than a cache fill of requests, and it is kept."""
    calls: list[Outcome[tuple[float, int, float], object]] = []
    recorded = _record_windows(monkeypatch)

    def counted(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        calls.append(in_order(replay, candidates, pick, finish))
        return calls[-1]

    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))
    source = lambda: generate("chat", requests=200, seed=1)  # noqa: E731
    run_policy(config, "hycache", 5 * 10**8, source, contest=counted)
    assert len(calls) == 1 and calls[0].picked is not None
    (fill,) = (w.fill for w in recorded)
    assert fill is not None and max(hits for _, hits, _ in calls[0].scores) >= fill
    assert all(reused > 0 for reused, _, _ in calls[0].scores)


def _shared_prefix_at_20_percent() -> tuple[SimulationConfig, Callable[[], list[Request]], int]:
    """seed-0 ``shared-prefix`` at 20% of its footprint: a stream whose bootstrap window favours
    GreedyDual's flat clock."""
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")), reject_oversized=True)
    source = lambda: generate("shared-prefix", requests=200, seed=0)  # noqa: E731
    return config, source, footprint_bytes(config, source) * 20 // 100


def test_the_flat_clock_is_chosen_where_its_window_reuses_most() -> None:
    """With the value-led candidate left out (the user set a reason weight), the flat clock
    alone wins this window."""
    config, source, capacity = _shared_prefix_at_20_percent()
    rate = dataclasses.replace(config, knobs={"hycache": {"reason_weight": "rate"}})
    tuned = run_policy(rate, "hycache", capacity, source)
    assert tuned.knobs["aging_horizon"] == 0 and tuned.knobs["adaptive"] is True
    assert tuned.knobs["exponent"] == 0.5
    fixed = dataclasses.replace(
        config, knobs={"hycache": {"eviction": "value", "adaptive": True, "aging_horizon": 0}}
    )
    assert run_policy(fixed, "hycache", capacity, source).token_hit_rate == tuned.token_hit_rate


def test_the_value_led_candidate_is_chosen_where_its_window_reuses_most() -> None:
    config, source, capacity = _shared_prefix_at_20_percent()
    tuned = run_policy(config, "hycache", capacity, source)
    (value_led,) = (c for c in CANDIDATES if "exponent" in c)
    assert tuned.tuned["exponent"] == VALUE_LED_EXPONENT
    assert {k: tuned.knobs[k] for k in value_led} == dict(value_led)
    fixed = dataclasses.replace(config, knobs={"hycache": dict(value_led)})
    assert run_policy(fixed, "hycache", capacity, source).token_hit_rate == tuned.token_hit_rate


@pytest.mark.parametrize(
    "knobs", [{"aging_horizon": 1600}, {"tune_clock": False}], ids=["horizon", "no-clock"]
)
def test_a_user_decision_keeps_the_clock_out_of_tuning(
    monkeypatch: pytest.MonkeyPatch, knobs: dict[str, KnobValue]
) -> None:
    tried: list[tuple[Mapping[str, object], ...]] = []

    def spied(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        tried.append(tuple(candidates))
        return in_order(replay, candidates, pick, finish)

    config, source, capacity = _shared_prefix_at_20_percent()
    config = dataclasses.replace(config, knobs={"hycache": knobs})
    result = run_policy(config, "hycache", capacity, source, contest=spied)
    assert tried == [candidates_for(())[:2]]
    assert result.knobs["aging_horizon"] == knobs.get("aging_horizon", 1600)


def test_the_choice_is_recorded_with_its_window() -> None:
    config, source, capacity = _shared_prefix_at_20_percent()
    result = run_policy(config, "hycache", capacity, source)
    window = result.tuned["window_requests"]
    assert isinstance(window, int) and 0 < window <= 200
    (value_led,) = (c for c in CANDIDATES if "exponent" in c)
    assert {k: v for k, v in result.tuned.items() if k != "window_requests"} == value_led
    assert result.as_json()["tuned"] == result.tuned
    marconi = run_policy(config, "marconi", capacity, source)
    assert marconi.tuned["alpha"] == marconi.knobs["alpha"]
    assert window < 200 and marconi.tuned["window_requests"] < 200
    notes = tuned_notes({"hycache": result, "marconi": marconi})
    chosen = (
        "hycache: chose eviction=value, adaptive=true, aging_horizon=0, exponent=2.0, "
        "reason_weight=chance (GreedyDual's flat clock) on a bootstrap window of"
    )
    assert notes == [
        f"{chosen} {window} of 200 requests",
        f"marconi: chose alpha={marconi.knobs['alpha']} on a bootstrap window of "
        f"{marconi.tuned['window_requests']} of 200 requests",
    ]
    # a window that held every request: the note says the choice saw the whole trace
    whole = dataclasses.replace(result, tuned={**result.tuned, "window_requests": 200})
    assert tuned_notes({"hycache": whole}) == [f"{chosen} all 200 requests: a choice in hindsight"]


def test_nothing_is_recorded_where_the_user_chose() -> None:
    config, source, capacity = _shared_prefix_at_20_percent()
    config = dataclasses.replace(
        config, knobs={"hycache": {"adaptive": True}, "marconi": {"alpha": 1.0}}
    )
    for preset in ("hycache", "marconi", "vllm"):
        result = run_policy(config, preset, capacity, source)
        assert result.tuned == {} and "tuned" not in result.as_json()
        assert tuned_notes({preset: result}) == []


@pytest.mark.parametrize("mode", ["engine", "serial"])
def test_candidates_are_scored_by_replays_in_the_runs_mode(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Each candidate's score is the tokens its window replay reused (and the requests that
    reused them, and the tokens reused in the window's first half), that replay run the way
    the whole source will be: through the engine loop (requests overlap) in engine mode, up
    to the window's last request leaving the queue; request by request in serial mode."""
    scored: list[tuple[tuple[float, int, float], ...]] = []

    def spied(replay, candidates, pick, finish):  # type: ignore[no-untyped-def]
        outcome = in_order(replay, candidates, pick, finish)
        scored.append(outcome.scores)
        return outcome

    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, hardware("h200"))
    config = SimulationConfig(spec, cost, mode=mode, reject_oversized=True)
    requests = list(generate("chat", requests=200, seed=6))
    capacity = footprint_bytes(config, lambda: requests) * 10 // 100
    result = run_policy(config, "hycache", capacity, lambda: requests, contest=spied)
    window = requests[: int(str(result.tuned["window_requests"]))]
    half = max(1, len(window) // 2)
    expected: dict[str, list[tuple[float, int, float]]] = {"engine": [], "serial": []}
    for candidate in candidates_for(()):
        for way in expected:
            cache = build_cache(spec, capacity, "hycache", track_ids=False, **candidate)
            if way == "engine":  # the whole source, until the window has left the queue
                engine = EngineReplay(cache, requests, cost, reject_oversized=True)
                halfway = float(engine.run_until(half).cache.stats().reused_tokens)
                engine.run_until(len(window))
            else:
                serial = SerialReplay(cache, cost, reject_oversized=True).feed(window[:half])
                halfway = float(serial.cache.stats().reused_tokens)
                serial.feed(window[half:])
            stats = cache.stats()
            expected[way].append((float(stats.reused_tokens), stats.requests_hit, halfway))
    assert expected["engine"] != expected["serial"]  # the modes do tell them apart here
    assert scored[-1] == tuple(expected[mode])


@pytest.mark.parametrize("returns", [False, True])
def test_run_policy_passes_the_bootstrap_returns_knob(
    monkeypatch: pytest.MonkeyPatch, returns: bool
) -> None:
    asked: list[bool] = []
    real_window = simulate.bootstrap_window

    def spy(source, spec, capacity, multiplier, *, returns=False):  # type: ignore[no-untyped-def]
        asked.append(returns)
        return real_window(source, spec, capacity, multiplier, returns=returns)

    monkeypatch.setattr(simulate, "bootstrap_window", spy)
    spec = load_spec("qwen3-next-80b-a3b")
    knobs: dict[str, dict[str, KnobValue]] = {"hycache": {"bootstrap_returns": returns}}
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")), knobs=knobs)
    source = lambda: generate("chat", requests=40, seed=1)  # noqa: E731
    run_policy(config, "hycache", 2 * 10**9, source)
    run_policy(config, "marconi", 2 * 10**9, source)  # Marconi's window: cache fills alone
    assert asked and asked[0] == returns and asked[-1] is False
