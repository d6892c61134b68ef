"""The closed-form decode FLOPs (hycache.sim.decode_terms) against the per-sequence sum."""

from __future__ import annotations

import random

import pytest

from hycache.sim.cost import CostModel
from hycache.sim.decode_terms import EXACT_FLOAT_INTEGERS, DecodeTerms, decode_terms
from hycache.spec.model import NAMED_SPECS, ModelSpec
from tests.sim.test_cost import tiny_spec


def per_sequence(model: CostModel, contexts: list[int]) -> float:
    """The plain loop: every token's FLOPs from the spec, summed left to right from 0.0."""
    total = 0.0
    for context in contexts:
        total += model.spec.prefill_flops(context, 1) + model.lm_head_flops
    return total


def specs() -> list[ModelSpec]:
    """Every built-in spec, and hybrids with a sliding window of several sizes."""
    return [*NAMED_SPECS.values(), *(tiny_spec(window=w) for w in (1, 2, 8, 4096))]


@pytest.mark.parametrize("spec", specs(), ids=lambda s: f"{s.name}-{s.swa.window if s.swa else 0}")
def test_every_spec_has_terms_and_they_give_the_loops_float(spec: ModelSpec) -> None:
    model = CostModel(spec, "h200")
    terms = decode_terms(model._token_decode_flops, model._window)
    assert terms is not None, "every built-in spec's decode FLOPs are affine in the context"
    window = model._window
    rng = random.Random(11)
    edges = [0, 1, 2, max(0, window - 1), window, window + 1, 100_000]
    for _ in range(60):
        contexts = [rng.choice([*edges, rng.randrange(0, 300_000)]) for _ in range(33)]
        assert model.decode_flops(contexts) == per_sequence(model, contexts)
        for context in contexts[:5]:
            assert terms.at(context) == per_sequence(model, [context])
    assert model.decode_flops([]) == 0.0


def test_a_sum_past_exact_floats_is_summed_per_sequence() -> None:
    model = CostModel(ModelSpec.named("qwen3-next-80b-a3b"), "h200")
    terms = model._decode_terms
    assert terms is not None
    huge = EXACT_FLOAT_INTEGERS // terms.full  # one such context alone passes 2 ** 53
    assert terms.total([huge]) is None
    assert model.decode_flops([huge, 5]) == per_sequence(model, [huge, 5])


def test_a_negative_context_is_refused_as_the_spec_refuses_it() -> None:
    model = CostModel(tiny_spec(window=8), "h200")
    with pytest.raises(ValueError, match="context"):
        model.decode_flops([3, -1])


@pytest.mark.parametrize(
    ("flops", "window"),
    [
        (lambda c: float(c * c + 5), 0),  # quadratic
        (lambda c: 7.0 + 3 * c + 0.5, 0),  # not integer-valued
        (lambda c: float(10 + 2 * c + 5 * min(c, 9)), 4),  # a window other than the spec's
        (lambda c: float(10 + 2 * c + (1000 if c > 50_000 else 0)), 0),  # a step far out
    ],
)
def test_a_function_not_of_the_form_gets_no_terms(flops, window) -> None:  # type: ignore[no-untyped-def]
    assert decode_terms(flops, window) is None


def test_terms_of_a_windowed_function() -> None:
    terms = decode_terms(lambda c: float(10 + 2 * c + 5 * min(c + 1, 8)), 8)
    assert terms == DecodeTerms(base=15, full=2, window_slope=5, window=8)
    assert terms.total([0, 6, 7, 8, 100]) == float(
        sum(10 + 2 * c + 5 * min(c + 1, 8) for c in (0, 6, 7, 8, 100))
    )


def test_a_wrong_term_is_caught_by_the_loop_comparison() -> None:
    """The comparison the tests above rely on fails for terms off by one at the window edge."""
    model = CostModel(tiny_spec(window=8), "h200")
    terms = model._decode_terms
    assert terms is not None
    wrong = DecodeTerms(terms.base, terms.full, terms.window_slope, terms.window + 1)
    contexts = [0, 7, 8, 9, 20]
    assert wrong.total(contexts) != per_sequence(model, contexts)
    assert terms.total(contexts) == per_sequence(model, contexts)
