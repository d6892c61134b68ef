"""The engine over real tiers: hits loaded from host, disk and Redis compute what cold runs
compute, on every architecture family."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hycache.engine.model import LoadedModel
from tests.engine.tiers.helpers import chain_for, run_chat
from tests.redis_server import RedisServer


@pytest.mark.parametrize("arch", ["qwen3_next", "gemma3"])
def test_host_tier_extends_device_hits_exactly(
    models: Callable[[str], LoadedModel], tmp_path: Path, arch: str
) -> None:
    model = models(arch)
    without = run_chat(model, None)
    chain = chain_for(model, tmp_path, host=1 << 20)
    outcome = run_chat(model, chain)
    assert outcome.wrong == 0 and without.wrong == 0
    assert outcome.tier_tokens > 0 and chain.hit_tokens["host"] == outcome.tier_tokens
    assert outcome.device_tokens + outcome.tier_tokens > without.device_tokens


def test_every_tier_serves_hits(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    """A host and a disk too small for the workload: older prefixes come from below."""
    server = redis_server()
    model = models("nemotron_h")
    chain = chain_for(model, tmp_path, host=64 << 10, disk=128 << 10, redis_url=server.url)
    outcome = run_chat(model, chain, requests=24)
    assert outcome.wrong == 0
    assert all(n > 0 for n in chain.hit_tokens.values()), chain.hit_tokens
    assert sum(chain.hit_tokens.values()) == outcome.tier_tokens


def test_a_second_instance_reuses_what_the_first_wrote(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    server = redis_server()
    model = models("qwen3_next")
    first = chain_for(model, tmp_path, redis_url=server.url, writer="a")
    assert run_chat(model, first, requests=8).wrong == 0
    second = chain_for(model, tmp_path, redis_url=server.url, writer="b")
    outcome = run_chat(model, second, requests=8)
    assert outcome.wrong == 0 and second.foreign_tokens > 0


def test_a_second_instance_on_a_sliding_window_model(
    models: Callable[[str], LoadedModel],
    tmp_path: Path,
    redis_server: Callable[..., RedisServer],
) -> None:
    """An extension from the tiers loads only the sliding window before its end (the second
    instance extends its very first requests from Redis): the device must not keep
    sliding-window pages for the positions between its hit and that window (nobody writes
    them), or a later device hit inside them (the shared system prompt, a retried turn)
    reads another prefix's KV."""
    server = redis_server()
    model = models("gemma3")
    for writer in ("a", "b"):
        chain = chain_for(model, tmp_path, redis_url=server.url, writer=writer)
        outcome = run_chat(model, chain, requests=30)
        violations = [v for r in outcome.results for v in r.violations]
        assert outcome.wrong == 0 and not violations, (writer, violations)
    assert chain.foreign_tokens > 0 and outcome.tier_tokens > 0
