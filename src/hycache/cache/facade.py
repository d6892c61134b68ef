"""``HybridPrefixCache``: the facade the simulator and the engine drive.

Lifecycle of a request::

    lease = cache.admit(tokens, max_new_tokens=...)   # match, lock, reserve working memory
    for end in lease.plan.chunk_ends:                 # prefill chunk by chunk; at each planned
        cache.record_checkpoint(lease, position)      # checkpoint copy the state BEFORE the
                                                      # next chunk overwrites it (in-kernel
                                                      # points: out of the chunk's kernel)
    cache.extend(lease, decoded_tokens)               # decode (decode-interval checkpoints)
    cache.finish(lease)   or   cache.abort(lease)     # insert KV + admitted states, unlock

Memory: every byte (cached entries and in-flight working sets) comes from one pool and never
exceeds its budget; when an allocation does not fit, the eviction policy frees unlocked entries
first. A request that cannot fit even into an empty pool raises CapacityError; one that would
fit once requests in flight finish gets a ``Wait``.

The memory side (accounting, eviction, node splits) lives in ``hycache.cache.accounting``, state
storing in ``hycache.cache.states`` and inspection in ``hycache.cache.inspection``:
``HybridPrefixCache`` inherits them as mixins.
"""

from __future__ import annotations

from hycache.cache.holds import CacheHolds
from hycache.cache.inspection import CacheInspect
from hycache.cache.lease import FinishResult, Lease, Wait
from hycache.cache.states import CacheStates
from hycache.cache.stats import Counters
from hycache.components.base import Component
from hycache.components.full import FullComponent, PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import CacheUsageError, CapacityError, ConfigError
from hycache.memory.pool import MemoryPool
from hycache.policy.base import (
    AdmissionPolicy,
    CheckpointPolicy,
    EvictionPolicy,
    PlanInput,
)
from hycache.spec.model import ModelSpec
from hycache.tree.keys import TOKEN_BYTES, TokenInput, encode_tokens
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree


