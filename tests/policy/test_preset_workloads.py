"""Random multi-request workloads through every preset, under a small byte budget.

Each example draws a tiny hybrid model (full + recurrent, full + sliding window + recurrent, or
recurrent only), a preset with knobs, a budget of one to a few requests' working sets, and a
sequence of operations on up to three requests in flight at once:

* ``admit`` a prompt: a stem prefix plus a random tail (shared prefixes, branches), the next
  turn of an earlier conversation (its prompt + its output + new tokens) or an exact repeat;
* ``record`` the planned checkpoints up to some position, ``extend`` with decoded tokens;
* ``finish`` or ``abort``.

After every operation: ``cache.check_integrity()``; no pool resource is over its budget; every
request in flight still has its locked path attached with the same KV pages and the same state
(locked entries are never evicted; an SWA tombstone on it, outside the window, may be
revived). At admission the lease's hit is checked structurally (page-aligned, <= prompt - 1,
full-attention KV on the whole locked path, SWA KV in the window before the hit, a state
exactly at the hit) and against the brute-force ``ReferenceCache`` rebuilt from the tree's
content; after each finish, ``cache.lookup`` is compared with that reference on many queries,
and what finish reports as stored must be in the tree (never half-inserted). At the end every
request is finished or aborted and ``cache.clear()`` must leave every pool empty.

``HYCACHE_WORKLOAD_EXAMPLES`` sets the examples per preset (default 100) for longer hunts.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.cache.presets import build_cache
from hycache.components.full import PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.conformance.reference import GroupConfig, ReferenceCache
from hycache.errors import CapacityError
from hycache.spec.model import FullAttentionGroup, ModelSpec, RecurrentGroup, SlidingWindowGroup
from hycache.tree.keys import decode_tokens
from hycache.tree.node import Node

MAX_PROMPT = 150
MAX_NEW = 24
MAX_LIVE = 3
NAMESPACES = (None, None, None, "tenant-b")


def _full(layers: int = 2) -> FullAttentionGroup:
    return FullAttentionGroup(layers=layers, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2)


def _recurrent() -> RecurrentGroup:
    # 4 layers x (256 + 64) B = 1,280 B per state: the KV of 20 tokens (64 B/token/group)
    return RecurrentGroup(
        layers=4,
        mixer="gdn",
        recurrent_state_bytes=256,
        conv_state_bytes=64,
        state_dtype="float32",
        conv_dtype="float32",
        proj_params_per_layer=4096,
    )


def _spec(name: str, groups: tuple[object, ...]) -> ModelSpec:
    return ModelSpec(
        name=name,
        groups=groups,  # type: ignore[arg-type]
        hidden_size=64,
        vocab_size=100,
        active_mlp_params_per_token=8192,
        num_layers=4,
    )


SPECS: dict[str, ModelSpec] = {
    "FR": _spec("tiny-fr", (_full(), _recurrent())),
    "FSR": _spec(
        "tiny-fsr",
        (
            _full(),
            SlidingWindowGroup(
                layers=2, q_heads=2, kv_heads=1, head_dim=8, dtype_bytes=2, window=32
            ),
            _recurrent(),
        ),
    ),
    "R": _spec("tiny-r", (_recurrent(),)),
}


@dataclass(frozen=True)
class Setup:
    preset: str
    knobs: dict[str, object]


def _setups() -> dict[str, Setup]:
    return {
        # triton: FlashInfer's 64-token alignment makes a block wider than the 32-token windows
        "vllm": Setup("vllm", {"max_num_batched_tokens": 40, "gdn_backend": "triton"}),
        "sglang-no_buffer": Setup("sglang", {"strategy": "no_buffer", "chunked_prefill_size": 40}),
        "sglang-extra_buffer": Setup(
            "sglang", {"strategy": "extra_buffer", "page_size": 16, "track_interval": 16}
        ),
        "marconi": Setup("marconi", {"page_size": 1}),
        "hycache": Setup("hycache", {"page_size": 16, "token_budget": 48}),
    }


SETUPS = _setups()

# knob variations drawn per example, per setup
VARIATIONS: dict[str, st.SearchStrategy[dict[str, object]]] = {
    "vllm": st.fixed_dictionaries(
        {
            "retention_interval": st.sampled_from([None, 0, 32]),
            "scheduler_grid": st.sampled_from(["min", "mamba"]),
            "other_block_sizes": st.sampled_from(["", "8"]),
            "admission": st.sampled_from(["always", "second_sighting"]),
        }
    ),
    "sglang-no_buffer": st.fixed_dictionaries(
        {
            "max_states_per_path": st.sampled_from([None, 2]),
            "session_aware": st.booleans(),
        }
    ),
    "sglang-extra_buffer": st.fixed_dictionaries(
        {
            "max_states_per_path": st.sampled_from([None, 1]),
            "session_aware": st.booleans(),
        }
    ),
    "marconi": st.fixed_dictionaries({"alpha": st.sampled_from([0.0, 1.0, 2.0])}),
    "hycache": st.fixed_dictionaries(
        {
            "interval": st.sampled_from([0, 32]),
            "admission": st.sampled_from(["always", "second_sighting"]),
            "session_aware": st.booleans(),
        }
    ),
}


def _working_set(cache: HybridPrefixCache, tokens: int) -> dict[str, int]:
    page = cache.page_size
    demand = {c.kind: -(-tokens // page) for c in cache.kv_components}
    if cache.recurrent is not None:
        demand["recurrent"] = cache.config.running_slots
    return demand


@functools.cache
def _min_capacity(setup_name: str, spec_name: str) -> int:
    """The smallest budget whose empty pool fits one request of the longest length."""
    setup, spec = SETUPS[setup_name], SPECS[spec_name]

    def fits(capacity: int) -> bool:
        cache = build_cache(spec, capacity, setup.preset, **setup.knobs)
        return cache.pool.fits_empty(_working_set(cache, MAX_PROMPT + MAX_NEW))

    lo, hi = 1, 1 << 16
    while not fits(hi):
        hi *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


# ---------------------------------------------------------------------- reference rebuild
def _groups(spec: ModelSpec) -> list[GroupConfig]:
    out = []
    for g in spec.groups:
        out.append(GroupConfig(g.kind, g.window if isinstance(g, SlidingWindowGroup) else None))
    return out


def _path_tokens(node: Node) -> list[int]:
    tokens: list[int] = []
    for n in node.path_from_root():
        tokens.extend(n.tokens)
    return tokens


def _reference(cache: HybridPrefixCache) -> ReferenceCache:
    """A ReferenceCache holding exactly what the cache's tree holds now (and its locks)."""
    ref = ReferenceCache(cache.page_size, _groups(cache.spec))
    drops: list[tuple[str, list[int], int, int, str | None]] = []
    for node in cache.tree.iter_nodes():
        tokens = _path_tokens(node)
        states = [node.end] if cache.recurrent is not None and cache.recurrent.has(node) else []
        ref.insert(tokens, states, node.namespace)
        for c in cache.kv_components:
            if not c.has(node):
                drops.append((c.kind, tokens, node.start, node.end, node.namespace))
    for kind, tokens, start, end, ns in drops:
        if kind == "full":
            ref.drop_full(tokens, start, ns)
        else:
            ref.drop_swa(tokens, start, end, ns)
    for lease in cache.in_flight:
        if lease.locked is not None:
            ref.lock(decode_tokens(lease.key), lease.hit, lease.namespace)
    return ref


