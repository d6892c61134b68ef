"""``RequestStream``: one request's events, from the scheduler thread to the event loop.

The online engine calls ``on_token`` and ``on_end`` on its scheduler thread; both only
detokenize and hand an event to the request's asyncio queue with ``call_soon_threadsafe``
(the engine never waits on the web side). The route awaits ``next()``: a ``TokenEvent`` per
generated token (with the text it adds, stop strings held back and cut) and one ``EndEvent``.
``on_token`` returns True once a stop string appeared, which ends the request after that
token. ``ended`` (optional) runs on the event loop once the request ended, whether or not
anyone still reads the events (a client that went away), so the bookkeeping of every request
happens exactly once. Times are ``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from hycache.engine.request import RequestResult
from hycache.serve.tokenizer import Detokenizer


@dataclass(frozen=True)
class TokenEvent:
    token: int
    text: str


@dataclass(frozen=True)
class EndEvent:
    result: RequestResult
    text: str  # the text not handed out by the token events


Event = TokenEvent | EndEvent


class RequestStream:
    """The ``Listener`` of one request (see ``hycache.engine.online``)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        detokenizer: Detokenizer,
        ended: Callable[[RequestStream, RequestResult], None] | None = None,
    ) -> None:
        self.loop = loop
        self.ended = ended
        self.detokenizer = detokenizer
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.submitted = time.monotonic()
        self.first_token_at: float | None = None
        self.ended_at: float | None = None
        self.result: RequestResult | None = None

    # scheduler thread
    def on_token(self, result: RequestResult, token: int) -> bool:
        if self.first_token_at is None:
            self.first_token_at = time.monotonic()
        stop = self.detokenizer.feed(token)
        self._post(TokenEvent(token, self.detokenizer.delta()))
        return stop

    def on_end(self, result: RequestResult) -> None:
        self.ended_at = time.monotonic()
        self.result = result
        self._post(EndEvent(result, self.detokenizer.delta(final=True)))
        if self.ended is not None:
            self._soon(self.ended, self, result)

    def _post(self, event: Event) -> None:
        self._soon(self.queue.put_nowait, event)

    def _soon(self, fn: Callable[..., object], *args: object) -> None:
        # a closed event loop raises RuntimeError: nobody is listening any more
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(fn, *args)

    # event loop
    async def next(self) -> Event:
        return await self.queue.get()

    @property
    def ttft(self) -> float | None:
        """Seconds from submission to the first token (None: no token)."""
        if self.first_token_at is None:
            return None
        return self.first_token_at - self.submitted

    @property
    def text(self) -> str:
        """The whole generated text (stop strings cut)."""
        return self.detokenizer.text
