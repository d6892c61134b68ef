"""The simulator's bootstrap window: cache fills, and (``bootstrap_returns``) the distance
after which a session's next request comes back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hycache.sim.bootstrap import ReturnDistances, bootstrap_window
from hycache.sim.request import Request
from hycache.spec.model import load_spec

SPEC = load_spec("qwen3-next-80b-a3b")


def _request(index: int, session: str | None, tokens: int = 64) -> Request:
    prompt = [index * 1000 + t for t in range(tokens)]
    return Request.of(f"r{index}", prompt, [7], float(index), session=session)


def _round_robin(sessions: int, rounds: int) -> list[Request]:
    """``sessions`` conversations taking turns: each comes back ``sessions`` requests later."""
    return [_request(r * sessions + s, f"s{s}") for r in range(rounds) for s in range(sessions)]


def _reference_median(sessions: list[str | None]) -> int | None:
    """Kaplan-Meier's median written out: at each distance with returns, the share of the
    requests still waiting then (returned at or after it, or waiting at least that long)
    that came back there."""
    last: dict[str, int] = {}
    returned: list[int] = []
    for index, session in enumerate(sessions, start=1):
        if session is None:
            continue
        if session in last:
            returned.append(index - last[session])
        last[session] = index
    waiting = [len(sessions) - at for at in last.values()]
    survival = 1.0
    for distance in sorted(set(returned)):
        at_risk = sum(1 for d in returned + waiting if d >= distance)
        survival *= 1 - returned.count(distance) / at_risk
        if survival <= 0.5:
            return distance
    return None


def _median(sessions: list[str | None]) -> int | None:
    distances = ReturnDistances()
    for index, session in enumerate(sessions):
        distances.see(_request(index, session, tokens=1))
    return distances.median()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from("abcdef")), max_size=60))
def test_the_median_is_kaplan_meiers(sessions: list[str | None]) -> None:
    assert _median(sessions) == _reference_median(sessions)


def test_sessions_taking_turns_come_back_after_as_many_requests_as_there_are_sessions() -> None:
    assert _median([f"s{i % 7}" for i in range(70)]) == 7


def test_requests_still_waiting_count_so_the_head_does_not_understate_the_distance() -> None:
    """Eight sessions that came back after 2 and twenty opened and not back yet: the returns
    alone would say 2, but most requests have waited longer without a return."""
    head = [f"q{i % 4}" for i in range(8)] + [f"open{i}" for i in range(20)]
    assert sorted(set(head[:8])) == ["q0", "q1", "q2", "q3"]
    assert _median(head) is None  # fewer than half came back: no median yet
    assert _reference_median(head) is None


def test_no_sessions_no_median() -> None:
    assert _median([None] * 10) is None
    assert _median([f"one-off{i}" for i in range(10)]) is None


@pytest.mark.parametrize("returns", [False, True])
def test_the_window_waits_for_sessions_to_come_back(returns: bool) -> None:
    """Forty sessions taking turns, a cache filled by about ten requests: five fills are 50
    requests, before any conversation came back; with ``returns`` the window holds five
    return distances (200 requests)."""
    requests = _round_robin(40, 20)
    per_request = (64 + 1) * SPEC.kv_bytes_per_token + 2 * SPEC.state_bytes
    window = bootstrap_window(lambda: iter(requests), SPEC, 10 * per_request, 5, returns=returns)
    assert window.fill == 10 and not window.whole
    assert window.count == (200 if returns else 50)
    assert list(window.requests()) == requests[: window.count]


def test_without_sessions_the_returns_change_nothing() -> None:
    requests = [_request(i, None) for i in range(300)]
    per_request = (64 + 1) * SPEC.kv_bytes_per_token + 2 * SPEC.state_bytes
    windows = [
        bootstrap_window(lambda: iter(requests), SPEC, 10 * per_request, 5, returns=returns)
        for returns in (False, True)
    ]
    assert windows[0].count == windows[1].count == 50


def test_a_window_the_returns_would_stretch_past_the_source_is_all_of_it() -> None:
    requests = _round_robin(40, 3)
    per_request = (64 + 1) * SPEC.kv_bytes_per_token + 2 * SPEC.state_bytes
    window = bootstrap_window(lambda: iter(requests), SPEC, 10 * per_request, 5, returns=True)
    assert window.whole and window.count == len(requests)
