"""``HybridPrefixCache``: the facade the simulator and the engine drive.

Lifecycle of a request::

    lease = cache.admit(tokens, max_new_tokens=...)   # match, lock, reserve working memory
    for end in lease.plan.chunk_ends:                 # prefill chunk by chunk; at each planned
        cache.record_checkpoint(lease, position)      # checkpoint copy the state BEFORE the
                                                      # next chunk overwrites it
    cache.extend(lease, decoded_tokens)               # decode (decode-interval checkpoints)
    cache.finish(lease)   or   cache.abort(lease)     # insert KV + admitted states, unlock

Memory: every byte (cached entries and in-flight working sets) comes from one pool and never
exceeds its budget; when an allocation does not fit, the eviction policy frees unlocked entries
first. A request that cannot fit even into an empty pool raises CapacityError; one that would
fit once requests in flight finish gets a ``Wait``.
"""

from __future__ import annotations

import hashlib

from hycache.components.base import Component
from hycache.components.full import FullComponent, PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import CacheUsageError, CapacityError, ConfigError
from hycache.lease import FinishResult, Lease, Wait
from hycache.memory.pool import MemoryPool
from hycache.policy.base import (
    AdmissionPolicy,
    CheckpointPolicy,
    EvictionPolicy,
    PlanInput,
)
from hycache.spec import ModelSpec
from hycache.stats import CacheStats, Counters
from hycache.tree.base import MatchResult
from hycache.tree.keys import TOKEN_BYTES, TokenInput, encode_tokens
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree

