"""One request of a replayed workload, as traces and workload generators yield them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from hycache.tree.keys import TOKEN_BYTES, TokenKey, encode_tokens


@dataclass(frozen=True)
class Request:
    """A prompt and what the model answers.

    ``prompt``: the prompt's token ids as an encoded key (int64 bytes, see
    :mod:`hycache.tree.keys`; a parsed block-hashed trace gives a run key of the same ids).
    ``output``: the answer's token ids, same encoding (a trace that only gives a length gets
    deterministic ids unique to the request). ``arrival_s``: seconds
    since the start of the trace. ``session``: conversation/agent id (None: one-off).
    """

    request_id: str
    arrival_s: float
    prompt: TokenKey
    output: TokenKey
    session: str | None = None
    namespace: str | None = None

    @classmethod
    def of(
        cls,
        request_id: str,
        prompt: Sequence[int],
        output: Sequence[int],
        arrival_s: float = 0.0,
        *,
        session: str | None = None,
        namespace: str | None = None,
    ) -> Request:
        """A request from plain token id lists (encoded here)."""
        return cls(
            request_id, arrival_s, encode_tokens(prompt), encode_tokens(output), session, namespace
        )

    @cached_property
    def prompt_len(self) -> int:
        return len(self.prompt) // TOKEN_BYTES

    @cached_property
    def output_len(self) -> int:
        return len(self.output) // TOKEN_BYTES
