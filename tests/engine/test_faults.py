"""``FaultCountingEngine``: what an injected fault stored, and how many hits read it."""

from __future__ import annotations

from collections.abc import Callable

from hycache.cache.presets import build_cache
from hycache.engine.faults import FaultCountingEngine
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
    engine = FaultCountingEngine(model, cache, max_running=2)
    turns = generate_turns("chat", requests=10, seed=0, vocab=model.vocab_size)
    results = engine.run(SessionSource(turns))
    assert all(r.status == "done" for r in results) and cache.stats().reused_tokens > 0
    assert engine.stored == engine.fired == 0


def test_every_read_of_a_stale_page_fires(models: Callable[[str], LoadedModel]) -> None:
    model = models("gemma3")
    cache = build_cache(model.spec, default_capacity(model.spec), "sglang", track_ids=True)
    engine = FaultCountingEngine(model, cache, max_running=2, inject="stale-tail")
    turns = generate_turns("chat", requests=16, seed=0, vocab=model.vocab_size)
    results = engine.run(SessionSource(turns))
    hits = sum(r.hit > 0 for r in results)
    assert 0 < engine.fired <= hits and engine.stored > 0
