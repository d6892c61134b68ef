"""Workload generators: deterministic per seed, and each has its documented structure."""

from __future__ import annotations

import inspect
import statistics
from collections import defaultdict
from itertools import pairwise

import pytest

from hycache.errors import ConfigError
from hycache.sim.request import Request
from hycache.sim.workloads import (
    AGENT_MAX_PROMPT,
    AGENT_SYSTEM,
    CHAT_SYSTEM,
    RATES,
    SHARED_PROMPTS,
    VOCAB_SIZE,
    WORKLOADS,
    generate,
)
from hycache.tree.keys import decode_tokens


def lcp(a: bytes, b: bytes) -> int:
    """Common prefix of two encoded keys, in tokens."""
    n = min(len(a), len(b))
    lo, hi = 0, n
    if a[:n] == b[:n]:
        return n // 8
    while hi - lo > 1:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo // 8


def by_first_token(requests: list[Request]) -> dict[bytes, list[Request]]:
    groups: dict[bytes, list[Request]] = defaultdict(list)
    for request in requests:
        groups[request.prompt[:8]].append(request)
    return groups


def by_session(requests: list[Request]) -> dict[str, list[Request]]:
    groups: dict[str, list[Request]] = defaultdict(list)
    for request in requests:
        assert request.session is not None
        groups[request.session].append(request)
    return groups


@pytest.mark.parametrize("name", WORKLOADS)
def test_deterministic_per_seed_and_different_across_seeds(name: str) -> None:
    first = list(generate(name, requests=40, seed=7))
    assert first == list(generate(name, requests=40, seed=7))
    assert first != list(generate(name, requests=40, seed=8))
    # a shorter run is a prefix of a longer one (not in twice: its end closes the open pairs)
    if name != "twice":
        assert list(generate(name, requests=10, seed=7)) == first[:10]


@pytest.mark.parametrize("name", WORKLOADS)
def test_common_shape(name: str) -> None:
    requests = list(generate(name, requests=300, seed=1))
    assert len(requests) == 300
    assert [r.request_id for r in requests] == [f"{name}-{i}" for i in range(300)]
    arrivals = [r.arrival_s for r in requests]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    mean_gap = arrivals[-1] / (len(arrivals) - 1)
    assert mean_gap == pytest.approx(1 / RATES[name], rel=0.3)
    for request in requests[:50]:
        tokens = decode_tokens(request.prompt) + decode_tokens(request.output)
        assert min(tokens) >= 0 and max(tokens) < VOCAB_SIZE
        assert request.namespace is None
    assert all(r.prompt_len > 0 and r.output_len > 0 for r in requests)
    assert max(r.prompt_len for r in requests) <= AGENT_MAX_PROMPT


def test_generate_is_lazy_but_checks_its_arguments() -> None:
    assert inspect.isgenerator(generate("chat", requests=5))
    with pytest.raises(ConfigError) as info:
        generate("nope", requests=5)
    for name in WORKLOADS:
        assert name in str(info.value)
    with pytest.raises(ConfigError):
        generate("chat", requests=-1)
    with pytest.raises(ConfigError):
        generate("chat", requests=5, seed="1")  # type: ignore[arg-type]
    assert list(generate("chat", requests=0)) == []


def _check_sessions_grow(requests: list[Request]) -> dict[str, list[Request]]:
    """Turn k+1 of a session starts with turn k's prompt + output and adds new tokens."""
    sessions = by_session(requests)
    for turns in sessions.values():
        for before, after in pairwise(turns):
            assert after.prompt.startswith(before.prompt + before.output)
            assert after.prompt_len > before.prompt_len + before.output_len
            assert after.arrival_s >= before.arrival_s
    return sessions


def test_chat_structure() -> None:
    requests = list(generate("chat", requests=300, seed=2))
    sessions = _check_sessions_grow(requests)
    assert len(sessions) > 8  # sessions end and new ones start
    assert max(len(t) for t in sessions.values()) > 2
    system = requests[0].prompt[: CHAT_SYSTEM * 8]
    assert all(r.prompt.startswith(system) for r in requests)
    openers = [turns[0] for turns in sessions.values()]
    for a, b in pairwise(openers):
        assert lcp(a.prompt, b.prompt) == CHAT_SYSTEM  # sessions diverge right after it
    # sessions are interleaved: some session's turns are not contiguous
    order = [r.session for r in requests]
    assert any(a != b for a, b in pairwise(order))
    assert statistics.mean(r.output_len for r in requests) == pytest.approx(250, rel=0.25)


