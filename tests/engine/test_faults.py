"""The engine's fault log: what an injected fault stored, and how many hits read it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine, EngineRequest
from hycache.engine.model import LoadedModel
from hycache.engine.verify import default_capacity, verify_cell
from hycache.engine.workloads import SessionSource, generate_turns


def test_stored_but_never_read_is_not_fired(models: Callable[[str], LoadedModel]) -> None:
    """sglang (no_buffer) keeps every late-snapshot state, yet this short chat only resumes
    from the correctly written end-of-request states: the fault is stored, never fired, and
    the run (rightly) finds no difference."""
    cell = verify_cell(
        models("qwen3_next"),
        "qwen3_next",
        "sglang",
        "chat",
        requests=8,
        seed=0,
        inject="late-snapshot",
        knobs={"strategy": "no_buffer"},
    )
    assert cell.stored > 0 and cell.fired == 0 and cell.passed and cell.reused_tokens > 0


def test_counts_stay_zero_without_a_fault(models: Callable[[str], LoadedModel]) -> None:
    model = models("gemma3")
    cache = build_cache(model.spec, default_capacity(model.spec), "sglang", track_ids=True)
    engine = Engine(model, cache, max_running=2)
    turns = generate_turns("chat", requests=10, seed=0, vocab=model.vocab_size)
    results = engine.run(SessionSource(turns))
    assert all(r.status == "done" for r in results) and cache.stats().reused_tokens > 0
    assert engine.faults.stored == engine.faults.fired == 0


def test_every_read_of_a_stale_page_fires(models: Callable[[str], LoadedModel]) -> None:
    model = models("gemma3")
    cache = build_cache(model.spec, default_capacity(model.spec), "sglang", track_ids=True)
    engine = Engine(model, cache, max_running=2, inject="stale-tail")
    turns = generate_turns("chat", requests=16, seed=0, vocab=model.vocab_size)
    results = engine.run(SessionSource(turns))
    hits = sum(r.hit > 0 for r in results)
    assert 0 < engine.faults.fired <= hits and engine.faults.stored > 0


def overlapping_requests(vocab: int) -> list[EngineRequest]:
    """A decodes long after publishing its 256-token prompt; B keeps the second running slot
    busy until A has published; C then shares A's whole prompt while A still decodes."""
    shared = tuple(range(3, 259))
    return [
        EngineRequest(shared, 48),
        EngineRequest(tuple(range(300, 332)), 24),
        EngineRequest((*shared, *range(400, 420)), 4),
    ]


@pytest.mark.parametrize("inject", [None, "unwritten-publish"])
def test_a_published_prompt_is_read_before_its_owner_finishes(
    models: Callable[[str], LoadedModel], inject: str | None
) -> None:
    """Without the fault C reuses A's published prompt exactly; with ``unwritten-publish`` it
    reads pages A never wrote: the fault fires and the owner-tag checker reports it."""
    model = models("qwen3_next")
    budget = default_capacity(model.spec) * 4
    cache = build_cache(model.spec, budget, "hycache", track_ids=True)
    engine = Engine(model, cache, max_running=2, inject=inject)
    results = {r.request.prompt: r for r in engine.run(overlapping_requests(model.vocab_size))}
    third = results[overlapping_requests(model.vocab_size)[2].prompt]
    assert third.hit >= 255 and cache.stats().published_reused_tokens > 0
    if inject is None:
        cold = engine.run_cold(third.request.prompt, third.request.max_new_tokens)
        assert third.output == cold.output and not third.violations
        assert engine.faults.stored == engine.faults.fired == 0
    else:
        assert engine.faults.stored > 0 and engine.faults.fired == 1
        assert any("another prefix" in v for v in third.violations)


def test_published_prefixes_are_reused_before_their_owner_finishes(
    models: Callable[[str], LoadedModel],
) -> None:
    """Without a fault the publish path and the in-place reads are exercised and exact."""
    cell = verify_cell(models("qwen3_next"), "qwen3_next", "hycache", "docqa", requests=30, seed=0)
    assert cell.passed and cell.published_tokens > 0 and cell.in_place_tokens > 0
