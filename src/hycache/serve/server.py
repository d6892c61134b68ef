"""Running a ``Runtime`` under uvicorn, with a graceful SIGTERM.

On SIGTERM (or SIGINT) the server stops admitting at once (new requests get 503, ``/health``
turns 503), uvicorn stops accepting connections and waits for the requests in flight, streams
included, to finish (at most ``drain_timeout_s``); then the app's lifespan drains the
scheduler and ``serve`` returns 0. uvicorn re-raises the signal it caught once it is done;
``serve`` installs a handler that ignores that echo, so the process exits 0 rather than dying
of the signal.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import uvicorn

from hycache.serve.app import create_app
from hycache.serve.runtime import Runtime

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that marks its runtime as draining on the first exit signal."""

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self.runtime = runtime

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.runtime.draining = True
        super().handle_exit(sig, frame)


def uvicorn_config(runtime: Runtime, host: str, port: int, log_level: str) -> uvicorn.Config:
    return uvicorn.Config(
        create_app(runtime),
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=int(runtime.config.drain_timeout_s),
        access_log=log_level == "debug",
    )


def serve(runtime: Runtime, *, host: str, port: int, log_level: str = "info") -> int:
    """Serve until SIGTERM/SIGINT, drain, return 0 (1 when the drain timed out)."""
    server = DrainingServer(uvicorn_config(runtime, host, port, log_level), runtime)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def echo(sig: int, frame: FrameType | None) -> None:
            """uvicorn re-raising the signal it handled: already drained, nothing to do."""

        previous = {sig: signal.signal(sig, echo) for sig in _SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if runtime.drained else 1
