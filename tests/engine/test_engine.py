"""The engine on real tiny models: cached runs match cold runs, memory stays in budget."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine, EngineRequest, RequestResult
from hycache.engine.model import LoadedModel
from hycache.engine.verify import POLICIES, compare, default_capacity, verify_cell
from hycache.errors import ConfigError

VERIFIED = ("qwen3_next", "qwen3_5", "kimi_linear", "nemotron_h", "bamba", "gemma3")
KNOBS: dict[str, dict[str, object]] = {
    "vllm": {"max_num_batched_tokens": 48},
    "sglang": {"chunked_prefill_size": 48},
    "marconi": {},
    "hycache": {"token_budget": 48},
}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("arch", VERIFIED)
def test_verify_matrix(arch: str, policy: str, models: Callable[[str], LoadedModel]) -> None:
    """Every architecture with every preset: reuse happens, entries get evicted, and every
    request matches its cold run."""
    workload = ("chat", "branching", "docqa")[VERIFIED.index(arch) % 3]
    cell = verify_cell(models(arch), arch, policy, workload, requests=10, seed=1, chunk=48)
    assert cell.passed, cell.details + cell.violations
    assert cell.reused_tokens > 0 and cell.requests_hit > 0
    assert cell.failed == 0 and cell.max_delta <= 1e-4
    assert cell.peak_bytes <= cell.budget_bytes


def _prompt(rng: random.Random, n: int) -> tuple[int, ...]:
    return tuple(rng.randrange(3, 1024) for _ in range(n))


def _check(engine: Engine, results: list[RequestResult]) -> None:
    for result in results:
        assert result.status == "done", result.error
        cold = engine.run_cold(result.request.prompt, result.request.max_new_tokens)
        delta, mismatches, _ties, note = compare(result, cold, 1e-4)
        assert delta <= 1e-4 and not mismatches, note
        assert not result.violations


def test_tight_budget_waits_evicts_and_stays_correct(
    models: Callable[[str], LoadedModel],
) -> None:
    """Three requests in flight in a budget that holds about two: some wait, entries are
    evicted and page/slot ids reused; every request still matches its cold run and the pool
    never exceeds its budget (checked after every request by the engine)."""
    model = models("qwen3_next")
    spec = model.spec
    budget = spec.kv_bytes_per_token * 420 + spec.state_bytes * 9
    knobs = {"chunked_prefill_size": 40, "strategy": "no_buffer"}
    cache = build_cache(spec, budget, "sglang", **knobs)
    engine = Engine(model, cache, max_running=3, check_tree=True)
    rng = random.Random(5)
    base = _prompt(rng, 120)
    requests = [
        EngineRequest(base[: rng.randrange(30, 120)] + _prompt(rng, rng.randrange(5, 60)), 3)
        for _ in range(14)
    ]
    results = engine.run(requests)
    assert len(results) == 14
    assert sum(r.waits for r in results) > 0
    stats = cache.stats()
    assert sum(stats.evictions.values()) > 0 and stats.reused_tokens > 0
    assert stats.peak_bytes <= stats.budget_bytes
    _check(engine, results)


def test_request_that_cannot_fit_fails_cleanly(models: Callable[[str], LoadedModel]) -> None:
    model = models("bamba")
    spec = model.spec
    budget = spec.kv_bytes_per_token * 200 + spec.state_bytes * 3
    cache = build_cache(spec, budget, "hycache", token_budget=32, page_size=16)
    engine = Engine(model, cache, check_tree=True)
    rng = random.Random(2)
    small = _prompt(rng, 70)
    huge = _prompt(rng, 600)
    requests = [
        EngineRequest(small, 2, rid="a"),
        EngineRequest(huge, 2, rid="huge"),
        EngineRequest(small + _prompt(rng, 20), 2, rid="b"),
    ]
    results = {r.request.rid: r for r in engine.run(requests)}
    assert results["huge"].status == "failed"
    assert "can never hold it" in (results["huge"].error or "")
    assert results["b"].hit == 64  # a's prompt-end state survived the failed request
    _check(engine, [results["a"], results["b"]])
    assert cache.pool.used_bytes <= budget
    cache.check_integrity()


def test_copy_on_write_leaves_the_cached_state_untouched(
    models: Callable[[str], LoadedModel],
) -> None:
    """Two requests in flight resume from the same cached state: each works on a clone."""
    model = models("qwen3_5")
    cache = build_cache(model.spec, default_capacity(model.spec), "hycache", page_size=16)
    engine = Engine(model, cache, max_running=2)
    rng = random.Random(7)
    shared = _prompt(rng, 64)
    engine.run([EngineRequest((*shared, 5), 1)])  # state at 64 (prompt end)
    assert cache.lookup((*shared, 9, 9))[0] == 64
    slots = engine.store.slots
    assert slots is not None
    slot = next(
        n.data[cache.recurrent.slot]
        for n in cache.tree.iter_nodes()
        if cache.recurrent is not None and n.end == 64 and cache.recurrent.has(n)
    )
    before = [None if t is None else t[slot].clone() for t in slots.rec]
    results = engine.run(
        [EngineRequest(shared + _prompt(rng, 30), 4), EngineRequest(shared + _prompt(rng, 9), 4)]
    )
    assert [r.hit for r in results] == [64, 64]
    after = [None if t is None else t[slot] for t in slots.rec]
    for a, b in zip(before, after, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)
    _check(engine, results)


def test_namespaces_never_share(models: Callable[[str], LoadedModel]) -> None:
    model = models("gemma3")
    cache = build_cache(model.spec, default_capacity(model.spec), "sglang")
    engine = Engine(model, cache)
    prompt = _prompt(random.Random(1), 80)
    results = engine.run(
        [
            EngineRequest(prompt, 2, namespace="a"),
            EngineRequest(prompt, 2, namespace="b"),
            EngineRequest(prompt, 2, namespace="a"),
        ]
    )
    assert [r.hit for r in results] == [0, 0, 79]
    _check(engine, results)


def test_multi_turn_reuses_decoded_tokens(models: Callable[[str], LoadedModel]) -> None:
    """The next turn resumes past the previous turn's output (its KV and end state)."""
    model = models("nemotron_h")
    cache = build_cache(model.spec, default_capacity(model.spec), "marconi")
    engine = Engine(model, cache)
    rng = random.Random(3)
    first = _prompt(rng, 57)
    (turn1,) = engine.run([EngineRequest(first, 6)])
    history = first + tuple(turn1.output)
    (turn2,) = engine.run([EngineRequest(history + _prompt(rng, 11), 3)])
    assert turn2.hit == len(first) + 5  # everything fed back: prompt + 5 of 6 outputs
    _check(engine, [turn1, turn2])


def test_bad_requests(models: Callable[[str], LoadedModel]) -> None:
    model = models("gemma3")
    cache = build_cache(model.spec, default_capacity(model.spec), "hycache")
    engine = Engine(model, cache, max_running=2)
    with pytest.raises(ConfigError, match="token ids"):
        engine.run([EngineRequest((1, 2, 3), 2), EngineRequest((1, 5000), 1)])
    assert not engine.cache.requests_in_flight()  # the request in flight was aborted
    engine.cache.check_integrity()
    with pytest.raises(ConfigError, match="at least one token"):
        engine.run([EngineRequest((1, 2), 0)])
    with pytest.raises(ConfigError, match="inject"):
        Engine(model, build_cache(model.spec, 10**6, "hycache"), inject="bogus")
    with pytest.raises(ConfigError, match="unit kinds"):
        Engine(model, build_cache(models("bamba").spec, 10**6, "hycache"))
