"""The draft proposer of speculative decoding: prompt lookup (n-gram matching).

``SpecDecode`` is the setting (``--spec-decode ngram:K``); ``propose`` looks for the last ``n``
tokens of the context (``n`` from ``max_ngram`` down to ``min_ngram``) earlier in the same
context and proposes the (up to) ``k`` tokens that followed the most recent earlier
occurrence. No model runs: the drafts cost nothing, and they are right exactly when the text
repeats itself (quoted prompt text, or the loops greedy decoding of a small model falls into).
A context without a match gets no draft, and the engine decodes one token plainly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hycache.errors import ConfigError

DRAFTERS = ("ngram",)


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding with a prompt-lookup drafter proposing up to ``k`` tokens per
    verification, matching suffixes of ``max_ngram`` down to ``min_ngram`` tokens."""

    k: int
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"speculative decoding needs k >= 1 draft tokens, got {self.k}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ConfigError(
                f"n-gram sizes must satisfy 1 <= min <= max, got {self.min_ngram}..{self.max_ngram}"
            )

    @property
    def label(self) -> str:
        return f"ngram:{self.k}"


def parse_spec_decode(text: str) -> SpecDecode:
    """``"ngram:K"`` -> ``SpecDecode(K)``; ConfigError naming the expected form otherwise."""
    name, sep, count = text.partition(":")
    if name not in DRAFTERS or not sep:
        raise ConfigError(
            f"--spec-decode: expected ngram:K (K draft tokens per step), got {text!r}"
        )
    try:
        k = int(count)
    except ValueError:
        raise ConfigError(f"--spec-decode: K must be an integer, got {count!r}") from None
    if not 1 <= k <= 64:
        raise ConfigError(f"--spec-decode: K must be in [1, 64], got {k}")
    return SpecDecode(k)


def propose(context: Sequence[int], spec: SpecDecode, limit: int) -> list[int]:
    """Up to ``min(spec.k, limit)`` draft tokens continuing ``context``: what followed the
    most recent earlier occurrence of its longest matching suffix (empty: no match)."""
    want = min(spec.k, limit)
    if want <= 0:
        return []
    size = len(context)
    for n in range(min(spec.max_ngram, size - 1), spec.min_ngram - 1, -1):
        suffix = list(context[size - n :])
        # an earlier occurrence, with at least one token after it (it may overlap the suffix)
        for start in range(size - n - 1, -1, -1):
            if list(context[start : start + n]) == suffix:
                follow = context[start + n : start + n + want]
                return list(follow)
    return []
