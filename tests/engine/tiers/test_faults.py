"""Faults under the engine's tiers (docs/reliability.md): a store that dies, lies, forgets or
stalls costs recomputed tokens, never a wrong one."""

from __future__ import annotations

import math
import resource
import signal
from collections.abc import Callable
from pathlib import Path

import redis

from hycache.engine.engine import Engine
from hycache.engine.model import LoadedModel, load_model
from hycache.engine.tiers.host import HostTier
from tests.engine.tiers.helpers import chain_for, run_chat
from tests.redis_server import RedisServer

ARCH = "qwen3_next"


def test_redis_killed_mid_run_and_restarted(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    server = redis_server()
    chain = chain_for(
        models(ARCH), tmp_path, redis_url=server.url, timeout_s=0.5, retry_after_s=0.01
    )
    store = chain.counters()["redis"]
    hits_at_restart: list[int] = []

    def restart() -> None:
        server.start()
        hits_at_restart.append(store.hits)

    outcome = run_chat(models(ARCH), chain, requests=20, actions={5: server.kill, 8: restart})
    assert outcome.wrong == 0
    assert store.errors > 0  # the dead server was noticed, each time a miss
    assert store.hits > hits_at_restart[0]  # and the restarted one used again


def test_blob_corrupted_in_place(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    server = redis_server()
    chain = chain_for(models(ARCH), tmp_path, redis_url=server.url)
    client = redis.Redis.from_url(server.url)

    def corrupt() -> None:
        for key in client.scan_iter(match="test:*"):
            length = client.strlen(key)
            byte = client.getrange(key, length - 7, length - 7)
            client.setrange(key, length - 7, bytes([byte[0] ^ 0x40]))

    outcome = run_chat(models(ARCH), chain, requests=16, actions={6: corrupt})
    store = chain.counters()["redis"]
    assert outcome.wrong == 0 and store.invalid > 0


def test_payload_evicted_by_maxmemory(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    server = redis_server(maxmemory="1200kb")
    chain = chain_for(models(ARCH), tmp_path, redis_url=server.url)
    outcome = run_chat(models(ARCH), chain, requests=16)
    evicted = redis.Redis.from_url(server.url).info("stats")["evicted_keys"]
    assert outcome.wrong == 0 and evicted > 0
    assert chain.counters()["redis"].invalid == 0  # whole objects vanish: no orphan halves


def test_fingerprint_mismatch(
    models: Callable[[str], LoadedModel],
    model_dirs: Callable[[str], Path],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    """The same model in float64 writes to the same keys first: every object it left is
    refused (and deleted) by the float32 engine, which recomputes."""
    server = redis_server()
    other = load_model(model_dirs(ARCH), dtype="float64")
    assert run_chat(other, chain_for(other, tmp_path, redis_url=server.url), requests=8).wrong == 0
    chain = chain_for(models(ARCH), tmp_path, redis_url=server.url, writer="w2")
    outcome = run_chat(models(ARCH), chain, requests=8)
    assert outcome.wrong == 0 and chain.counters()["redis"].invalid > 0


def test_slow_store_times_out_and_recomputes(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    server = redis_server()
    chain = chain_for(models(ARCH), tmp_path, redis_url=server.url, timeout_s=0.1)
    admin = redis.Redis.from_url(server.url)
    outcome = run_chat(
        models(ARCH),
        chain,
        requests=16,
        actions={6: lambda: admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")},
    )
    assert outcome.wrong == 0 and chain.counters()["redis"].timeouts > 0


def test_disk_full(models: Callable[[str], LoadedModel], tmp_path: Path) -> None:
    """After six requests no file may grow past 64 bytes (EFBIG, as a full disk's ENOSPC):
    every later write fails, is counted and leaves nothing behind."""
    chain = chain_for(models(ARCH), tmp_path, disk=8 << 20)
    disk = chain.counters()["disk"]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        outcome = run_chat(
            models(ARCH),
            chain,
            requests=16,
            actions={6: lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (64, hard))},
        )
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert outcome.wrong == 0 and disk.errors > 0 and disk.hits > 0
    assert not list((tmp_path / "disk-w1").glob(".tmp-*"))


def test_nan_prefilled_blocks_arrive_as_zeros(
    models: Callable[[str], LoadedModel], tmp_path: Path
) -> None:
    """Every device page and slot starts as NaN (a reused block's stale bytes): what reaches
    the tiers and comes back is the computed data, the unused conv column zeros."""
    model = models(ARCH)
    chain = chain_for(model, tmp_path, host=1 << 20)

    def poison(engine: Engine) -> None:
        store = engine.store
        for pages in store.pages.values():
            if pages.limit is not None:
                pages.ensure(pages.limit - 1)
            for t in (*pages.k, *pages.v):
                t.fill_(math.nan)
        slots = store.slots
        if slots is not None:
            if slots.limit is not None:
                slots.ensure(slots.limit - 1)
            for t in (*slots.conv, *slots.rec):
                if t is not None:
                    t.fill_(math.nan)

    outcome = run_chat(model, chain, requests=16, engine_hook=poison)
    assert outcome.wrong == 0 and outcome.tier_tokens > 0
    host = chain.host
    assert isinstance(host, HostTier) and len(host) > 0
    for obj in host._objects.values():
        assert all(bool(t.isfinite().all()) for t in obj.tensors), obj.key
