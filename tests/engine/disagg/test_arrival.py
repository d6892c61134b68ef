"""Landing pages: partially filled pages get their tails zeroed; dirty tails are found."""

from __future__ import annotations

from collections.abc import Callable

import torch

from hycache.engine.disagg.arrival import LandingPages
from hycache.engine.disagg.payload import Arrived
from hycache.engine.model import LoadedModel


def _arrived(model: LoadedModel, lo: int, hi: int) -> Arrived:
    full = model.layout.attention_of("full")
    keys = tuple(torch.randn(hi - lo, *a.k_shape) for a in full)
    values = tuple(torch.randn(hi - lo, *a.v_shape) for a in full)
    return Arrived(lo, hi, keys, values, None, None)


def test_tails_zeroed_on_arrival(models: Callable[[str], LoadedModel]) -> None:
    model = models("qwen3_next")
    landing = LandingPages(model, 16)
    landing.land(_arrived(model, 0, 45))  # fills pages 0-2 with a request's data
    second = _arrived(model, 16, 37)  # [16, 37): the first page's head, the last one's tail
    keys, _, ids = landing.land(second)
    assert ids == [0, 1]
    assert torch.equal(keys[0], second.keys[0])
    assert landing.dirty(second) == []


def test_untouched_tails_are_dirty(models: Callable[[str], LoadedModel]) -> None:
    model = models("qwen3_next")
    landing = LandingPages(model, 16, zero_tail=False)
    landing.land(_arrived(model, 0, 48))
    second = _arrived(model, 0, 20)
    landing.land(second)
    assert landing.dirty(second) == [1]
