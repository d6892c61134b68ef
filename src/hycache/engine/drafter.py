"""The draft proposer of speculative decoding: prompt lookup (n-gram matching).

``SpecDecode`` is the setting (``--spec-decode ngram:K``); ``propose`` looks for the last ``n``
tokens of the context (``n`` from ``max_ngram`` down to ``min_ngram``) earlier in the same
context and proposes the (up to) ``k`` tokens that followed the most recent earlier
occurrence. No model runs: the drafts cost nothing, and they are right exactly when the text
repeats itself (quoted prompt text, or the loops greedy decoding of a small model falls into).
A context without a match gets no draft, and the engine decodes one token plainly.

``oracle:K`` is a verification device, not a drafter a server would run: ``reference_drafter``
proposes the continuation of a reference run (``hycache verify``: the plain greedy cold run)
with the draft token at a rotating index replaced, so the verifier sees every acceptance length
from 0 to ``k``. The drafts only decide which tokens are fed together; every emitted token and
logit still comes from the speculative run itself and is compared with the reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hycache.errors import ConfigError

if TYPE_CHECKING:
    from hycache.engine.request import EngineRequest

DRAFTERS = ("ngram", "oracle")

#: proposes up to ``limit`` draft tokens for ``request`` continuing ``context`` (prompt + output)
Drafter = Callable[["EngineRequest", Sequence[int], int], list[int]]


@dataclass(frozen=True)
class SpecDecode:
    """Speculative decoding with a prompt-lookup drafter proposing up to ``k`` tokens per
    verification, matching suffixes of ``max_ngram`` down to ``min_ngram`` tokens
    (``drafter="oracle"``: reference drafts, which the caller supplies)."""

    k: int
    drafter: str = "ngram"
    max_ngram: int = 3
    min_ngram: int = 1

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ConfigError(f"speculative decoding needs k >= 1 draft tokens, got {self.k}")
        if self.drafter not in DRAFTERS:
            raise ConfigError(f"unknown drafter {self.drafter!r}; known: {', '.join(DRAFTERS)}")
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ConfigError(
                f"n-gram sizes must satisfy 1 <= min <= max, got {self.min_ngram}..{self.max_ngram}"
            )

    @property
    def label(self) -> str:
        return f"{self.drafter}:{self.k}"


def parse_spec_decode(text: str) -> SpecDecode:
    """``"ngram:K"`` -> ``SpecDecode(K)`` (``"oracle:K"``: reference drafts); ConfigError
    naming the expected form otherwise."""
    name, sep, count = text.partition(":")
    if name not in DRAFTERS or not sep:
        raise ConfigError(
            f"--spec-decode: expected ngram:K or oracle:K (K draft tokens per step), got {text!r}"
        )
    try:
        k = int(count)
    except ValueError:
        raise ConfigError(f"--spec-decode: K must be an integer, got {count!r}") from None
    if not 1 <= k <= 64:
        raise ConfigError(f"--spec-decode: K must be in [1, 64], got {k}")
    return SpecDecode(k, drafter=name)


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


def reference_drafter(reference: Callable[[EngineRequest], Sequence[int]]) -> Drafter:
    """Drafts from ``reference(request)`` (the tokens a reference run emitted for the same
    request), the draft token at index ``step % (limit + 1)`` replaced by another id: each
    step accepts that many tokens (all of them, and a bonus token, when the index is past the
    draft). A context that left the reference gets no draft."""
    steps = [0]

    def draft(request: EngineRequest, context: Sequence[int], limit: int) -> list[int]:
        expected = reference(request)
        done = len(context) - len(request.prompt)
        if list(context[len(request.prompt) :]) != list(expected[:done]):
            return []
        drafts = list(expected[done : done + limit])
        wrong = steps[0] % (limit + 1)
        steps[0] += 1
        if wrong < len(drafts):
            token = drafts[wrong]
            drafts[wrong] = token - 1 if token > 0 else token + 1
        return drafts

    return draft