#: how many clock ticks (admits and finishes) a Wait keeps ``PlanInput.under_pressure`` set
PRESSURE_MEMORY = 64


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class HybridPrefixCache:
    """One model's prefix cache: a radix tree, a pool and a policy bundle."""

    def __init__(
        self,
        spec: ModelSpec,
        pool: MemoryPool,
        *,
        page_size: int,
        checkpoint: CheckpointPolicy,
        admission: AdmissionPolicy,
        eviction: EvictionPolicy,
        running_slots: int = 1,
        max_states_per_path: int | None = None,
        offgrid: str = "drop",
        token_budget: int | None = None,
        states_enabled: bool = True,
        name: str = "custom",
    ) -> None:
        if offgrid not in ("drop", "misplace"):
            raise ConfigError(f"offgrid must be 'drop' or 'misplace', got {offgrid!r}")
        self.spec = spec
        self.pool = pool
        self.name = name
        self.checkpoint_policy = checkpoint
        self.admission = admission
        self.eviction = eviction
        self.running_slots = running_slots
        self.max_states_per_path = max_states_per_path
        self.offgrid = offgrid
        self.default_token_budget = token_budget
        self.states_enabled = states_enabled
        self.tree = RadixTree(page_size, self._components(spec, pool, page_size))
        self.page_size = page_size
        self.kv_components = [c for c in self.tree.components if isinstance(c, PagedKVComponent)]
        self.recurrent = next(
            (c for c in self.tree.components if isinstance(c, RecurrentComponent)), None
        )
        self.clock = 0
        self.counters = Counters()
        self.leases: dict[int, Lease] = {}
        self.live_sessions: set[str] = set()
        self._node_session: dict[Node, str] = {}
        self._state_reason: dict[Node, str] = {}  # why the state at a node was checkpointed
        self._next_id = 0
        self._pressure_until = 0  # clock until which a recent Wait counts as memory pressure
        eviction.attach(self)

    @staticmethod
    def _components(spec: ModelSpec, pool: MemoryPool, page: int) -> list[Component]:
        components: list[Component] = []
        for group in spec.groups:
            if group.kind == "full":
                store = pool.page_store("full")
                components.append(FullComponent(store, bytes_per_page=pool.unit_bytes("full")))
            elif group.kind == "swa":
                window = group.window
                if window % page:
                    raise ConfigError(
                        f"page size {page} does not divide the sliding window {window}"
                    )
                components.append(
                    SlidingWindowComponent(
                        pool.page_store("swa"), window, bytes_per_page=pool.unit_bytes("swa")
                    )
                )
            else:
                components.append(
                    RecurrentComponent(
                        pool.slot_store("recurrent"),
                        bytes_per_state=pool.unit_bytes("recurrent"),
                    )
                )
        return components

    # ------------------------------------------------------------------ memory
    def is_live(self, node: Node) -> bool:
        session = self._node_session.get(node)
        return session is not None and session in self.live_sessions

    def _locked_bytes(self) -> dict[str, int]:
        seen: set[Node] = set()
        held = dict.fromkeys(self.pool.budgets, 0)
        for lease in self.leases.values():
            node = lease.locked
            while node is not None and node.parent is not None and node not in seen:
                seen.add(node)
                for c in self.tree.components:
                    if self.eviction.pinned(node, c):
                        held[self.pool.resource_of(c.kind)] += c.bytes_on(node)
                node = node.parent
        return held

    def _in_flight_bytes(self) -> dict[str, int]:
        held = dict.fromkeys(self.pool.budgets, 0)
        for lease in self.leases.values():
            for kind, ids in lease.working.items():
                held[self.pool.resource_of(kind)] += len(ids) * self.pool.unit_bytes(kind)
            for _slot, _reason in lease.checkpoints.values():
                held[self.pool.resource_of("recurrent")] += self.pool.unit_bytes("recurrent")
        return held

    def _reclaimable(self) -> dict[str, int]:
        locked, flight = self._locked_bytes(), self._in_flight_bytes()
        return {r: self.pool.used[r] - locked[r] - flight[r] for r in self.pool.budgets}

    def _ensure(self, demand: dict[str, int]) -> dict[str, int]:
        """Evict until ``demand`` (units per kind) fits. Returns the bytes still short per
        resource (empty: it fits now). Evicts nothing if eviction could not make it fit."""
        short = self.pool.shortfall(demand)
        if not short:
            return short
        reclaimable = self._reclaimable()
        if any(reclaimable[r] < missing for r, missing in short.items()):
            return short
        return self._evict_for(demand, short)

    def _evict_for(self, demand: dict[str, int], short: dict[str, int]) -> dict[str, int]:
        """The eviction rounds of ``_ensure``: evict until ``demand`` fits or nothing is left."""
        while short:
            # One round ranks the candidates once; an entry that only became evictable during
            # the round (a parent whose last child went) waits for the next round.
            progress = False
            try:
                while short:
                    victim = self.eviction.next_victim(next(iter(short)))
                    if victim is None:
                        break
                    self._evict(*victim)
                    progress = True
                    short = self.pool.shortfall(demand)
            finally:
                self.eviction.end_round()
            if not progress:
                break
        return short

    def _split_at(self, key: bytes, position: int, ns: str | None) -> Node:
        """``tree.split_at`` that registers a node the split creates (see ``_register_split``)."""
        version = self.tree.version
        node = self.tree.split_at(key, position, ns)
        if self.tree.version != version:
            self._register_split(node)
        return node

    def _register_split(self, upper: Node) -> None:
        """A split created ``upper``, holding KV pages the eviction policy has never seen:
        register them, or they could never be evicted."""
        for component in self.kv_components:
            if component.has(upper):
                self.eviction.on_insert(upper, component)

    def _evict(self, node: Node, component: Component) -> None:
        if isinstance(component, RecurrentComponent):
            self.counters.evictions[component.name] += 1
            self.counters.evicted_bytes += component.bytes_on(node)
            self.tree.release(node, component)
        else:
            assert not node.children and not node.lock_ref
            for c in self.tree.components:
                if c.has(node):
                    self.counters.evictions[c.name] += 1
                    self.counters.evicted_bytes += c.bytes_on(node)
            self.tree.remove_leaf(node)
        if node.parent is None:
            self._node_session.pop(node, None)
        if not isinstance(component, RecurrentComponent) or node.parent is None:
            self._state_reason.pop(node, None)

    # ------------------------------------------------------------------ lifecycle
    def admit(
        self,
        tokens: TokenInput,
        *,
        max_new_tokens: int = 0,
        namespace: str | None = None,
        session: str | None = None,
        token_budget: int | None = None,
    ) -> Lease | Wait:
        """Match the prompt (the last token is always recomputed), lock the reused path,
        reserve the working set (KV pages for prompt + ``max_new_tokens`` beyond the hit and
        ``running_slots`` states) and plan the prefill. Mutates the cache (on Wait: only a node
        split)."""
        key = encode_tokens(tokens)
        n = len(key) // TOKEN_BYTES
        if n < 1:
            raise CacheUsageError("a request needs at least one prompt token")
        if max_new_tokens < 0 or (token_budget is not None and token_budget < 1):
            raise CacheUsageError("max_new_tokens must be >= 0 and token_budget >= 1")
        self.clock += 1
        result = self.tree.match(key[: (n - 1) * TOKEN_BYTES], namespace)
        hit = result.hit
        locked: Node | None = None
        if hit > 0:
            locked = self._split_at(key, hit, namespace)
            self.tree.lock(locked)
        demand = self._working_set(n + max_new_tokens - hit)
        # The reused prefix's pages are part of the working set too: the request can only ever
        # run if its whole sequence fits (recomputed from scratch if need be).
        whole = self._working_set(n + max_new_tokens)
        if not self.pool.fits_empty(whole):
            if locked is not None:
                self.tree.unlock(locked)
            need = self.pool.demand_bytes(whole)
            raise CapacityError(
                f"request of {n} + {max_new_tokens} tokens needs {need} bytes of working memory; "
                f"the {self.pool.describe()} pool can never hold it"
            )
        short = self._ensure(demand)
        if short and locked is not None and not self.leases:
            # Nothing in flight will ever free memory: only this request's own lock (its reused
            # path and the states on it) stands in the way. Admit it as a miss rather than
            # answer a Wait that no finish could ever end.
            self.tree.unlock(locked)
            locked, hit, demand = None, 0, whole
            short = self._ensure(demand)
        if short:
            if locked is not None:
                self.tree.unlock(locked)
            self.counters.waits += 1
            self._pressure_until = self.clock + PRESSURE_MEMORY
            return Wait("memory is held by requests in flight", short)
        working = {kind: self.pool.alloc(kind, count) for kind, count in demand.items()}
        budget = self.default_token_budget if token_budget is None else token_budget
        plan = self.checkpoint_policy.plan(
            PlanInput(
                n,
                hit,
                result.kv_hit,
                self.page_size,
                budget,
                max_new_tokens,
                {
                    r: (stored, self.counters.reason_hits[r])
                    for r, stored in self.counters.reason_inserted.items()
                },
                self.clock < self._pressure_until,
            )
        )
        source = None
        if self.recurrent is not None and locked is not None:
            source = self.recurrent.state_of(locked)
            self.counters.cow_copies += source is not None
            if source is not None:
                self.counters.reason_hits[self._state_reason.get(locked, "unknown")] += 1
        path = [] if locked is None else locked.path_from_root()
        self.eviction.on_hit(path, locked)
        self._count_match(n, hit, result.kv_hit, list(result.path))
        if session is not None:
            self.live_sessions.add(session)
            for node in path:
                self._node_session[node] = session
        lease = Lease(
            self._next_id,
            key,
            n,
            max_new_tokens,
            namespace,
            session,
            hit,
            result.kv_hit,
            plan,
            locked,
            source,
            working,
        )
        self._next_id += 1
        self.leases[lease.request_id] = lease
        return lease

    def _working_set(self, tokens: int) -> dict[str, int]:
        """Units per kind a running request needs for ``tokens`` new tokens."""
        demand = {c.kind: _ceil_div(tokens, self.page_size) for c in self.kv_components}
        if self.recurrent is not None:
            demand["recurrent"] = self.running_slots
        return demand

    def _count_match(self, n: int, hit: int, kv_hit: int, path: list[Node]) -> None:
        c = self.counters
        c.requests += 1
        c.prompt_tokens += n
        c.kv_matched_tokens += kv_hit
        c.reused_tokens += hit
        c.requests_hit += hit > 0
        for component in self.tree.components:
            accepted = component.deepest_accepted(path, kv_hit) if kv_hit else 0
            if accepted > 0:
                c.component_hits[component.name] += 1
            else:
                c.component_misses[component.name] += 1

    def _active(self, lease: Lease) -> None:
        if not lease.active or self.leases.get(lease.request_id) is not lease:
            raise CacheUsageError(f"request {lease.request_id} is not in flight")

    def record_checkpoint(self, lease: Lease, position: int, reason: str = "chunk") -> int | None:
        """The engine is at ``position`` (a prefix length of the request) and will copy its
        state now, before extending. Returns the slot to copy into, or None when no state is
        kept there (no recurrent group, off the state grid, or no memory even after eviction).
        With ``offgrid="misplace"`` (the vLLM #54076 bug, for testing checkers) an off-grid
        state is filed at the grid position below it instead: silently wrong."""
        self._active(lease)
        if not lease.hit < position <= lease.prompt_len + lease.max_new_tokens:
            raise CacheUsageError(f"checkpoint {position} outside ({lease.hit}, request end]")
        if self.recurrent is None or not self.states_enabled:
            return None
        grid = self.checkpoint_policy.state_grid or self.page_size
        if position % grid:
            if self.offgrid == "drop" or position < grid:
                self.counters.offgrid_dropped += 1
                return None
            self.counters.offgrid_misplaced += 1
            position -= position % grid
        if position % self.page_size:
            self.counters.offgrid_dropped += 1
            return None
        existing = lease.checkpoints.get(position)
        if existing is not None:
            return existing[0]
        if self._ensure({"recurrent": 1}):
            self.counters.checkpoints_skipped += 1
            return None
        slot = self.pool.alloc("recurrent", 1)[0]
        lease.checkpoints[position] = (slot, reason)
        self.counters.checkpoints_recorded += 1
        return slot

    def record_planned(self, lease: Lease, *, up_to: int | None = None) -> list[int]:
        """Record every planned checkpoint at or before ``up_to`` (default: all) — what a
        simulator does in place of running the model. Returns the positions that got a slot."""
        limit = lease.prompt_len + lease.max_new_tokens if up_to is None else up_to
        got = []
        for point in lease.plan.checkpoints:
            if (
                point.position <= limit
                and self.record_checkpoint(lease, point.position, point.reason) is not None
            ):
                got.append(point.position)
        return got

    def extend(self, lease: Lease, tokens: TokenInput) -> None:
        """Append decoded tokens whose KV now exists (fed back into the model)."""
        self._active(lease)
        key = encode_tokens(tokens)
        if lease.length + len(key) // TOKEN_BYTES > lease.prompt_len + lease.max_new_tokens:
            raise CacheUsageError(
                f"request {lease.request_id}: more than max_new_tokens={lease.max_new_tokens}"
            )
        lease.fed += key

    def finish(self, lease: Lease) -> FinishResult:
        """Insert the request's KV (whole pages) and its admitted states, release everything
        else and the locks. Never half-inserts: if the KV cannot be placed, nothing is."""
        self._active(lease)
        self.clock += 1
        key, ns = lease.full_key, lease.namespace
        total = len(key) // TOKEN_BYTES
        cached = total - total % self.page_size
        for component in self.kv_components:
            self.pool.free(component.kind, lease.working.pop(component.kind))
        key = key[: cached * TOKEN_BYTES]
        found = self.tree.match(key, ns)
        inserted: list[int] = []
        refused: list[int] = []
        if self._ensure(self._pages_needed(found, cached)):
            cached = 0  # cannot place the KV: store nothing
        path = self.tree.insert(key, ns, after=found) if cached else []
        for node in path:
            for component in self.kv_components:
                self.eviction.on_insert(node, component)
        candidates = dict(lease.checkpoints)
        running = list(lease.working.pop("recurrent", ()))
        if (
            lease.plan.keep_final_state
            and self.states_enabled
            and running
            and total == cached
            and total > lease.hit
            and total not in candidates  # a checkpoint already holds that state
        ):
            candidates[total] = (running.pop(), "final")
        for position in sorted(candidates):
            slot, reason = candidates[position]
            if self._store_state(path, key, ns, position, slot, reason, cached):
                inserted.append(position)
            else:
                refused.append(position)
                self.pool.free("recurrent", [slot])
        if running:
            self.pool.free("recurrent", running)
        if self.max_states_per_path is not None and path:
            capped = self._cap_states(path[-1])
            inserted = [p for p in inserted if p not in capped]
        if path:
            if lease.session is not None:
                # after the state splits: the nodes they created belong to the session too
                for node in path[-1].path_from_root():
                    self._node_session[node] = lease.session
            # Without a KV component nothing fills the path: the part past the last state
            # stored is an empty leaf that holds nothing and no policy could ever evict; prune.
            self.tree.prune(path[-1])
        self._release(lease)
        return FinishResult(cached, tuple(inserted), tuple(refused))

    def publish(self, lease: Lease) -> list[int]:
        """The request's prefill is done: make its prompt KV (whole pages) and the states it
        copied so far part of the cache now, as vLLM's and SGLang's prefix caches do with a
        running request's computed blocks, so that requests arriving while it decodes can
        reuse them and the states stop holding slots of its own. The request keeps its
        prompt locked (it attends to that KV while decoding); ``finish`` inserts the rest.
        Returns the positions of the states stored. Publishes nothing if the pages cannot be
        placed. Simulators call it; an engine that writes KV into pages at ``finish`` only
        (the reference engine) must not."""
        self._active(lease)
        key, ns = lease.full_key, lease.namespace
        upto = lease.prompt_len - lease.prompt_len % self.page_size
        if upto <= lease.hit:
            return []
        key = key[: upto * TOKEN_BYTES]
        found = self.tree.match(key, ns)
        need = self._pages_needed(found, upto)
        moved: dict[str, int] = {}
        for kind, count in need.items():  # the pages move from the request to the tree
            ids = list(lease.working.get(kind, ()))
            moved[kind] = min(count, len(ids))
            self.pool.free(kind, ids[: moved[kind]])
            lease.working[kind] = ids[moved[kind] :]
        if self._ensure(need):
            for kind, count in moved.items():  # cannot place them: take the pages back
                lease.working[kind] = [*lease.working[kind], *self.pool.alloc(kind, count)]
            return []
        path = self.tree.insert(key, ns, after=found)
        for node in path:
            for component in self.kv_components:
                self.eviction.on_insert(node, component)
        stored = []
        for position in sorted(p for p in lease.checkpoints if p <= upto):
            slot, reason = lease.checkpoints.pop(position)
            if self._store_state(path, key, ns, position, slot, reason, upto):
                stored.append(position)
            else:
                self.pool.free("recurrent", [slot])
        node = self._split_at(key, upto, ns)
        self.tree.lock(node)
        if lease.locked is not None:
            self.tree.unlock(lease.locked)
        lease.locked = node
        if lease.session is not None:
            for on_path in node.path_from_root():
                self._node_session[on_path] = lease.session
        return stored

    def _store_state(
        self,
        path: list[Node],
        key: bytes,
        ns: str | None,
        position: int,
        slot: int,
        reason: str,
        cached: int,
    ) -> bool:
        """Hand state ``slot`` (taken at ``position``) to the tree if admitted; ``path`` is the
        insert path of ``key`` (kept current as nodes split)."""
        assert self.recurrent is not None
        if position > cached:
            return False
        if self.admission.uses_sightings:
            digest = hashlib.blake2b(key[: position * TOKEN_BYTES], digest_size=16)
            digest.update(repr(ns).encode())
            sighting = digest.digest()
        else:
            sighting = b""
        if not self.admission.admit(sighting, reason):
            self.counters.states_rejected += 1
            return False
        version = self.tree.version
        node = self.tree.boundary_on_path(path, position)
        if self.tree.version != version:
            self._register_split(node)
        if not self.recurrent.adopt(node, slot):
            self.counters.states_duplicate += 1
            return False
        self.counters.states_inserted += 1
        self.counters.reason_inserted[reason] += 1
        self._state_reason[node] = reason
        self.eviction.on_insert(node, self.recurrent)
        return True

    def _cap_states(self, deepest: Node) -> set[int]:
        """Keep at most ``max_states_per_path`` states on the path to ``deepest`` (the deepest
        ones); shallower unlocked states go. Returns the positions whose state went."""
        assert self.recurrent is not None and self.max_states_per_path is not None
        holders = [n for n in deepest.path_from_root() if self.recurrent.has(n)]
        capped: set[int] = set()
        for node in holders[: max(0, len(holders) - self.max_states_per_path)]:
            if not self.eviction.pinned(node, self.recurrent):
                self.counters.states_capped += 1
                capped.add(node.end)
                self.tree.release(node, self.recurrent)
        return capped

    def _pages_needed(self, found: MatchResult, length: int) -> dict[str, int]:
        """KV pages per kind an insert of ``length`` tokens would allocate, given the match
        ``found`` of exactly those tokens."""
        if not length:
            return {}
        need = {}
        for component in self.kv_components:
            revive = sum(
                n.length for n in found.path if n.end <= found.matched and not component.has(n)
            )
            need[component.kind] = (length - found.matched + revive) // self.page_size
        return need

    def abort(self, lease: Lease) -> None:
        """Release everything the request holds; insert nothing."""
        self._active(lease)
        for kind, ids in lease.working.items():
            self.pool.free(kind, ids)
        lease.working = {}
        for slot, _reason in lease.checkpoints.values():
            self.pool.free("recurrent", [slot])
        lease.checkpoints = {}
        self.counters.aborts += 1
        self._release(lease)

    def _release(self, lease: Lease) -> None:
        if lease.locked is not None:
            self.tree.unlock(lease.locked)
        lease.active = False
        del self.leases[lease.request_id]

    def end_session(self, session: str) -> None:
        """The session will send no more requests soon: its entries lose their protection."""
        self.live_sessions.discard(session)
        nodes = [n for n, s in self._node_session.items() if s == session and n.parent]
        self.eviction.on_liveness_change(nodes)

    # ------------------------------------------------------------------ inspection
    def state_reuse_rate(self, node: Node) -> float:
        """Hits per stored state so far, ``(hits + 1) / (stored + 2)``, of the checkpoint
        reason the state at ``node`` was taken for: how often states like it get reused."""
        reason = self._state_reason.get(node, "unknown")
        c = self.counters
        return (c.reason_hits[reason] + 1) / (c.reason_inserted[reason] + 2)

    def lookup(self, tokens: TokenInput, namespace: str | None = None) -> tuple[int, int]:
        """Pure query: (reusable, attention-matched) length of ``tokens`` as cached now."""
        result = self.tree.match(tokens, namespace)
        return result.hit, result.kv_hit

    def clear(self) -> None:
        """Drop every cached entry. No request may be in flight."""
        if self.leases:
            raise CacheUsageError(f"clear() with {len(self.leases)} request(s) in flight")
        self.tree.clear()
        self._node_session.clear()
        self._state_reason.clear()

    def occupancy(self) -> tuple[int, int]:
        """Bytes charged now for KV pages and for states (cached and in flight)."""
        pool = self.pool
        kv = sum(pool.units[k.kind] * pool.unit_bytes(k.kind) for k in self.kv_components)
        state = pool.units["recurrent"] * pool.unit_bytes("recurrent") if self.recurrent else 0
        return kv, state

    def stats(self) -> CacheStats:
        c, pool = self.counters, self.pool
        kv, state = self.occupancy()
        return CacheStats(
            requests=c.requests,
            waits=c.waits,
            aborts=c.aborts,
            prompt_tokens=c.prompt_tokens,
            kv_matched_tokens=c.kv_matched_tokens,
            reused_tokens=c.reused_tokens,
            recompute_tokens=c.kv_matched_tokens - c.reused_tokens,
            requests_hit=c.requests_hit,
            component_hits=dict(c.component_hits),
            component_misses=dict(c.component_misses),
            evictions=dict(c.evictions),
            evicted_bytes=c.evicted_bytes,
            cow_copies=c.cow_copies,
            checkpoints_recorded=c.checkpoints_recorded,
            checkpoints_skipped=c.checkpoints_skipped,
            offgrid_dropped=c.offgrid_dropped,
            offgrid_misplaced=c.offgrid_misplaced,
            states_inserted=c.states_inserted,
            states_rejected=c.states_rejected,
            states_duplicate=c.states_duplicate,
            states_capped=c.states_capped,
            kv_bytes=kv,
            state_bytes=state,
            used_bytes=pool.used_bytes,
            peak_bytes=sum(pool.peak.values()),
            budget_bytes=pool.budget_bytes,
            padding_waste_bytes=pool.padding_waste_bytes(),
        )

    def check_integrity(self) -> None:
        """Tree and pool invariants, plus: pool units == tree data + in-flight holdings, and
        every locked node belongs to a request in flight."""
        self.tree.check_integrity()
        self.pool.check_integrity()
        held = dict.fromkeys(self.pool.costs, 0)
        for node in self.tree.iter_nodes():
            for c in self.tree.components:
                data = node.data[c.slot]
                if data is not None:
                    held[c.kind] += 1 if isinstance(c, RecurrentComponent) else len(data)
        for lease in self.leases.values():
            for kind, ids in lease.working.items():
                held[kind] += len(ids)
            held["recurrent"] = held.get("recurrent", 0) + len(lease.checkpoints)
        for kind, units in self.pool.units.items():
            assert held.get(kind, 0) == units, f"{kind}: pool has {units}, holders {held}"
        locks = sum(1 for lease in self.leases.values() if lease.locked is not None)
        roots = [self.tree.root(ns) for ns in self.tree.namespaces()]
        assert sum(sum(c.lock_ref for c in r.children.values()) for r in roots) == locks
