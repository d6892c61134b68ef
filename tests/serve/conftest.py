"""Real servers for the serve tests: uvicorn in a thread on a free loopback port, the real
``openai`` client, no mocks. Each server is built from a tiny checkpoint written once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hycache.serve.config import ServeConfig
from hycache.serve.runtime import Runtime
from hycache.serve.server import DrainingServer, uvicorn_config

ARCH = "qwen3_5"
MODEL = "tiny"
HOST = "127.0.0.1"


@dataclass
class Served:
    """A running server and ways to talk to it."""

    runtime: Runtime
    url: str

    @property
    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key="none", max_retries=0)

    def check(self) -> dict[str, Any]:
        """The cache's integrity through the admin endpoint (raises on a broken invariant)."""
        response = httpx.get(f"{self.url}/admin/check", timeout=30)
        body: dict[str, Any] = response.json()
        if response.status_code != 200 or not body.get("ok"):
            raise AssertionError(f"integrity check failed: {body}")
        return body

    def settle(self, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until nothing is in flight, then check integrity."""
        deadline = time.monotonic() + timeout
        while True:
            body = self.check()
            idle = body["requests_in_flight"] == 0 and self.runtime.online.queued == 0
            if idle or time.monotonic() > deadline:
                return body
            time.sleep(0.05)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics, parsed with prometheus_client's parser."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return samples


@contextmanager
def running(config: ServeConfig) -> Iterator[Served]:
    """Serve ``config`` on a free loopback port until the block ends (then drain)."""
    runtime = Runtime(config)
    server = DrainingServer(uvicorn_config(runtime, HOST, 0, "warning"), runtime)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Served(runtime, f"http://{HOST}:{port}")
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="session")
def model_dir(model_dirs: Callable[[str], Path]) -> Path:
    return model_dirs(ARCH)


@pytest.fixture(scope="session")
def base_config(model_dir: Path) -> ServeConfig:
    return ServeConfig(
        model_dir=model_dir,
        model_name=MODEL,
        policy="vllm",
        max_running=2,
        max_queue=8,
        max_model_len=512,
        session_idle_s=0.5,
        drain_timeout_s=20,
    )


@pytest.fixture(scope="module")
def served(base_config: ServeConfig) -> Iterator[Served]:
    with running(base_config) as s:
        yield s


@pytest.fixture(scope="module")
def sglang_served(base_config: ServeConfig) -> Iterator[Served]:
    """sglang (checkpoints only at chunk and request ends), one request at a time, a queue of
    one: the sparse-checkpoint signature and the 429 path."""
    config = replace(base_config, policy="sglang", knobs={}, max_running=1, max_queue=1)
    with running(config) as s:
        yield s
