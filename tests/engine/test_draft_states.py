"""Per-draft-step states: one verification forward against token-by-token decoding."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from hycache.engine.draft_states import StepRecorder, snapshot
from hycache.engine.model import LoadedModel

PROMPT = list(range(3, 40))
FED = [7, 8, 9, 10, 11]


def _max_delta(a: tuple[torch.Tensor | None, ...], b: tuple[torch.Tensor | None, ...]) -> float:
    return max(
        (
            float((x - y).abs().max())
            for x, y in zip(a, b, strict=True)
            if x is not None and y is not None
        ),
        default=0.0,
    )


@pytest.mark.parametrize("arch", ["qwen3_next", "nemotron_h"])
def test_one_forward_keeps_the_state_after_every_fed_token(
    models: Callable[[str], LoadedModel], arch: str
) -> None:
    model = models(arch)
    recorder = StepRecorder(model)
    assert set(recorder.mixers) == set(model.layout.recurrent_layers)
    dc = model.new_cache()
    model.forward(dc, PROMPT, 0)
    verification = recorder.verify(dc, FED, len(PROMPT))
    assert verification.logits.shape[0] == len(FED) and len(verification.steps) == len(FED)
    plain = model.new_cache()
    model.forward(plain, PROMPT, 0)
    for i, token in enumerate(FED):
        logits = model.forward(plain, [token], len(PROMPT) + i)
        assert float((logits - verification.logits[i]).abs().max()) < 1e-5
        for index, state in verification.steps[i].items():
            expected = snapshot(plain.layers[index])
            assert _max_delta(state.conv, expected.conv) < 1e-5
            assert _max_delta(state.rec, expected.rec) < 1e-5


@pytest.mark.parametrize("arch", ["qwen3_next", "gemma3"])
def test_copy_back_and_rollback_leave_the_cache_of_the_kept_tokens(
    models: Callable[[str], LoadedModel], arch: str
) -> None:
    """Keep two of five fed tokens: the cache then computes what a run that only ever saw
    those two computes (gemma3: no recurrent layer, only the KV rollback)."""
    model = models(arch)
    recorder = StepRecorder(model)
    dc = model.new_cache()
    model.forward(dc, PROMPT, 0)
    verification = recorder.verify(dc, FED, len(PROMPT))
    recorder.copy_back(dc, verification.steps[1])
    recorder.rollback_kv(dc, len(FED) - 2)
    for attn in model.layout.attention:
        assert dc.layers[attn.index].keys.shape[-2] == len(PROMPT) + 2
    reference = model.new_cache()
    model.forward(reference, PROMPT + FED[:2], 0)
    got = model.forward(dc, [42, 43], len(PROMPT) + 2)
    want = model.forward(reference, [42, 43], len(PROMPT) + 2)
    assert float((got - want).abs().max()) < 1e-5
