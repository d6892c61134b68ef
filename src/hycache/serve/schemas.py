"""Request bodies (pydantic) and response payloads of the OpenAI-compatible API.

Bodies accept what the ``openai`` client sends; fields the server does not know are ignored,
fields it knows but cannot honour (``n`` > 1, ``echo``, ``logprobs``, ``best_of`` > 1,
``suffix``) are refused with 400. Extras in the vLLM style: ``ignore_eos`` (generate until
``max_tokens``). Payloads are plain dicts shaped like OpenAI's; every choice also carries the
generated ``token_ids`` (as vLLM's ``return_token_ids`` does). ``ApiError`` is how a route
says "answer this status with this reason".
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from hycache.errors import HycacheError


class ApiError(HycacheError):
    """An HTTP error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        counted: bool = False,
    ) -> None:
        super().__init__(message)
        self.counted = counted  # already in the rejection metrics
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def kind(self) -> str:
        if self.status == 429:
            return "rate_limit_error"
        if self.status >= 500:
            return "server_error"
        return "invalid_request_error"

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    n: int = 1
    ignore_eos: bool = False


class CompletionRequest(_Body):
    """``/v1/completions``: ``prompt`` as text, or as token ids."""

    prompt: str | list[int] | list[str]
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None
    logprobs: int | None = None


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatRequest(_Body):
    """``/v1/chat/completions``: ``messages`` rendered with the chat template."""

    messages: list[Message]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None


def usage(prompt: int, completion: int, cached: int) -> dict[str, Any]:
    """``cached``: prompt tokens actually reused from the cache (restored, not recomputed)."""
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def completion_payload(
    rid: str,
    model: str,
    *,
    text: str,
    token_ids: Sequence[int],
    finish_reason: str | None,
    usage_: dict[str, Any] | None,
) -> dict[str, Any]:
    """A ``text_completion`` object (whole, or one streamed chunk)."""
    choice = _choice("text", text, token_ids, finish_reason)
    return _envelope(rid, model, "text_completion", [choice], usage_)


def chat_payload(
    rid: str,
    model: str,
    *,
    text: str,
    token_ids: Sequence[int],
    finish_reason: str | None,
    usage_: dict[str, Any] | None,
) -> dict[str, Any]:
    """A whole ``chat.completion`` object."""
    message = {"role": "assistant", "content": text}
    choice = _choice("message", message, token_ids, finish_reason)
    return _envelope(rid, model, "chat.completion", [choice], usage_)


def chat_chunk(
    rid: str,
    model: str,
    *,
    delta: dict[str, Any] | None,
    token_ids: Sequence[int] = (),
    finish_reason: str | None = None,
    usage_: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta`` None: the usage-only last chunk (no choice)."""
    choices = [] if delta is None else [_choice("delta", delta, token_ids, finish_reason)]
    return _envelope(rid, model, "chat.completion.chunk", choices, usage_)


def _choice(
    field: str, content: object, token_ids: Sequence[int], finish_reason: str | None
) -> dict[str, Any]:
    """The one choice of a response: its ``field`` (text, message or delta) and token ids."""
    return {
        "index": 0,
        field: content,
        "logprobs": None,
        "finish_reason": finish_reason,
        "token_ids": list(token_ids),
    }


def _envelope(
    rid: str,
    model: str,
    kind: str,
    choices: list[dict[str, Any]],
    usage_: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "id": rid,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage_,
    }