# ---------------------------------------------------------------------- live lease tracking
@dataclass
class Live:
    lease: Lease
    prompt: list[int]
    output: list[int]
    pages: dict[str, list[int | None]]
    state: int | None
    fed: int = 0


def _kv_pages(cache: HybridPrefixCache, node: Node | None) -> dict[str, list[int | None]]:
    """The KV page ids on the locked path, per component, one entry per page; a page of an SWA
    tombstone (windows slide: no request reads it from this hit) is None."""
    pages: dict[str, list[int | None]] = {c.name: [] for c in cache.kv_components}
    if node is None:
        return pages
    for n in node.path_from_root():
        for c in cache.kv_components:
            data = n.data[c.slot]
            if data is None and isinstance(c, SlidingWindowComponent):
                pages[c.name].extend([None] * (n.length // cache.page_size))
                continue
            assert data is not None, f"{c.name} data missing on locked {n}"
            pages[c.name].extend(data)
    return pages


def _check_locked(cache: HybridPrefixCache, live: Live) -> None:
    lease = live.lease
    node = lease.locked
    if node is None:
        return
    root = cache.tree.root(lease.namespace)
    walk: Node | None = node
    while walk is not None and walk is not root:
        assert walk.parent is not None, f"locked {walk} was detached"
        assert walk.lock_ref > 0
        walk = walk.parent
    assert walk is root
    assert node.end == lease.hit
    now = _kv_pages(cache, node)
    for name, before in live.pages.items():  # a tombstone may come back, nothing may change
        assert len(now[name]) == len(before), f"locked {name} path changed length"
        assert all(b is None or a == b for a, b in zip(now[name], before, strict=True)), (
            f"locked {name} KV pages changed"
        )
    if cache.recurrent is not None:
        assert cache.recurrent.state_of(node) == live.state, "locked state changed"


def _check_budget(cache: HybridPrefixCache) -> None:
    pool = cache.pool
    for resource, budget in pool.budgets.items():
        assert pool.used[resource] <= budget, f"{resource}: {pool.used[resource]} > {budget}"
    assert pool.used_bytes <= pool.budget_bytes


def _check_admitted(cache: HybridPrefixCache, lease: Lease, prompt: list[int]) -> None:
    n, h, page = len(prompt), lease.hit, cache.page_size
    assert h % page == 0 and lease.kv_hit % page == 0
    assert 0 <= h <= lease.kv_hit <= n - 1
    if h == 0:
        assert lease.locked is None and lease.source_state is None
        return
    node = lease.locked
    assert node is not None and node.end == h
    assert _path_tokens(node) == prompt[:h]
    for n_ in node.path_from_root():
        for c in cache.kv_components:
            if not isinstance(c, SlidingWindowComponent):  # SWA: only the window (below)
                assert c.has(n_), f"hit {h} but {c.name} KV missing on {n_}"
    for c in cache.kv_components:
        if isinstance(c, SlidingWindowComponent):
            assert c.deepest_accepted(node.path_from_root(), h) == h
    if cache.recurrent is not None:
        assert lease.source_state is not None
        assert cache.recurrent.state_of(node) == lease.source_state


# ---------------------------------------------------------------------- the workload
@dataclass
class Workload:
    cache: HybridPrefixCache
    alphabet: int
    stems: list[list[int]]
    history: list[tuple[list[int], str | None]] = field(default_factory=list)
    live: list[Live] = field(default_factory=list)

    def check(self) -> None:
        self.cache.check_integrity()
        _check_budget(self.cache)
        for live in self.live:
            _check_locked(self.cache, live)

    def compare(self, extra: list[tuple[list[int], str | None]]) -> None:
        ref = _reference(self.cache)
        queries = list(extra) + self.history[-6:]
        queries += [(stem, ns) for stem in self.stems for ns in (None, "tenant-b")]
        for tokens, ns in queries:
            for cut in {len(tokens), len(tokens) - 1, len(tokens) // 2}:
                q = tokens[: max(cut, 0)]
                assert self.cache.lookup(q, ns) == ref.match(q, ns), (q, ns)

    def prompt(self, data: st.DataObject) -> tuple[list[int], str | None]:
        tail = data.draw(st.lists(st.integers(0, self.alphabet), max_size=40), label="tail")
        kind = data.draw(st.sampled_from(["stem", "stem", "turn", "turn", "repeat"]), label="kind")
        ns = data.draw(st.sampled_from(NAMESPACES), label="ns")
        if kind in ("turn", "repeat") and self.history:
            base, ns = data.draw(st.sampled_from(self.history), label="base")
            tokens = list(base) if kind == "repeat" else list(base) + tail
        else:
            stem = data.draw(st.sampled_from(self.stems), label="stem")
            cut = data.draw(st.integers(0, len(stem)), label="cut")
            tokens = stem[:cut] + tail
        tokens = tokens[:MAX_PROMPT] or [0]
        return tokens, ns

    def admit(self, data: st.DataObject) -> None:
        prompt, ns = self.prompt(data)
        max_new = data.draw(st.integers(0, MAX_NEW), label="max_new")
        session = data.draw(st.sampled_from([None, "s0", "s1"]), label="session")
        expected = _reference(self.cache).match(prompt[:-1], ns)
        assert self.cache.lookup(prompt[:-1], ns) == expected
        try:
            got = self.cache.admit(prompt, max_new_tokens=max_new, namespace=ns, session=session)
        except CapacityError:
            raise AssertionError("budget was sized for the longest request") from None
        if isinstance(got, Wait):
            assert self.live, "Wait with nothing in flight"
            assert got.short_bytes and all(v > 0 for v in got.short_bytes.values())
            return
        lease = got
        assert lease.kv_hit == expected[1]
        if lease.hit != expected[0]:
            # nothing in flight could ever free what its own reused path pins: a miss instead
            assert lease.hit == 0 and not self.live, (lease.hit, expected)
        _check_admitted(self.cache, lease, prompt)
        output = data.draw(
            st.lists(st.integers(0, self.alphabet), min_size=max_new, max_size=max_new),
            label="output",
        )
        pages = _kv_pages(self.cache, lease.locked)
        state = None
        if self.cache.recurrent is not None and lease.locked is not None:
            state = self.cache.recurrent.state_of(lease.locked)
        self.live.append(Live(lease, prompt, output, pages, state))

    def record(self, data: st.DataObject, live: Live) -> None:
        lease = live.lease
        end = lease.prompt_len + live.fed
        up_to = data.draw(st.integers(lease.hit, end), label="up_to")
        got = self.cache.record_planned(live.lease, up_to=up_to)
        grid = self.cache.checkpoint_policy.state_grid or self.cache.page_size
        for position in got:
            assert position % grid == 0 and lease.hit < position <= up_to
            assert position in lease.checkpoints

    def extend(self, data: st.DataObject, live: Live) -> None:
        left = len(live.output) - live.fed
        count = data.draw(st.integers(0, left), label="extend")
        self.cache.extend(live.lease, live.output[live.fed : live.fed + count])
        live.fed += count

    def finish(self, live: Live) -> None:
        cache, lease = self.cache, live.lease
        self.cache.extend(lease, live.output[live.fed :])
        live.fed = len(live.output)
        cache.record_planned(lease)
        self.live.remove(live)
        full = live.prompt + live.output
        result = cache.finish(lease)
        page = cache.page_size
        whole = len(full) - len(full) % page
        if cache.checkpoint_policy.kv_to_last_state:  # KV only up to the deepest state
            assert result.cached_tokens <= whole and result.cached_tokens % page == 0
        else:
            assert result.cached_tokens in (0, whole)
        if result.cached_tokens and cache.kv_components:
            hit, kv = cache.lookup(full[: result.cached_tokens], lease.namespace)
            assert kv == result.cached_tokens, "finish half-inserted the KV"
        for position in result.states_inserted:
            assert position <= result.cached_tokens
            hit, _kv = cache.lookup(full[:position], lease.namespace)
            assert hit == position, f"state at {position} reported stored but not found"
        self.history.append((full, lease.namespace))

    def abort(self, live: Live) -> None:
        self.live.remove(live)
        self.cache.abort(live.lease)


def run_workload(data: st.DataObject, setup_name: str) -> None:
    setup = SETUPS[setup_name]
    spec_name = data.draw(st.sampled_from(sorted(SPECS)), label="spec")
    spec = SPECS[spec_name]
    knobs = dict(setup.knobs)
    knobs.update(data.draw(VARIATIONS[setup_name], label="knobs"))
    factor = data.draw(st.sampled_from([1.0, 1.0, 1.3, 1.6, 2.5]), label="budget factor")
    extra_states = data.draw(st.integers(0, 4), label="extra states")
    capacity = int(_min_capacity(setup_name, spec_name) * factor) + extra_states * 1280
    track_ids = data.draw(st.sampled_from([True, True, True, False]), label="track_ids")
    cache = build_cache(spec, capacity, setup.preset, track_ids=track_ids, **knobs)
    note(f"{setup_name} {spec_name} capacity={capacity} knobs={knobs} track_ids={track_ids}")
    alphabet = data.draw(st.sampled_from([1, 3, 50]), label="alphabet")
    stems = data.draw(
        st.lists(
            st.lists(st.integers(0, alphabet), min_size=20, max_size=MAX_PROMPT),
            min_size=1,
            max_size=3,
        ),
        label="stems",
    )
    work = Workload(cache, alphabet, stems)
    steps = data.draw(st.integers(6, 40), label="steps")
    for _ in range(steps):
        ops = ["admit"] if len(work.live) < MAX_LIVE else ["end_session"]
        if work.live:
            ops += ["record", "extend", "finish", "finish", "finish", "abort"]
        op = data.draw(st.sampled_from(ops), label="op")
        if op == "admit":
            work.admit(data)
        elif op == "end_session":
            cache.end_session(data.draw(st.sampled_from(["s0", "s1"]), label="session"))
        else:
            live = data.draw(st.sampled_from(work.live), label="lease")
            if op == "record":
                work.record(data, live)
            elif op == "extend":
                work.extend(data, live)
            elif op == "finish":
                work.finish(live)
                work.compare([(live.prompt + live.output, live.lease.namespace)])
            else:
                work.abort(live)
        work.check()
    for live in list(work.live):
        if data.draw(st.booleans(), label="finish at end"):
            work.finish(live)
        else:
            work.abort(live)
        work.check()
    work.compare([])
    stats = cache.stats()
    event(f"hits: {min(stats.requests_hit, 3)}")
    event(f"requests: {min(stats.requests // 4, 3)}")
    event(f"spec {spec_name} hit {bool(stats.requests_hit)}")
    event(f"evictions: {bool(stats.evictions)}")
    event(f"waits: {bool(stats.waits)}")
    event(f"states inserted: {min(stats.states_inserted, 3)}")
    cache.clear()
    cache.check_integrity()
    assert cache.pool.used_bytes == 0
    assert all(v == 0 for v in cache.pool.used.values())
    assert all(v == 0 for v in cache.pool.units.values())
    assert not list(cache.tree.iter_nodes())


@pytest.mark.parametrize("setup_name", sorted(SETUPS))
@settings(
    max_examples=int(os.environ.get("HYCACHE_WORKLOAD_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_random_workload(setup_name: str, data: st.DataObject) -> None:
    run_workload(data, setup_name)


def test_components_cover_the_kinds() -> None:
    """The setups exercise paged KV, sliding window and recurrent components."""
    cache = build_cache(SPECS["FSR"], 1 << 30, "hycache")
    kinds = {type(c) for c in cache.tree.components}
    assert RecurrentComponent in kinds and SlidingWindowComponent in kinds
    assert any(issubclass(k, PagedKVComponent) for k in kinds)
