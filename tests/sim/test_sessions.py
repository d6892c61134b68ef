"""Sessions end after an idle gap: ``SessionClock`` alone, and in both replay modes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import build_cache
from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.replay import replay_engine
from hycache.sim.request import Request
from hycache.sim.serial import replay_serial
from hycache.sim.sessions import DEFAULT_IDLE_S, SessionClock
from hycache.sim.simulate import SimulationConfig
from hycache.spec.model import load_spec


class Sink:
    def __init__(self) -> None:
        self.ended: list[str] = []

    def end_session(self, session: str) -> None:
        self.ended.append(session)


def test_an_idle_session_ends_after_the_gap_and_reopens() -> None:
    sink = Sink()
    clock = SessionClock(sink, 10.0)
    clock.begin("s", 0.0)
    clock.end("s", 1.0)
    clock.advance(11.0)  # idle exactly the gap: not more than it
    assert sink.ended == []
    clock.advance(11.5)
    assert sink.ended == ["s"] and clock.open_sessions() == set()
    clock.begin("s", 12.0)  # a later request opens it again
    assert clock.open_sessions() == {"s"}
    clock.end("s", 13.0)
    clock.begin("s", 14.0)  # busy again before its deadline
    clock.advance(30.0)
    assert sink.ended == ["s"]
    clock.end("s", 31.0)
    clock.advance(41.5)
    assert sink.ended == ["s", "s"] and clock.ended == 2


def test_a_busy_session_never_ends() -> None:
    sink = Sink()
    clock = SessionClock(sink, 1.0)
    clock.begin("s", 0.0)
    clock.begin("s", 0.5)
    clock.end("s", 1.0)  # one of its two requests is still in flight
    clock.advance(100.0)
    assert sink.ended == [] and clock.open_sessions() == {"s"}


def test_no_gap_never_ends_a_session_and_sessionless_requests_are_ignored() -> None:
    assert DEFAULT_IDLE_S is None  # SGLang: a session without a timeout is never reaped
    sink = Sink()
    clock = SessionClock(sink)
    clock.begin("s", 0.0)
    clock.end("s", 0.0)
    clock.begin(None, 1.0)
    clock.end(None, 1.0)
    clock.advance(1e9)
    assert sink.ended == []


def test_bad_idle_gaps_and_unbalanced_ends_are_refused() -> None:
    with pytest.raises(ConfigError):
        SessionClock(Sink(), -1.0)
    with pytest.raises(ConfigError):
        SessionClock(Sink(), float("nan"))
    with pytest.raises(ConfigError):
        SessionClock(Sink(), 1.0).end("s", 0.0)
    spec = load_spec("qwen3-next-80b-a3b")
    with pytest.raises(ConfigError):
        SimulationConfig(spec, CostModel(spec, hardware("h200")), session_idle_s=-2.0)


Op = tuple[str, int, float]


@settings(max_examples=200, deadline=None)
@given(
    idle=st.sampled_from([0.0, 0.5, 2.0, 5.0]),
    ops=st.lists(
        st.tuples(
            st.sampled_from(["begin", "end", "advance"]),
            st.integers(0, 3),
            st.floats(0.0, 3.0, allow_nan=False),
        ),
        max_size=60,
    ),
)
def test_the_clock_ends_exactly_the_sessions_idle_longer_than_the_gap(
    idle: float, ops: list[Op]
) -> None:
    """Against a brute-force model: after every call, a session is open iff it has a request
    in flight or its last finish is at most ``idle`` before now."""
    sink = Sink()
    clock = SessionClock(sink, idle)
    now = 0.0
    busy: dict[str, int] = {}
    last: dict[str, float] = {}
    for verb, who, step in ops:
        session = f"s{who}"
        now += step
        if verb == "end" and not busy.get(session):
            continue
        # the model: end what is overdue at ``now`` first (every call advances the clock)
        for name in sorted(last):
            if not busy.get(name) and last[name] + idle < now:
                del last[name]
        if verb == "begin":
            clock.begin(session, now)
            busy[session] = busy.get(session, 0) + 1
            last.pop(session, None)
        elif verb == "end":
            clock.end(session, now)
            busy[session] -= 1
            if not busy[session]:
                last[session] = now
        else:
            clock.advance(now)
        if verb == "advance":
            expected = {s for s, n in busy.items() if n} | set(last)
            assert clock.open_sessions() == expected
    assert len(sink.ended) == clock.ended


# ---------------------------------------------------------------------- in the replays
def _cache() -> HybridPrefixCache:
    return build_cache(
        load_spec("qwen3-next-80b-a3b"), 8 * 10**9, "hycache", track_ids=False, session_aware=True
    )


def _requests(output: int) -> list[Request]:
    """Session "a" sends once at 0 s; session "b" at 0, 50 and 100 s."""
    out = [9] * output
    return [
        Request.of("a0", list(range(0, 600)), out, 0.0, session="a"),
        Request.of("b0", list(range(1000, 1600)), out, 0.0, session="b"),
        Request.of("b1", [*range(1000, 1600), *out, *range(2000, 2100)], out, 50.0, session="b"),
        Request.of("b2", list(range(3000, 3300)), out, 100.0, session="b"),
    ]


def _live(cache: HybridPrefixCache, tokens: range) -> list[bool]:
    nodes = cache.tree.nodes_on(list(tokens))
    assert nodes
    return [cache.is_live(node) for node in nodes]


@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_a_replay_ends_the_idle_session_and_keeps_the_busy_one(mode: str) -> None:
    cache = _cache()
    cost = CostModel(cache.spec, hardware("h200"))
    requests = _requests(output=16)

    def check() -> None:
        cache.check_integrity()
        assert cache.pool.used_bytes <= cache.pool.budget_bytes

    if mode == "serial":
        replay_serial(cache, requests, cost, tick=check, session_idle_s=30.0)
    else:
        replay_engine(cache, requests, cost, tick=check, session_idle_s=30.0)
    assert cache.notes.live_sessions == {"b"}
    assert not any(_live(cache, range(0, 600)))  # "a": idle since ~0 s
    assert all(_live(cache, range(3000, 3300)))  # "b": its last request finished just now


@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_without_a_gap_every_session_stays_live(mode: str) -> None:
    cache = _cache()
    cost = CostModel(cache.spec, hardware("h200"))
    replay = replay_serial if mode == "serial" else replay_engine
    replay(cache, _requests(output=16), cost)
    assert cache.notes.live_sessions == {"a", "b"}
    assert all(_live(cache, range(0, 600)))


def test_engine_mode_keeps_a_session_with_a_request_in_flight() -> None:
    """b's second request decodes for long after a's ends: b never idles, so only a ends."""
    cache = _cache()
    cost = CostModel(cache.spec, hardware("h200"))
    requests = [
        Request.of("a0", list(range(0, 600)), [9] * 8, 0.0, session="a"),
        Request.of("b0", list(range(1000, 1600)), [9] * 40_000, 0.0, session="b"),
    ]
    result = replay_engine(cache, requests, cost, session_idle_s=1.0)
    assert result.requests == 2
    # b finished last, at the end of the replay: nothing after it could end it
    assert cache.notes.live_sessions == {"b"}
