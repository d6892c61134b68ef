"""Speculative decoding in the engine: same tokens as plain greedy decoding, nothing of a
rejected draft token in the cache, and ``wrong-accept-step`` caught."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from hycache.cache.presets import build_cache
from hycache.engine.drafter import SpecDecode, reference_drafter
from hycache.engine.engine import Engine, EngineRequest, RequestResult
from hycache.engine.model import LoadedModel
from hycache.engine.verify import default_capacity, verify_cell
from hycache.engine.workloads import SessionSource, generate_turns
from hycache.errors import ConfigError
from hycache.tree.keys import decode_tokens

TOL = 1e-4


def spec_engine(model: LoadedModel, policy: str, inject: str | None = None) -> Engine:
    """An engine decoding with reference drafts: the plain greedy continuation with the draft
    token at a rotating index wrong, so every acceptance length 0..k occurs."""
    cache = build_cache(model.spec, default_capacity(model.spec), policy, track_ids=True)
    spec = SpecDecode(4, drafter="oracle")
    engine = Engine(model, cache, max_running=2, inject=inject, spec_decode=spec)
    cold: dict[tuple[int, ...], list[int]] = {}

    def reference(request: EngineRequest) -> list[int]:
        if request.prompt not in cold:
            cold[request.prompt] = engine.run_cold(request.prompt, request.max_new_tokens).output
        return cold[request.prompt]

    assert engine.spec is not None
    engine.spec.drafter = reference_drafter(reference)
    return engine


def chat_run(engine: Engine, requests: int = 8, tokens: int = 10) -> list[RequestResult]:
    vocab = engine.model.vocab_size
    turns = [
        replace(t, max_new_tokens=tokens)
        for t in generate_turns("chat", requests=requests, seed=0, vocab=vocab)
    ]
    results = engine.run(SessionSource(turns))
    assert all(r.status == "done" for r in results)
    return results


def max_delta(result: RequestResult, cold: RequestResult) -> float:
    return max(float((a - b).abs().max()) for a, b in zip(result.logits, cold.logits, strict=True))


@pytest.mark.parametrize(("arch", "policy"), [("qwen3_next", "hycache"), ("nemotron_h", "sglang")])
def test_speculative_decoding_emits_the_plain_greedy_tokens(
    models: Callable[[str], LoadedModel], arch: str, policy: str
) -> None:
    engine = spec_engine(models(arch), policy)
    for result in chat_run(engine):
        cold = engine.run_cold(result.request.prompt, result.request.max_new_tokens)
        assert result.output == cold.output
        assert len(result.logits) == len(result.output) and max_delta(result, cold) < TOL
    assert engine.spec is not None
    stats = engine.spec.stats
    assert stats.accepted > 0 and stats.drafted > stats.accepted and stats.verifications > 0
    assert engine.cache.stats().reused_tokens > 0
    assert engine.faults.stored == engine.faults.fired == 0


def cached_sequences(engine: Engine) -> list[tuple[str | None, tuple[int, ...], int | None]]:
    """(namespace, tokens from the root, state slot or None) of every node in the tree."""
    cache = engine.cache
    rec = cache.recurrent
    found = []
    for node in cache.tree.iter_nodes():
        tokens = tuple(t for n in node.path_from_root() for t in decode_tokens(n.key))
        slot = node.data[rec.slot] if rec is not None else None
        found.append((node.namespace, tokens, slot))
    return found


def stale_states(engine: Engine, results: list[RequestResult]) -> int:
    """Checks the tree after a run: every cached token sequence is a prefix of some request's
    prompt + emitted tokens fed back (no rejected draft token), and counts the cached states
    that differ from a cold run's state after the same tokens."""
    fed = [(r.request.namespace, r.request.prompt + tuple(r.output[:-1])) for r in results]
    stale = checked = 0
    slots = engine.store.slots
    assert slots is not None
    for namespace, tokens, slot in cached_sequences(engine):
        assert any(ns == namespace and seq[: len(tokens)] == tokens for ns, seq in fed)
        if slot is None:
            continue
        dc = engine.model.new_cache()
        engine.model.forward(dc, list(tokens), 0)
        want_conv, want_rec = engine.transfer.read_state(dc)
        got_conv, got_rec = slots.read(slot)
        pairs = zip([*want_conv, *want_rec], [*got_conv, *got_rec], strict=True)
        delta = max(float((a - b).abs().max()) for a, b in pairs if a is not None and b is not None)
        checked += 1
        stale += delta > TOL
    assert checked > 0
    return stale


def test_no_state_of_a_rejected_token_reaches_the_cache(
    models: Callable[[str], LoadedModel],
) -> None:
    engine = spec_engine(models("qwen3_next"), "hycache")
    results = chat_run(engine)
    longest = max(len(r.request.prompt) for r in results)
    ends = [len(tokens) for _, tokens, slot in cached_sequences(engine) if slot is not None]
    assert max(ends) > longest - 10  # states from decoding (end-of-request states) are there
    assert stale_states(engine, results) == 0


def test_copying_back_the_step_after_the_accepted_one_is_caught(
    models: Callable[[str], LoadedModel],
) -> None:
    engine = spec_engine(models("qwen3_next"), "hycache", inject="wrong-accept-step")
    results = chat_run(engine)
    deltas = [
        max_delta(r, engine.run_cold(r.request.prompt, r.request.max_new_tokens)) for r in results
    ]
    assert max(deltas) > TOL
    assert engine.faults.stored > 0 and 0 < engine.faults.fired <= len(results)
    assert stale_states(engine, results) > 0  # and the wrong states reached the cache


def test_wrong_accept_step_needs_speculative_decoding(
    models: Callable[[str], LoadedModel],
) -> None:
    model = models("qwen3_next")
    cache = build_cache(model.spec, default_capacity(model.spec), "hycache", track_ids=True)
    with pytest.raises(ConfigError, match="--spec-decode"):
        Engine(model, cache, inject="wrong-accept-step")
    engine = Engine(model, cache, spec_decode=SpecDecode(2, drafter="oracle"))
    with pytest.raises(ConfigError, match="reference run"):  # nobody set the reference
        engine.run([EngineRequest(tuple(range(3, 40)), 4)])


def test_prompt_lookup_in_verify_matches_plain_decoding(
    models: Callable[[str], LoadedModel],
) -> None:
    """The n-gram drafter on a chat workload: drafts are proposed, those of the retry turn
    (a re-asked question, whose earlier answer the model largely repeats) partly accepted;
    every request still equals its plain greedy run."""
    model = models("nemotron_h")
    spec = SpecDecode(4)
    cell = verify_cell(
        model, "nemotron_h", "hycache", "chat", requests=10, seed=0, spec_decode=spec
    )
    assert cell.passed and cell.drafted > cell.accepted > 0 and cell.reused_tokens > 0
