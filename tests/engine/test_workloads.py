"""The engine's request streams: the chat workload's retry turns."""

from __future__ import annotations

from hycache.engine.workloads import generate_turns


def test_every_third_follow_up_re_asks_the_previous_question() -> None:
    """A retry turn's message is the session's previous user message verbatim: a whole
    follow-up, or the first turn's prompt after its system prompt."""
    turns = generate_turns("chat", requests=60, seed=0, vocab=1000)
    previous: dict[str, tuple[int, ...]] = {}
    follow_ups = retries = 0
    for turn in turns:
        assert turn.session is not None
        before = previous.get(turn.session, ())
        previous[turn.session] = turn.tokens
        if not turn.continues:
            continue
        follow_ups += 1
        if follow_ups % 3:
            assert turn.tokens != before[-len(turn.tokens) :]
            continue
        retries += 1
        assert before[-len(turn.tokens) :] == turn.tokens
        assert len(turn.tokens) == len(before) or 24 <= len(before) - len(turn.tokens) < 60
    assert retries == follow_ups // 3 >= 5


def test_the_chat_workload_is_deterministic_per_seed() -> None:
    first = generate_turns("chat", requests=40, seed=3, vocab=1000)
    assert first == generate_turns("chat", requests=40, seed=3, vocab=1000)
    assert first != generate_turns("chat", requests=40, seed=4, vocab=1000)