class HybridPrefixCache(CacheStates, CacheInspect, CacheHolds):
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
        read_matched_kv: bool = False,
        pin_published_state: bool = True,
        reserve_checkpoint_slot: bool = False,
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
        self.read_matched_kv = read_matched_kv
        self.pin_published_state = pin_published_state
        self.reserve_checkpoint_slot = reserve_checkpoint_slot
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
        eviction.attach(self)

    @property
    def kernel_chunk(self) -> int | None:
        """The recurrent kernel's chunk (``RecurrentGroup.kernel_chunk``); None without one."""
        group = self.spec.recurrent
        return group.kernel_chunk if group is not None else None

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

    # ------------------------------------------------------------------ lifecycle
    def admit(
        self,
        tokens: TokenInput,
        *,
        max_new_tokens: int = 0,
        namespace: str | None = None,
        session: str | None = None,
        token_budget: int | None = None,
        kernel_grid: bool = True,
    ) -> Lease | Wait:
        """Match the prompt (the last token is always recomputed), lock the reused path,
        reserve the working set (KV pages for prompt + ``max_new_tokens`` beyond the hit and
        ``running_slots`` states) and plan the prefill. ``kernel_grid=False``: the caller's
        prefill may stop anywhere at no cost (the serial replay, which inserts at once), so
        no state needs to sit on the recurrent kernel's grid. Mutates the cache (on Wait: only
        a node split)."""
        key = encode_tokens(tokens)
        n = len(key) // TOKEN_BYTES
        if n < 1:
            raise CacheUsageError("a request needs at least one prompt token")
        if max_new_tokens < 0 or (token_budget is not None and token_budget < 1):
            raise CacheUsageError("max_new_tokens must be >= 0 and token_budget >= 1")
        self.clock += 1
        result = self.tree.match(key[: (n - 1) * TOKEN_BYTES], namespace)
        hit = result.hit
        locked = kv_locked = None
        if hit > 0:
            locked = self._split_at(key, hit, namespace)
            self.tree.lock(locked)
        in_place = self._kv_read_in_place(result, session) if kernel_grid else 0
        if in_place > hit:
            kv_locked = self._split_at(key, in_place, namespace)
            self.tree.lock(kv_locked, hold_state=False)
        demand = self._working_set(n + max_new_tokens - hit, max(0, in_place - hit))
        spare = int(kernel_grid and self._wants_spare(key, namespace, hit, result))
        # The reused prefix's pages are part of the working set too: the request can only ever
        # run if its whole sequence fits (recomputed from scratch if need be).
        whole = self._working_set(n + max_new_tokens)
        if not self.pool.fits_empty(whole):
            self._unlock_admitted(locked, kv_locked)
            need = self.pool.demand_bytes(whole)
            raise CapacityError(
                f"request of {n} + {max_new_tokens} tokens needs {need} bytes of working memory; "
                f"the {self.pool.describe()} pool can never hold it"
            )
        short = self._ensure(self._with_spare(demand, spare))
        if short and spare and not self.leases:
            spare = 0  # nothing in flight would ever free the spare's room: run without it
            short = self._ensure(demand)
        if short and (locked or kv_locked) is not None and not self.leases:
            # Nothing in flight will ever free memory: only this request's own locks (its
            # reused path and the states on it) stand in the way. Admit it as a miss rather
            # than answer a Wait that no finish could ever end.
            self._unlock_admitted(locked, kv_locked)
            locked = kv_locked = None
            hit, demand = 0, whole
            short = self._ensure(demand)
        if short:
            self._unlock_admitted(locked, kv_locked)
            self.counters.waits += 1
            return Wait("memory is held by requests in flight", short)
        working = {kind: self.pool.alloc(kind, count) for kind, count in demand.items()}
        spares = list(self.pool.alloc("recurrent", spare)) if spare else []
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
                self.kernel_chunk if kernel_grid else None,
            )
        )
        source = None
        if self.recurrent is not None and locked is not None:
            source = self.recurrent.state_of(locked)
            self.counters.cow_copies += source is not None
            if source is not None:
                self.counters.reason_hits[self._state_reason.get(locked, "unknown")] += 1
                locked.hits += 1
        path = [] if locked is None else locked.path_from_root()
        self.eviction.on_hit(path, locked)
        self._count_match(n, hit, result.kv_hit, list(result.path))
        if session is not None:
            self.live_sessions.add(session)
            if locked is not None:
                self._claim(locked, session)
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
            kv_locked=kv_locked,
            spare_slots=spares,
            spare_for=result.kv_hit if spares else None,
        )
        if spares and not any(p.position <= n for p in plan.checkpoints):
            self._free_spares(lease)
        self._next_id += 1
        self.leases[lease.request_id] = lease
        return lease

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
        if lease.spare_slots:
            slot = lease.spare_slots.pop()
            lease.checkpoints[position] = (slot, reason)
            self.counters.checkpoints_recorded += 1
            return slot
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
        self._free_spares(lease)
        key, ns = lease.full_key, lease.namespace
        total = len(key) // TOKEN_BYTES
        cached = total - total % self.page_size
        for component in self.kv_components:
            self.pool.free(component.kind, lease.working.pop(component.kind))
        key = key[: cached * TOKEN_BYTES]
        found = self.tree.match(key, ns)
        if self._ensure(self._pages_needed(found, cached)):
            cached = 0  # cannot place the KV: store nothing
        path = self._insert_path(key, ns, found) if cached else []
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
        inserted, refused = self._store_states(path, key, ns, candidates, cached)
        if running:
            self.pool.free("recurrent", running)
        if self.max_states_per_path is not None and path:
            capped = self._cap_states(path[-1])
            inserted = [p for p in inserted if p not in capped]
        if path:
            if lease.session is not None:
                # after the state splits: the nodes they created belong to the session too
                self._claim(path[-1], lease.session)
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
        self._free_spares(lease)  # the prefill is done: no prefill checkpoint is left to take
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
        path = self._insert_path(key, ns, found)
        due = {p: lease.checkpoints.pop(p) for p in sorted(lease.checkpoints) if p <= upto}
        stored, _refused = self._store_states(path, key, ns, due, upto)
        lease.published = [self.tree.boundary_on_path(path, p) for p in stored]  # no split:
        # a stored state sits at a node end, and _store_states kept ``path`` current
        node = self._split_at(key, upto, ns)
        # the prompt's KV stays locked (the request attends to it while decoding); the state
        # there only if the preset pins it (the request itself never reads it again)
        self.tree.lock(node, hold_state=self.pin_published_state)
        self._unlock_lease(lease)
        lease.locked, lease.holds_state = node, self.pin_published_state
        if lease.session is not None:
            self._claim(node, lease.session)
        return stored

    def abort(self, lease: Lease) -> None:
        """Release everything the request holds; insert nothing."""
        self._active(lease)
        for kind, ids in lease.working.items():
            self.pool.free(kind, ids)
        lease.working = {}
        self._free_spares(lease)
        for slot, _reason in lease.checkpoints.values():
            self.pool.free("recurrent", [slot])
        lease.checkpoints = {}
        self.counters.aborts += 1
        self._release(lease)

    def _release(self, lease: Lease) -> None:
        self._unlock_lease(lease)
        lease.active = False
        del self.leases[lease.request_id]

    def end_session(self, session: str) -> None:
        """The session will send no more requests soon: its entries lose their protection."""
        self.live_sessions.discard(session)
        nodes = [n for n, s in self._node_session.items() if s == session and n.parent]
        self.eviction.on_liveness_change(nodes)
