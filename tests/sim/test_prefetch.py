"""Storage prefetch: best_effort takes what arrived, wait_complete all of it, timeout what
its deadline allows; the cache never loads more from storage than it is allowed."""

from __future__ import annotations

import dataclasses

import pytest

from hycache.cache.lease import Lease
from hycache.cache.presets import build_cache
from hycache.cache.tierconfig import TierConfig
from hycache.cli.main import main
from hycache.errors import ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.prefetch import Prefetch
from hycache.spec.model import load_spec
from tests.cache.test_facade import seq, tiny_spec
from tests.cache.test_tiers import run


def prefetch(policy: str, **hw: float) -> Prefetch:
    spec = load_spec("qwen3-next-80b-a3b")
    cost = CostModel(spec, dataclasses.replace(hardware("h200"), **hw))
    return Prefetch.of(TierConfig(1 << 30, storage="disk", prefetch=policy), cost)


def test_policies_limit_what_storage_delivers() -> None:
    assert prefetch("wait_complete").slow_limit(0.0) is None
    best = prefetch("best_effort")
    assert best.slow_limit(0.0) == 0
    assert best.slow_limit(1.0) == pytest.approx(1.0 / best.seconds_per_token, abs=1)
    # a fast store meets the deadline however long the hit: no limit
    assert prefetch("timeout").slow_limit(0.0) is None
    slow = prefetch("timeout", disk_bandwidth=1e6)  # 1 MB/s: far slower than the deadline
    limit = slow.slow_limit(0.0)
    assert limit is not None and limit > 0
    assert limit * slow.seconds_per_token <= 1.0 + 0.25 * limit / 1024 + 1e-9
    with pytest.raises(ConfigError):
        TierConfig(1, prefetch="eager")


def test_cache_takes_no_more_from_storage_than_allowed() -> None:
    spec = tiny_spec()
    request = 96 * spec.kv_bytes_per_token + 3 * spec.state_bytes
    hits = {}
    for limit in (0, None):
        cache = build_cache(spec, 3 * request, "marconi", page_size=16)
        # no host room at all: everything demoted lives in storage only
        TierConfig(0, storage="disk", page_tokens=16).attach(cache)
        first = seq(1000, 96)
        run(cache, first)
        for base in range(2000, 12000, 1000):
            run(cache, seq(base, 96))
        lease = cache.admit([*first, 7], slow_tier_tokens=limit)
        assert isinstance(lease, Lease)
        hits[limit] = lease.tier_tokens.get("storage", 0)
        cache.abort(lease)
        cache.check_integrity()
    assert hits[0] == 0 and hits[None] == 96


def test_best_effort_serial_takes_nothing_from_storage(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "simulate",
        "--workload",
        "chat",
        "--requests",
        "120",
        "--model",
        "qwen3-next-80b-a3b",
        "--capacity",
        "10%",
        "--policy",
        "hycache",
        "--host-capacity",
        "0.1%",
        "--storage-capacity",
        "unlimited",
    ]
    rows = {}
    for policy in ("best_effort", "wait_complete"):
        assert main([*args, "--prefetch", policy]) == 0
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("hycache ")]
        rows[policy] = lines[-1].split()  # the tier table's row; its 4th column: hit_storage
    assert rows["best_effort"][3] == "0" and int(rows["wait_complete"][3]) > 0
