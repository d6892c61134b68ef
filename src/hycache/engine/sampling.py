"""How the engine picks the next token from the logits: greedy, or sampled with a seed.

``Sampling`` is plain data carried by an ``EngineRequest`` (None: greedy); ``make_picker``
turns it into the per-request function the engine calls on each logits vector. Greedy is
``argmax`` exactly as before sampling existed, so ``hycache verify`` is unchanged. Sampling
draws from ``softmax(logits / temperature)`` restricted to the top-p nucleus with a
``torch.Generator`` seeded by ``seed``: the same request with the same seed returns the same
tokens, wherever and however interleaved it runs. Importing this module does not import torch.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hycache.errors import ConfigError

if TYPE_CHECKING:
    import torch

Picker = Callable[["torch.Tensor"], int]


@dataclass(frozen=True)
class Sampling:
    """Sampled decoding: ``temperature`` > 0 (0 means greedy), ``top_p`` in (0, 1], ``seed``
    (None: a fresh random seed per request). ConfigError on values out of range."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not math.isfinite(self.top_p) or not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise ConfigError(f"seed must be in [0, 2**63), got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def greedy_pick(logits: torch.Tensor) -> int:
    """The index of the largest logit (ties: the first)."""
    import torch

    return int(torch.argmax(logits))


def make_picker(sampling: Sampling | None) -> Picker:
    """The token picker of one request: greedy for None or temperature 0, else seeded
    sampling with its own generator (state kept across the request's tokens)."""
    if sampling is None or sampling.greedy:
        return greedy_pick
    import torch

    generator = torch.Generator(device="cpu")
    seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
    generator.manual_seed(seed)
    temperature = sampling.temperature
    top_p = sampling.top_p

    def pick(logits: torch.Tensor) -> int:
        probs = torch.softmax(logits.to(torch.float64) / temperature, dim=-1)
        if top_p < 1:
            ordered, order = torch.sort(probs, descending=True)
            before = torch.cumsum(ordered, dim=-1) - ordered
            ordered[before >= top_p] = 0  # the nucleus: the smallest head reaching top_p
            probs = torch.zeros_like(probs).scatter_(-1, order, ordered)
        return int(torch.multinomial(probs, 1, generator=generator))

    return pick
