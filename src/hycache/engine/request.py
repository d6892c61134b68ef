"""The engine's requests and results, and where the scheduler pulls requests from.

``EngineRequest`` is one prompt with its generation length; ``RequestResult`` is what running it
did (tokens, logits, hits, checkpoints, owner-tag violations). A ``RequestSource`` hands out
requests as they become ready (``ListSource``: all at once, in order) and is told when each
finishes. ``TokenCallback`` is what the engine calls with every token it generates (streaming,
stop strings). Plain data: nothing here touches the cache, the model or torch at runtime.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from hycache.engine.sampling import Sampling

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class EngineRequest:
    """A prompt to run: up to ``max_new_tokens`` tokens are generated (at least 1), greedily
    unless ``sampling`` says otherwise; generation stops early after a token in
    ``stop_token_ids`` (that token is part of the output)."""

    prompt: tuple[int, ...]
    max_new_tokens: int = 1
    namespace: str | None = None
    session: str | None = None
    rid: str = ""
    sampling: Sampling | None = None
    stop_token_ids: tuple[int, ...] = ()


@dataclass
class RequestResult:
    """What a request did. ``logits[0]``: the last prompt token's logits; ``logits[i]``: the
    logits after feeding ``output[i - 1]``. ``status``: "done", "failed" (``error`` says
    why; nothing of it was cached) or "aborted" (stopped from outside; nothing cached).
    ``finish_reason``: "length" (``max_new_tokens`` reached), "stop" (a stop token, or the
    token callback asked to stop), "abort" or "" (not finished). ``output`` grows token by
    token while the request runs."""

    request: EngineRequest
    status: str
    hit: int = 0
    kv_hit: int = 0
    output: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    error: str | None = None
    checkpoints: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    prefill_s: float = 0.0
    waits: int = 0
    #: recomputed prompt tokens whose queries read cached attention KV in place
    in_place_tokens: int = 0
    #: prompt tokens beyond the device's ``hit`` loaded from the tiers
    tier_tokens: int = 0
    finish_reason: str = ""


#: Called by the engine with each generated token, right after it is picked (the request's
#: ``output`` already ends with it); returning True ends the request after this token.
TokenCallback = Callable[[RequestResult, int], bool]


@runtime_checkable
class RequestSource(Protocol):
    """Where the scheduler pulls requests from (sessions make some wait for others)."""

    def next_ready(self) -> EngineRequest | None:
        """The next request that may start now (None: none right now)."""

    def done(self, result: RequestResult) -> None:
        """A request pulled from here finished (or failed)."""

    @property
    def exhausted(self) -> bool:
        """No request is left to hand out."""


class ListSource:
    """All requests ready at once, in order."""

    def __init__(self, requests: Iterable[EngineRequest]) -> None:
        self._queue = deque(requests)

    def next_ready(self) -> EngineRequest | None:
        return self._queue.popleft() if self._queue else None

    def done(self, result: RequestResult) -> None:
        pass

    @property
    def exhausted(self) -> bool:
        return not self._queue
