"""``/v1/completions`` and ``/v1/chat/completions``: checks, submission, SSE streaming.

Every check happens before submission and answers 400 with the reason (unknown model, empty
or too long prompt, token ids outside the vocabulary, ``max_tokens`` below 1 or beyond the
context, unsupported options). A full queue answers 429 with Retry-After, a draining server
503. A request the cache cannot hold even when empty fails with 400. Streaming responses start
once the first token exists (so such a failure is still a plain 400); a client that goes away
(mid-stream, or while a non-streamed request runs) gets its request aborted, which releases
everything it held. ``usage.prompt_tokens_details.cached_tokens`` is the reused prefix
(``lease.hit``): tokens restored from the cache, not merely matched by attention.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from hycache.engine.online import Draining, Overloaded
from hycache.engine.request import EngineRequest, RequestResult
from hycache.engine.sampling import Sampling
from hycache.errors import ConfigError
from hycache.serve import schemas
from hycache.serve.runtime import Runtime
from hycache.serve.schemas import ApiError, ChatRequest, CompletionRequest
from hycache.serve.stream import EndEvent, Event, RequestStream, TokenEvent
from hycache.serve.tokenizer import ChatMessage, Detokenizer

MAX_STOPS = 4
_POLL_S = 0.25


@dataclass
class _Job:
    """One checked request on its way through the engine."""

    rid: str
    request: EngineRequest
    stream: RequestStream
    chat: bool
    session: str | None


def _bad(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _prompt_ids(runtime: Runtime, body: CompletionRequest | ChatRequest) -> list[int]:
    codec = runtime.codec
    if isinstance(body, ChatRequest):
        if not body.messages:
            raise _bad("messages must not be empty", "messages")
        messages = [ChatMessage(m.role, m.text()) for m in body.messages]
        return codec.encode(codec.chat_prompt(messages))
    prompt = body.prompt
    if isinstance(prompt, str):
        return codec.encode(prompt)
    if prompt and all(isinstance(p, str) for p in prompt):
        if len(prompt) != 1:
            raise _bad("only one prompt per request is supported", "prompt")
        return codec.encode(str(prompt[0]))
    ids = [int(p) for p in prompt]
    bad = [t for t in ids if not 0 <= t < codec.vocab]
    if bad:
        raise _bad(f"token id {bad[0]} is outside the vocabulary [0, {codec.vocab})", "prompt")
    return ids


def _unsupported(body: CompletionRequest | ChatRequest) -> None:
    if body.n != 1:
        raise _bad(f"n={body.n}: only n=1 is supported", "n")
    if isinstance(body, CompletionRequest):
        if body.echo:
            raise _bad("echo is not supported", "echo")
        if body.best_of not in (None, 1):
            raise _bad("best_of is not supported", "best_of")
        if body.suffix:
            raise _bad("suffix is not supported", "suffix")
        if body.logprobs is not None:
            raise _bad("logprobs are not supported", "logprobs")
    elif body.logprobs:
        raise _bad("logprobs are not supported", "logprobs")


def _max_tokens(runtime: Runtime, body: CompletionRequest | ChatRequest, prompt: int) -> int:
    limit = runtime.max_model_len
    if prompt >= limit:
        raise _bad(
            f"the prompt has {prompt} tokens; this model's maximum context length is {limit} "
            "tokens, which must hold the prompt and at least one generated token",
            "prompt" if isinstance(body, CompletionRequest) else "messages",
            "context_length_exceeded",
        )
    asked = body.max_tokens
    param = "max_tokens"
    if isinstance(body, ChatRequest) and body.max_completion_tokens is not None:
        asked, param = body.max_completion_tokens, "max_completion_tokens"
    if asked is None:
        return min(runtime.config.default_max_tokens, limit - prompt)
    if asked < 1:
        raise _bad(f"{param} must be at least 1, got {asked}", param)
    if prompt + asked > limit:
        raise _bad(
            f"this model's maximum context length is {limit} tokens; the request asks for "
            f"{prompt + asked} ({prompt} in the prompt, {asked} for the completion)",
            param,
            "context_length_exceeded",
        )
    return asked


def _sampling(body: CompletionRequest | ChatRequest) -> Sampling | None:
    temperature = 1.0 if body.temperature is None else body.temperature
    top_p = 1.0 if body.top_p is None else body.top_p
    if not math.isfinite(temperature) or not 0 <= temperature <= 2:
        raise _bad(f"temperature must be in [0, 2], got {temperature}", "temperature")
    if not math.isfinite(top_p) or not 0 < top_p <= 1:
        raise _bad(f"top_p must be in (0, 1], got {top_p}", "top_p")
    if body.seed is not None and not 0 <= body.seed < 2**63:
        raise _bad(f"seed must be in [0, 2**63), got {body.seed}", "seed")
    if temperature == 0:
        return None
    return Sampling(temperature, top_p, body.seed)


def _stops(body: CompletionRequest | ChatRequest) -> tuple[str, ...]:
    stops = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    if len(stops) > MAX_STOPS:
        raise _bad(f"at most {MAX_STOPS} stop strings, got {len(stops)}", "stop")
    return tuple(s for s in stops if s)


def _prepare(runtime: Runtime, body: CompletionRequest | ChatRequest, header: str | None) -> _Job:
    if runtime.draining:
        raise ApiError(503, "the server is shutting down")
    if body.model != runtime.model_name:
        raise _bad(f"the model `{body.model}` does not exist", "model", "model_not_found")
    _unsupported(body)
    prompt = _prompt_ids(runtime, body)
    if not prompt:
        raise _bad("the prompt is empty", "prompt")
    max_tokens = _max_tokens(runtime, body, len(prompt))
    chat = isinstance(body, ChatRequest)
    try:
        session = runtime.sessions.pick(header, body.user)
    except ConfigError as exc:
        raise _bad(str(exc), "user") from None
    rid = runtime.new_id()
    request = EngineRequest(
        tuple(prompt),
        max_tokens,
        session=session,
        rid=rid,
        sampling=_sampling(body),
        stop_token_ids=() if body.ignore_eos else runtime.codec.stop_ids(chat=chat),
    )
    detokenizer = Detokenizer(runtime.codec, _stops(body))

    def ended(stream: RequestStream, result: RequestResult) -> None:
        _ended(runtime, session, stream, result)

    stream = RequestStream(asyncio.get_running_loop(), detokenizer, ended)
    return _Job(("chatcmpl-" if chat else "cmpl-") + rid, request, stream, chat, session)


def _submit(runtime: Runtime, job: _Job) -> None:
    try:
        runtime.online.submit(job.request, job.stream)
    except Overloaded as exc:
        retry = str(max(1, math.ceil(exc.retry_after)))
        raise ApiError(429, f"the server is busy: {exc}", headers={"Retry-After": retry}) from None
    except Draining:
        raise ApiError(503, "the server is shutting down") from None
    except ConfigError as exc:
        raise _bad(str(exc)) from None
    if job.session is not None:
        runtime.sessions.begin(job.session)


async def _next(job: _Job, http: Request) -> Event | None:
    """The next event; None when the client went away."""
    while True:
        try:
            return await asyncio.wait_for(job.stream.next(), _POLL_S)
        except TimeoutError:
            if await http.is_disconnected():
                return None


def _ended(
    runtime: Runtime, session: str | None, stream: RequestStream, result: RequestResult
) -> None:
    """Bookkeeping of a request that ended (on the event loop, once per request)."""
    if session is not None:
        runtime.sessions.end(session)
    if result.status == "done":
        runtime.metrics.finished(
            reason=result.finish_reason,
            prompt=len(result.request.prompt),
            reused=result.hit,
            generated=len(result.output),
            ttft=stream.ttft,
            latency=(stream.ended_at or stream.submitted) - stream.submitted,
        )
    elif result.status == "aborted":
        runtime.metrics.aborted.inc()
    else:
        runtime.metrics.rejected.labels("failed").inc()


def _failure(result: RequestResult) -> ApiError:
    error = result.error or result.status
    if result.status == "failed" and not error.startswith("internal error"):
        return ApiError(400, f"the request cannot be served: {error}", counted=True)
    status = 500 if result.status == "failed" else 503
    return ApiError(status, f"the request ended: {error}", counted=True)


def _usage(result: RequestResult) -> dict[str, Any]:
    return schemas.usage(len(result.request.prompt), len(result.output), result.hit)


async def _whole(runtime: Runtime, job: _Job, http: Request) -> Response:
    while True:
        event = await _next(job, http)
        if event is None:  # the client went away: nobody reads the answer
            runtime.online.abort(job.request.rid)
            return Response(status_code=499)
        if isinstance(event, TokenEvent):
            continue
        result = event.result
        if result.status != "done":
            raise _failure(result)
        build = schemas.chat_payload if job.chat else schemas.completion_payload
        payload = build(
            job.rid,
            runtime.model_name,
            text=job.stream.text,
            token_ids=result.output,
            finish_reason=result.finish_reason,
            usage_=_usage(result),
        )
        return JSONResponse(payload)


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


async def _streamed(runtime: Runtime, job: _Job, http: Request, include_usage: bool) -> Response:
    first = await _next(job, http)
    if first is None:
        runtime.online.abort(job.request.rid)
        return Response(status_code=499)
    if isinstance(first, EndEvent) and first.result.status != "done":
        raise _failure(first.result)
    name = runtime.model_name

    def chunk(text: str, ids: list[int], finish: str | None) -> dict[str, Any]:
        if job.chat:
            delta = {"content": text} if text or finish is None else {}
            return schemas.chat_chunk(
                job.rid, name, delta=delta, token_ids=ids, finish_reason=finish
            )
        return schemas.completion_payload(
            job.rid, name, text=text, token_ids=ids, finish_reason=finish, usage_=None
        )

    async def events() -> AsyncIterator[str]:
        ended = False
        try:
            if job.chat:
                role = {"role": "assistant", "content": ""}
                yield _sse(schemas.chat_chunk(job.rid, name, delta=role))
            event: Event | None = first
            while event is not None:
                if isinstance(event, TokenEvent):
                    yield _sse(chunk(event.text, [event.token], None))
                    event = await job.stream.next()
                    continue
                ended = True
                result = event.result
                if result.status != "done":
                    break  # aborted by a shutdown without drain: end the stream
                yield _sse(chunk(event.text, [], result.finish_reason))
                if include_usage:
                    yield _sse(_usage_chunk(job, name, result))
                yield _sse("[DONE]")
                event = None
        finally:
            if not ended:  # the client went away mid-stream: abort (releases, checks)
                runtime.online.abort(job.request.rid)

    return StreamingResponse(events(), media_type="text/event-stream")


def _usage_chunk(job: _Job, name: str, result: RequestResult) -> dict[str, Any]:
    if job.chat:
        return schemas.chat_chunk(job.rid, name, delta=None, usage_=_usage(result))
    payload = schemas.completion_payload(
        job.rid, name, text="", token_ids=(), finish_reason=None, usage_=_usage(result)
    )
    payload["choices"] = []
    return payload


async def _serve(
    runtime: Runtime, http: Request, body: CompletionRequest | ChatRequest, header: str | None
) -> Response:
    job = _prepare(runtime, body, header)
    _submit(runtime, job)
    if body.stream:
        include = body.stream_options is not None and body.stream_options.include_usage
        return await _streamed(runtime, job, http, include)
    return await _whole(runtime, job, http)


def router(runtime_of: Callable[[Request], Runtime]) -> APIRouter:
    """The two generation routes; ``runtime_of`` finds the server's ``Runtime``."""
    api = APIRouter()

    @api.post("/v1/completions")
    async def completions(
        body: CompletionRequest,
        http: Request,
        x_session_id: str | None = Header(default=None),
    ) -> Response:
        return await _serve(runtime_of(http), http, body, x_session_id)

    @api.post("/v1/chat/completions")
    async def chat_completions(
        body: ChatRequest,
        http: Request,
        x_session_id: str | None = Header(default=None),
    ) -> Response:
        return await _serve(runtime_of(http), http, body, x_session_id)

    return api
