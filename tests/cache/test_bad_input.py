"""Bad calls to the facade: each gets a typed error naming what was wrong, and leaves the cache
exactly as it was (tree, pool, statistics, requests in flight), whatever came before it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease
from hycache.cache.presets import build_cache
from hycache.errors import ArgumentError, CacheUsageError, CapacityError, ConfigError
from hycache.spec.model import ModelSpec
from tests.cache.test_facade import tiny_spec

PAGE = 16


def spec() -> ModelSpec:
    return tiny_spec()


def new_cache(preset: str) -> HybridPrefixCache:
    s = spec()
    budget = s.kv_bytes_per_token * 2_000 + s.state_bytes * 12
    knobs: dict[str, object] = {"block_size": PAGE} if preset == "vllm" else {"page_size": PAGE}
    if preset == "sglang":
        knobs["strategy"] = "extra_buffer"
    return build_cache(s, budget, preset, **knobs)


def snapshot(cache: HybridPrefixCache) -> tuple[Any, ...]:
    """Everything a rejected call must leave untouched."""
    nodes = sorted(
        (
            (
                n.namespace or "",
                n.start,
                n.end,
                n.key,
                n.lock_ref,
                n.end_ref,
                n.state_ref,
                n.hits,
                *(repr(d) for d in n.data),
            )
            for n in cache.tree.iter_nodes()
        ),
    )
    leases = sorted(
        (
            lease.request_id,
            lease.active,
            bytes(lease.fed),
            repr(sorted(lease.working.items())),
            repr(sorted(lease.checkpoints.items())),
            tuple(lease.spare_slots),
            lease.published_upto,
        )
        for lease in cache.in_flight
    )
    pool = (dict(cache.pool.units), dict(cache.pool.used), dict(cache.pool.peak))
    return (nodes, leases, pool, cache.stats(), cache.in_flight.clock)


@dataclass(frozen=True)
class Probe:
    """A bad call: what it does, and the error it must raise."""

    name: str
    call: Callable[[HybridPrefixCache, Lease | None, Lease | None], object]
    error: type[Exception]
    argument: str | None = None


def _live(lease: Lease | None) -> Lease:
    if lease is None:
        raise LookupError("the probe needs a lease the driver does not have")
    return lease


def needs(probe: Probe) -> str | None:
    """Which lease a probe uses: "done" (a finished one), "running" (one in flight) or None."""
    if "finished lease" in probe.name:
        return "done"
    return "running" if "(lease," in probe.name else None


PROBES = [
    Probe("admit(None)", lambda c, a, d: c.admit(None), ArgumentError, "tokens"),
    Probe("admit(b'\\x01' * 9)", lambda c, a, d: c.admit(b"\x01" * 9), ArgumentError, "tokens"),
    Probe("admit('abc')", lambda c, a, d: c.admit("abc"), ArgumentError, "tokens"),
    Probe("admit([])", lambda c, a, d: c.admit([]), ArgumentError, "tokens"),
    Probe("admit([1.5, 2])", lambda c, a, d: c.admit([1.5, 2]), ArgumentError, "tokens"),
    Probe("admit([2**63])", lambda c, a, d: c.admit([2**63]), ArgumentError, "tokens"),
    Probe(
        "admit(t, max_new_tokens=1.5)",
        lambda c, a, d: c.admit([1, 2, 3], max_new_tokens=1.5),  # type: ignore[arg-type]
        ArgumentError,
        "max_new_tokens",
    ),
    Probe(
        "admit(t, max_new_tokens=-1)",
        lambda c, a, d: c.admit([1, 2, 3], max_new_tokens=-1),
        ArgumentError,
        "max_new_tokens",
    ),
    Probe(
        "admit(t, max_new_tokens=True)",
        lambda c, a, d: c.admit([1, 2, 3], max_new_tokens=True),
        ArgumentError,
        "max_new_tokens",
    ),
    Probe(
        "admit(t, namespace=5)",
        lambda c, a, d: c.admit([1, 2, 3], namespace=5),  # type: ignore[arg-type]
        ArgumentError,
        "namespace",
    ),
    Probe(
        "admit(t, session=1.0)",
        lambda c, a, d: c.admit([1, 2, 3], session=1.0),  # type: ignore[arg-type]
        ArgumentError,
        "session",
    ),
    Probe(
        "admit(t, token_budget=0)",
        lambda c, a, d: c.admit([1, 2, 3], token_budget=0),
        ArgumentError,
        "token_budget",
    ),
    Probe(
        "admit(t, token_budget=nan)",
        lambda c, a, d: c.admit([1, 2, 3], token_budget=math.nan),  # type: ignore[arg-type]
        ArgumentError,
        "token_budget",
    ),
    Probe(
        "admit(t, kernel_grid='yes')",
        lambda c, a, d: c.admit([1, 2, 3], kernel_grid="yes"),  # type: ignore[arg-type]
        ArgumentError,
        "kernel_grid",
    ),
    Probe(
        "admit(a prompt larger than the pool)",
        lambda c, a, d: c.admit(list(range(100_000))),
        CapacityError,
    ),
    Probe(
        "extend(lease, [1.5])",
        lambda c, a, d: c.extend(_live(a), [1.5]),  # type: ignore[list-item]
        ArgumentError,
        "tokens",
    ),
    Probe(
        "extend(lease, more than max_new_tokens)",
        lambda c, a, d: c.extend(_live(a), list(range(10_000))),
        CacheUsageError,
    ),
    Probe("extend(finished lease, [1])", lambda c, a, d: c.extend(_live(d), [1]), CacheUsageError),
    Probe("extend('lease', [1])", lambda c, a, d: c.extend("lease", [1]), CacheUsageError),  # type: ignore[arg-type]
    Probe(
        "record_checkpoint(lease, 1.5)",
        lambda c, a, d: c.record_checkpoint(_live(a), 1.5),  # type: ignore[arg-type]
        ArgumentError,
        "position",
    ),
    Probe(
        "record_checkpoint(lease, beyond the request)",
        lambda c, a, d: c.record_checkpoint(_live(a), 1_000_000),
        CacheUsageError,
    ),
    Probe(
        "record_checkpoint(lease, 16, reason=None)",
        lambda c, a, d: c.record_checkpoint(_live(a), PAGE, None),  # type: ignore[arg-type]
        ArgumentError,
        "reason",
    ),
    Probe("finish(finished lease)", lambda c, a, d: c.finish(_live(d)), CacheUsageError),
    Probe("finish(None)", lambda c, a, d: c.finish(None), CacheUsageError),  # type: ignore[arg-type]
    Probe("abort(finished lease)", lambda c, a, d: c.abort(_live(d)), CacheUsageError),
    Probe("publish(finished lease)", lambda c, a, d: c.publish(_live(d)), CacheUsageError),
    Probe("lookup(None)", lambda c, a, d: c.lookup(None), ArgumentError, "tokens"),
    Probe("end_session(None)", lambda c, a, d: c.end_session(None), ArgumentError, "session"),  # type: ignore[arg-type]
]


class Driver:
    """Good operations on one cache, with a request in flight and a finished one at hand."""

    def __init__(self, preset: str) -> None:
        self.cache = new_cache(preset)
        self.running: list[Lease] = []
        self.done: Lease | None = None
        self.next_base = 1_000

    def prompt(self, shared: int, fresh: int) -> list[int]:
        base, self.next_base = self.next_base, self.next_base + fresh
        return list(range(shared)) + list(range(base, base + fresh))

    def good(self, op: str, shared: int, fresh: int) -> None:
        cache = self.cache
        if op == "admit" or not self.running:
            lease = cache.admit(self.prompt(shared, fresh), max_new_tokens=8, session="s")
            if isinstance(lease, Lease):
                cache.record_planned(lease, up_to=lease.prompt_len)
                self.running.append(lease)
            return
        lease = self.running[0]
        if op == "publish":
            cache.publish(lease)
        elif op == "extend" and lease.length < lease.prompt_len + lease.max_new_tokens:
            cache.extend(lease, [7])
        elif op == "abort":
            cache.abort(self.running.pop(0))
            self.done = lease
        else:
            cache.finish(self.running.pop(0))
            self.done = lease


@pytest.mark.parametrize("probe", PROBES, ids=[p.name for p in PROBES])
def test_each_probe_raises_its_typed_error_and_changes_nothing(probe: Probe) -> None:
    driver = Driver("hycache")
    driver.good("admit", 64, 40)
    driver.good("finish", 0, 0)
    driver.good("admit", 64, 50)
    before = snapshot(driver.cache)
    running = driver.running[0] if driver.running else None
    with pytest.raises(probe.error) as caught:
        probe.call(driver.cache, running, driver.done)
    if probe.argument is not None:
        assert isinstance(caught.value, ArgumentError)
        assert caught.value.argument == probe.argument
        assert probe.argument in str(caught.value)
    assert snapshot(driver.cache) == before
    driver.cache.check_integrity()


GOOD = st.tuples(
    st.sampled_from(["admit", "admit", "extend", "publish", "finish", "abort"]),
    st.sampled_from([0, 16, 48, 64]),
    st.integers(min_value=1, max_value=120),
)
STEP = st.one_of(GOOD.map(lambda g: ("good", g)), st.sampled_from(PROBES).map(lambda p: ("bad", p)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(preset=st.sampled_from(["vllm", "sglang", "marconi", "hycache"]), steps=st.lists(STEP))
def test_bad_calls_interleaved_with_good_ones_leave_no_trace(
    preset: str, steps: list[tuple[str, Any]]
) -> None:
    """Random good operations with bad calls in between: after each bad call the cache is
    exactly as before it (compared field by field), and integrity holds after every step."""
    driver = Driver(preset)
    for kind, step in steps:
        if kind == "good":
            driver.good(*step)
        else:
            probe: Probe = step
            running = driver.running[0] if driver.running else None
            wanted = needs(probe)
            if (wanted == "running" and running is None) or (
                wanted == "done" and driver.done is None
            ):
                continue
            before = snapshot(driver.cache)
            with pytest.raises(probe.error):
                probe.call(driver.cache, running, driver.done)
            assert snapshot(driver.cache) == before, probe.name
        driver.cache.check_integrity()


@pytest.mark.parametrize(
    ("capacity", "knobs"),
    [
        (math.nan, {}),
        (math.inf, {}),
        (-1, {}),
        (0, {}),
        (1.5, {}),
        ("1GB", {}),
        (1 << 30, {"alpha": math.nan}),
        (1 << 30, {"alpha": "inf"}),
    ],
)
def test_build_cache_rejects_non_finite_and_non_positive_numbers(
    capacity: object, knobs: dict[str, object]
) -> None:
    with pytest.raises(ConfigError):
        build_cache(spec(), capacity, "marconi", **knobs)  # type: ignore[arg-type]


def test_check_integrity_raises_integrity_error_not_assert() -> None:
    """A leaked pool unit is reported with IntegrityError, which ``python -O`` keeps."""
    from hycache.errors import IntegrityError

    cache = new_cache("hycache")
    cache.pool.alloc("full", 1)  # a page nobody holds
    with pytest.raises(IntegrityError, match="full"):
        cache.check_integrity()
