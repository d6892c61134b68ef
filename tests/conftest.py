"""Shared fixtures: tiny checkpoints written once per session; ``redis_server``, a real
``redis-server`` per test on a free loopback port (skipped, with the reason, where
``redis-server`` or redis-py is missing; ``make test`` installs both)."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from hycache.engine.archs import init_model
from hycache.engine.model import LoadedModel, load_model
from tests.redis_server import RedisServer

# tiny models: one thread is faster than two fighting over two cores
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = init_model(arch, tmp_path_factory.mktemp(arch), seed=0)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def models(model_dirs: Callable[[str], Path]) -> Callable[[str], LoadedModel]:
    loaded: dict[str, LoadedModel] = {}

    def get(arch: str) -> LoadedModel:
        if arch not in loaded:
            loaded[arch] = load_model(model_dirs(arch))
        return loaded[arch]

    return get


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """A factory: ``redis_server(maxmemory=None)`` starts a server; all are stopped after."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make test installs Debian's redis-server)")
    pytest.importorskip("redis", reason="redis-py is not installed (pip install 'hycache[redis]')")
    started: list[RedisServer] = []

    def start(maxmemory: str | None = None) -> RedisServer:
        directory = tmp_path / f"redis-{len(started)}"
        directory.mkdir()
        server = RedisServer(directory, maxmemory)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(autouse=True)
def _trace_cache_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed traces go to a per-test directory, never to the user's cache."""
    monkeypatch.setenv("HYCACHE_CACHE_DIR", str(tmp_path / "trace-cache"))
