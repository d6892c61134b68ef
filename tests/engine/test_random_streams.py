"""Hypothesis-driven request streams on real tiny models: shared prefixes, branches at
unaligned points, retries, multi-turn continuations, namespaces, several requests in flight,
tight and roomy budgets, every preset. Every request must match its cold run exactly (to
1e-4 in float32), read no stale or misfiled data, and keep the pool within its budget."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine
from hycache.engine.model import LoadedModel
from hycache.engine.verify import POLICIES, compare
from hycache.engine.workloads import SessionSource, Turn

EXAMPLES = int(os.environ.get("HYCACHE_ENGINE_EXAMPLES", "35"))


@dataclass(frozen=True)
class Stream:
    policy: str
    knobs: dict[str, object]
    kv_tokens: int
    states: int
    max_running: int
    seed: int
    ops: tuple[tuple[object, ...], ...]


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    policy = draw(st.sampled_from(POLICIES))
    chunk = draw(st.sampled_from([None, 7, 16, 37]))
    knobs: dict[str, object] = {}
    if policy == "vllm":
        knobs = {"max_num_batched_tokens": chunk}
        knobs["retention_interval"] = draw(st.sampled_from([0, None, 64]))
    elif policy == "sglang":
        knobs = {"chunked_prefill_size": chunk}
    elif policy == "hycache":
        knobs = {"token_budget": chunk, "page_size": draw(st.sampled_from([1, 4, 16]))}
    elif policy == "marconi":
        knobs = {"page_size": draw(st.sampled_from([1, 2]))}
    ops: list[tuple[object, ...]] = []
    fresh: list[int] = []  # indexes of turns whose tokens are known up front
    for i in range(draw(st.integers(3, 9))):
        kinds = ["new"] + (["branch", "branch", "retry", "continue", "continue"] if fresh else [])
        kind = draw(st.sampled_from(kinds))
        ns = draw(st.sampled_from([None, None, "t"]))
        out = draw(st.integers(1, 5))
        if kind == "new":
            ops.append(("new", draw(st.integers(2, 120)), ns, out))
            fresh.append(i)
        elif kind == "branch":
            ref = draw(st.sampled_from(fresh))
            cut = draw(st.floats(0.1, 1.0))
            ops.append(("branch", ref, cut, draw(st.integers(1, 40)), ns, out))
            fresh.append(i)
        elif kind == "retry":
            ops.append(("retry", draw(st.sampled_from(fresh)), out))
        else:
            ops.append(("continue", draw(st.sampled_from(fresh)), draw(st.integers(1, 30)), out))
    return Stream(
        policy,
        knobs,
        kv_tokens=draw(st.sampled_from([180, 300, 500, 3000])),
        states=draw(st.sampled_from([3, 5, 8, 30])),
        max_running=draw(st.sampled_from([1, 1, 2, 3])),
        seed=draw(st.integers(0, 2**16)),
        ops=tuple(ops),
    )


def build_turns(stream: Stream, vocab: int) -> list[Turn]:
    rng = random.Random(stream.seed)
    tokens: dict[int, tuple[int, ...]] = {}
    namespaces: dict[int, str | None] = {}
    turns = []
    for i, op in enumerate(stream.ops):
        kind = op[0]
        if kind == "new":
            _, length, ns, out = op
            assert isinstance(length, int)
            tokens[i] = tuple(rng.randrange(3, vocab) for _ in range(length))
            namespaces[i] = ns if isinstance(ns, str) else None
            turns.append(Turn(f"r{i}", tokens[i], int(str(out)), f"s{i}", False, namespaces[i]))
        elif kind == "branch":
            _, ref, cut, extra, ns, out = op
            base = tokens[int(str(ref))]
            keep = max(1, int(len(base) * float(str(cut))))
            suffix = tuple(rng.randrange(3, vocab) for _ in range(int(str(extra))))
            tokens[i] = base[:keep] + suffix
            namespaces[i] = ns if isinstance(ns, str) else None
            turns.append(Turn(f"r{i}", tokens[i], int(str(out)), f"s{i}", False, namespaces[i]))
        elif kind == "retry":
            _, ref, out = op
            r = int(str(ref))
            turns.append(Turn(f"r{i}", tokens[r], int(str(out)), None, False, namespaces[r]))
        else:
            _, ref, extra, out = op
            r = int(str(ref))
            suffix = tuple(rng.randrange(3, vocab) for _ in range(int(str(extra))))
            turns.append(Turn(f"r{i}", suffix, int(str(out)), f"s{r}", True, namespaces[r]))
    return turns


def check_stream(model: LoadedModel, stream: Stream) -> None:
    spec = model.spec
    budget = spec.kv_bytes_per_token * stream.kv_tokens + spec.state_bytes * stream.states
    cache = build_cache(spec, budget, stream.policy, **stream.knobs)
    engine = Engine(model, cache, max_running=stream.max_running, check_tree=True)
    source = SessionSource(build_turns(stream, model.vocab_size))
    results = engine.run(source)  # the engine asserts the budget after every request
    assert len(results) == len(stream.ops)
    reused = 0
    for result in results:
        if result.status != "done":
            # only a request that can never fit may fail, and it fails cleanly
            assert "can never hold it" in (result.error or ""), result.error
            event("a request could not fit")
            continue
        reused += result.hit
        cold = engine.run_cold(result.request.prompt, result.request.max_new_tokens)
        delta, mismatches, _ties, problem = compare(result, cold, 1e-4)
        note(f"{result.request.rid} hit {result.hit}/{len(result.request.prompt)} d={delta:.1e}")
        assert delta <= 1e-4 and not mismatches, problem
        assert not result.violations, result.violations
    assert cache.pool.used_bytes <= cache.pool.budget_bytes
    cache.check_integrity()
    event(f"reused tokens: {'some' if reused else 'none'}")
    event(f"evictions: {'some' if sum(cache.stats().evictions.values()) else 'none'}")


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3_next", "bamba"])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(stream=streams())
def test_random_streams_match_cold_runs(
    arch: str, stream: Stream, models: Callable[[str], LoadedModel]
) -> None:
    check_stream(models(arch), stream)