def test_agent_structure() -> None:
    requests = list(generate("agent", requests=200, seed=3))
    sessions = _check_sessions_grow(requests)
    system = requests[0].prompt[: AGENT_SYSTEM * 8]
    assert all(r.prompt.startswith(system) for r in requests)
    assert max(len(t) for t in sessions.values()) >= 10
    for turns in sessions.values():
        for before, after in pairwise(turns):
            tool = after.prompt_len - before.prompt_len - before.output_len
            assert 32 <= tool <= 6000
    assert all(16 <= r.output_len <= 512 for r in requests)
    assert max(r.prompt_len for r in requests) > 16_000


def test_shared_prefix_structure() -> None:
    requests = list(generate("shared-prefix", requests=400, seed=4))
    assert all(r.session is None for r in requests)
    groups = by_first_token(requests)
    assert 1 < len(groups) <= SHARED_PROMPTS
    sizes = sorted((len(g) for g in groups.values()), reverse=True)
    assert sizes[0] > 0.2 * len(requests) and sizes[0] > 3 * sizes[-1]  # heavy-tailed
    for group in groups.values():
        if len(group) < 2:
            continue
        system = lcp(group[0].prompt, group[1].prompt)
        assert system >= 256
        for a, b in pairwise(group):  # the suffixes are one-off: they diverge at once
            assert lcp(a.prompt, b.prompt) == system


@pytest.mark.parametrize("count", [200, 201])
def test_twice_each_prefix_exactly_twice(count: int) -> None:
    requests = list(generate("twice", requests=count, seed=5))
    groups = by_first_token(requests)  # distinct prefixes start with distinct tokens
    singles = [g for g in groups.values() if len(g) == 1]
    assert all(len(g) in (1, 2) for g in groups.values())
    if count % 2 == 0:
        assert not singles
    else:
        assert len(singles) == 1 and singles[0][0] is requests[-1]
    position = {id(r): i for i, r in enumerate(requests)}
    for group in groups.values():
        if len(group) == 2:
            first, second = group
            shared = lcp(first.prompt, second.prompt)
            assert shared >= 512  # the whole prefix, then different suffixes
            assert shared < min(first.prompt_len, second.prompt_len)
            assert 1 <= position[id(second)] - position[id(first)] <= 8  # shortly after


def test_docqa_documents_are_shared() -> None:
    requests = list(generate("docqa", requests=300, seed=6))
    groups = by_first_token(requests)
    assert len(groups) > 4
    assert sum(len(g) >= 4 for g in groups.values()) > 4
    for group in groups.values():
        if len(group) < 2:
            continue
        document = lcp(group[0].prompt, group[1].prompt)
        assert document >= 2000
        for request in group:
            assert lcp(request.prompt, group[0].prompt) >= document
            assert 8 <= request.prompt_len - document <= 256  # the question
        for a, b in pairwise(group):
            assert lcp(a.prompt, b.prompt) == document


def test_branching_shares_a_prefix_then_branches() -> None:
    requests = list(generate("branching", requests=300, seed=7))
    sessions = _check_sessions_grow(requests)
    trees: dict[str, list[list[Request]]] = defaultdict(list)
    for name, turns in sessions.items():
        tree = name.rsplit("-", 1)[0]
        trees[tree].append(turns)
    assert len(trees) > 3
    continued = 0
    for branches in trees.values():
        openers = [turns[0] for turns in branches]
        if len(openers) < 2:
            continue
        root = lcp(openers[0].prompt, openers[1].prompt)
        assert root >= 1000
        for a in openers:
            for b in openers:
                if a is not b:
                    assert lcp(a.prompt, b.prompt) == root
        for turns in branches:
            assert all(lcp(t.prompt, openers[0].prompt) >= root for t in turns)
            continued += len(turns) > 1
    assert continued > 0
    assert 2 <= max(len(b) for b in trees.values()) <= 6


def test_two_hundred_requests_are_quick() -> None:
    total = 0
    for name in WORKLOADS:
        requests = list(generate(name, requests=200, seed=0))
        total += sum(r.prompt_len for r in requests)
        typical = statistics.median(r.prompt_len for r in requests)
        assert 1000 <= typical <= 32_768
    assert total > 0
