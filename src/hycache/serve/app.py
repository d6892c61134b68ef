"""The FastAPI application of one ``Runtime``.

Routes: the generation routes of ``hycache.serve.routes``; ``GET /v1/models`` (the one served
model); ``GET /health`` (200, or 503 while draining); ``GET /metrics`` (Prometheus text,
``hycache.serve.metrics``); ``GET /admin/check`` (the cache's integrity and the engine's memory
accounting checked between two steps: 200 with a few numbers, 500 with the broken invariant).
Every error answers in OpenAI's shape; a body that is not valid JSON or does not validate is a
400 naming the problem (not FastAPI's 422). The app's lifespan starts the runtime's scheduler
and, on shutdown, drains it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from hycache.errors import IntegrityError
from hycache.serve.metrics import CONTENT_TYPE
from hycache.serve.routes import router
from hycache.serve.runtime import Runtime
from hycache.serve.schemas import ApiError

_REJECTED = {400: "invalid", 429: "queue_full", 503: "draining"}


def _validation_message(exc: RequestValidationError) -> str:
    parts = []
    for error in exc.errors():
        if error.get("type") == "json_invalid":
            detail = error.get("ctx", {}).get("error", "")
            return f"the body is not valid JSON: {detail}".rstrip(": ")
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body")
        parts.append(f"{where or 'body'}: {error.get('msg', 'invalid')}")
    return "; ".join(parts[:3]) or "the body does not validate"


def create_app(runtime: Runtime) -> FastAPI:
    """The server's application; serving it starts the runtime, stopping it drains it."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime.start()
        try:
            yield
        finally:
            await run_in_threadpool(runtime.shutdown)

    app = FastAPI(title="hycache", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.runtime = runtime
    created = int(time.time())

    def runtime_of(request: Request) -> Runtime:
        found: Runtime = request.app.state.runtime
        return found

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        reason = _REJECTED.get(exc.status)
        if reason is not None and not exc.counted:
            runtime.metrics.rejected.labels(reason).inc()
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return await api_error(request, ApiError(400, _validation_message(exc)))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        error = ApiError(exc.status_code, str(exc.detail))
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    app.include_router(router(runtime_of))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": runtime.model_name,
            "object": "model",
            "created": created,
            "owned_by": "hycache",
            "root": str(runtime.config.model_dir),
            "max_model_len": runtime.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> JSONResponse:
        if runtime.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        body = await run_in_threadpool(runtime.metrics.render)
        return Response(body, media_type=CONTENT_TYPE)

    @app.get("/admin/check")
    async def check() -> JSONResponse:
        try:
            numbers = await run_in_threadpool(runtime.check)
        except IntegrityError as exc:
            return JSONResponse({"ok": False, "error": str(exc)}, status_code=500)
        return JSONResponse({"ok": True, **numbers})

    return app
