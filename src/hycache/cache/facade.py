"""``HybridPrefixCache``: the facade the simulator, the engine and the server drive.

Lifecycle of a request::

    lease = cache.admit(tokens, max_new_tokens=...)   # match, lock, reserve working memory
    # restore: lease.hit tokens are reused from lease.reused_pages (KV per kind) and the state
    # in slot lease.source_state (copy it: copy-on-write)
    for end in lease.plan.chunk_ends:                 # prefill chunk by chunk; at each planned
        cache.record_checkpoint(lease, position)      # checkpoint copy the state BEFORE the
                                                      # next chunk overwrites it
    cache.window_loaded_from(lease, position)         # optional: the prefix past the hit came
                                                      # from elsewhere, SWA KV only its window
    cache.publish(lease)                              # optional: the prompt joins the cache
    cache.extend(lease, decoded_tokens)               # decode (decode-interval checkpoints)
    cache.finish(lease)   or   cache.abort(lease)     # insert KV + admitted states, unlock

Memory: every byte (cached entries and in-flight working sets) comes from one pool and never
exceeds its budget; when an allocation does not fit, the eviction policy frees unpinned
entries first. A request that cannot fit even into an empty pool raises CapacityError; one that
would fit once requests in flight finish gets a ``Wait``. Every argument is checked before
anything changes: a rejected call (``ArgumentError``, ``CacheUsageError``, ``CapacityError``)
leaves the cache as it was.

The cache is composed of parts with constructors of their own: ``Accounting`` (memory and
eviction), ``StateStore`` (states), ``Holds`` (locks), ``Admitter`` and ``Inserter`` (the two
ends of a request), ``InFlight`` and ``NodeNotes`` (bookkeeping). The eviction policy sees a
``CacheView``, never the cache.
"""

from __future__ import annotations

from hycache.cache import validate
from hycache.cache.accounting import Accounting
from hycache.cache.admit import Admitter
from hycache.cache.config import CacheConfig
from hycache.cache.context import CacheView
from hycache.cache.holds import Holds
from hycache.cache.insert import Inserter
from hycache.cache.integrity import check_cache_integrity
from hycache.cache.lease import FinishResult, Lease, PublishResult, Wait
from hycache.cache.lowertier import LowerTier
from hycache.cache.registry import InFlight, NodeNotes
from hycache.cache.states import StateStore
from hycache.cache.stats import CacheStats, Counters, MemoryUsage, snapshot
from hycache.cache.tiering import Tiering
from hycache.components.base import Component
from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.components.swa import SlidingWindowComponent
from hycache.errors import ArgumentError, CacheUsageError, ConfigError
from hycache.memory.pool import MemoryPool
from hycache.policy.admission import AdmissionPolicy
from hycache.policy.checkpoint.base import CheckpointPolicy
from hycache.policy.eviction.base import EvictionPolicy
from hycache.policy.movement.base import MovementPolicy
from hycache.spec.model import ModelSpec
from hycache.tree.keys import TOKEN_BYTES, TokenKey
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree
from hycache.tree.runkey import RunKey


class HybridPrefixCache:
    """One model's prefix cache: a radix tree, a pool, a policy bundle and a config."""

    def __init__(
        self,
        spec: ModelSpec,
        pool: MemoryPool,
        config: CacheConfig,
        *,
        checkpoint: CheckpointPolicy,
        admission: AdmissionPolicy,
        eviction: EvictionPolicy,
    ) -> None:
        if not isinstance(config, CacheConfig):
            raise ConfigError(f"config must be a CacheConfig, got {type(config).__name__}")
        self.spec = spec
        self.pool = pool
        self.config = config
        self.name = config.name
        self.page_size = config.page_size
        self.checkpoint_policy = checkpoint
        self.admission = admission
        self.eviction = eviction
        self.tree = RadixTree(config.page_size, _components(spec, pool, config.page_size))
        self.counters = Counters()
        self.in_flight = InFlight()
        self.notes = NodeNotes()
        self.accounting = Accounting(
            self.tree,
            pool,
            eviction,
            self.counters,
            self.in_flight,
            self.notes,
            running_slots=config.running_slots,
        )
        self.kv_components = self.accounting.kv_components
        self.recurrent = self.accounting.recurrent
        self.states = (
            None
            if self.recurrent is None
            else StateStore(
                self.recurrent,
                self.accounting,
                admission,
                self.counters,
                self.notes,
                max_states_per_path=admission.max_states_per_path,
            )
        )
        self.holds = Holds(self.accounting, self.in_flight, config, checkpoint.caches_states)
        group = spec.recurrent
        self.kernel_chunk = group.kernel_chunk if group is not None else None
        self.admitter = Admitter(
            self.accounting,
            self.holds,
            self.in_flight,
            self.notes,
            self.counters,
            checkpoint,
            eviction,
            kernel_chunk=self.kernel_chunk,
        )
        self.inserter = Inserter(
            self.accounting,
            self.states,
            self.holds,
            self.in_flight,
            self.notes,
            caches_states=checkpoint.caches_states,
            kv_to_last_state=checkpoint.kv_to_last_state,
            pins_published_state=eviction.pins_published_state,
        )
        eviction.attach(
            CacheView(spec, self.accounting, self.in_flight, self.notes, self.holds, self.counters)
        )
        self.tiering: Tiering | None = None

    def attach_tiers(self, tiers: list[LowerTier], movement: MovementPolicy, page: int) -> None:
        """Put ``tiers`` (fastest first, KV in pages of ``page`` tokens, a multiple of the
        cache's page size) under the device before any request: device evictions demote to
        them as ``movement`` says, admissions load back what they add to a hit."""
        if self.tiering is not None:
            raise CacheUsageError("tiers are attached already")
        if len(self.in_flight) or self.counters.requests:
            raise CacheUsageError("attach tiers before the first request")
        if not tiers or page % self.page_size:
            raise CacheUsageError(
                f"tiers need at least one tier and a page that is a multiple of {self.page_size}"
            )
        self.tiering = Tiering(self.accounting, tiers, movement, self.notes, page)

    # ------------------------------------------------------------------ lifecycle
    def admit(
        self,
        tokens: object,
        *,
        max_new_tokens: int = 0,
        namespace: str | None = None,
        session: str | None = None,
        token_budget: int | None = None,
        kernel_grid: bool = True,
        slow_tier_tokens: int | None = None,
    ) -> Lease | Wait:
        """Match the prompt (the last token is always recomputed), lock the reused path,
        reserve the working set (KV pages for prompt + ``max_new_tokens`` beyond the hit and
        ``running_slots`` states) and plan the prefill. ``kernel_grid=False``: the caller's
        prefill may stop anywhere at no cost (the serial replay, which inserts at once), so
        no state needs to sit on the recurrent kernel's grid. With tiers, at most
        ``slow_tier_tokens`` tokens of KV (None: any) come from the tiers below the host (what
        a storage prefetch delivered). On ``Wait`` the only change is a node split (and what
        tiers loaded back)."""
        key = validate.token_key("tokens", tokens)
        if not key:
            raise ArgumentError("tokens", "a request needs at least one prompt token")
        new = validate.whole("max_new_tokens", max_new_tokens, minimum=0)
        ns = validate.optional_text("namespace", namespace)
        sess = validate.optional_text("session", session)
        budget = validate.optional_whole("token_budget", token_budget, minimum=1)
        grid = validate.flag("kernel_grid", kernel_grid)
        slow = validate.optional_whole("slow_tier_tokens", slow_tier_tokens, minimum=0)
        if budget is None:
            budget = self.config.token_budget
        tiering = self.tiering
        if tiering is None:
            return self.admitter.admit(key, new, ns, sess, budget, grid)
        self.admitter.check_fits(len(key) // TOKEN_BYTES, new, budget)
        loaded = tiering.load_back(bytes(key), ns, slow)  # lower tiers hash encoded pages
        lease = self.admitter.admit(key, new, ns, sess, budget, grid)
        if isinstance(lease, Lease):
            lease.tier_tokens = tiering.count_hit(lease.hit, loaded)
            if loaded is not None and lease.hit:
                lease.loaded_bytes_by_tier = dict(loaded.bytes_by_tier)
        return lease

    def record_checkpoint(self, lease: Lease, position: int, reason: str = "chunk") -> int | None:
        """The engine is at ``position`` (a prefix length of the request) and will copy its
        state now, before extending. Returns the slot to copy into, or None when no state is
        kept there (no recurrent group, off the state grid, or no memory even after eviction).
        With ``offgrid="misplace"`` (the vLLM #54076 bug, for testing checkers) an off-grid
        state is filed at the grid position below it instead: silently wrong."""
        lease = self.in_flight.require(lease)
        position = validate.whole("position", position, minimum=1)
        reason = validate.text("reason", reason)
        if not lease.hit < position <= lease.prompt_len + lease.max_new_tokens:
            raise CacheUsageError(f"checkpoint {position} outside ({lease.hit}, request end]")
        policy = self.checkpoint_policy
        if self.recurrent is None or not policy.caches_states:
            return None
        grid = policy.state_grid or self.page_size
        if position % grid:
            if policy.offgrid == "drop" or position < grid:
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
        if self.accounting.ensure({"recurrent": 1}):
            self.counters.checkpoints_skipped += 1
            self.counters.reason_skipped[reason] += 1
            return None
        slot = self.pool.alloc("recurrent", 1)[0]
        lease.checkpoints[position] = (slot, reason)
        self.counters.checkpoints_recorded += 1
        return slot

    def record_planned(self, lease: Lease, *, up_to: int | None = None) -> list[int]:
        """Record every planned checkpoint at or before ``up_to`` (default: all) — what a
        simulator does in place of running the model. Returns the positions that got a slot."""
        lease = self.in_flight.require(lease)
        limit = lease.prompt_len + lease.max_new_tokens
        if up_to is not None:
            limit = validate.whole("up_to", up_to, minimum=0)
        got = []
        for point in lease.plan.checkpoints:
            if (
                point.position <= limit
                and self.record_checkpoint(lease, point.position, point.reason) is not None
            ):
                got.append(point.position)
        return got

    def extend(self, lease: Lease, tokens: object) -> None:
        """Append decoded tokens whose KV now exists (fed back into the model)."""
        lease = self.in_flight.require(lease)
        key = validate.token_key("tokens", tokens)
        if lease.length + len(key) // TOKEN_BYTES > lease.prompt_len + lease.max_new_tokens:
            raise CacheUsageError(
                f"request {lease.request_id}: more than max_new_tokens={lease.max_new_tokens}"
            )
        if isinstance(key, RunKey) or lease.fed_runs is not None:
            done = lease.fed_runs if lease.fed_runs is not None else bytes(lease.fed)
            lease.fed_runs = RunKey.of_key(done) + key
            lease.fed.clear()
        else:
            lease.fed += key

    def window_loaded_from(self, lease: Lease, position: int) -> None:
        """The engine resumes the prompt past ``lease.hit`` with KV loaded from storage of its
        own and holds the sliding-window KV only from ``position`` on (the window before where
        it resumes): ``publish`` and ``finish`` keep no sliding-window KV below it, which
        leaves it absent there instead of filing pages nobody writes. Call it before
        ``publish``."""
        lease = self.in_flight.require(lease)
        position = validate.whole("position", position, minimum=0)
        if lease.published_upto:
            raise CacheUsageError(f"request {lease.request_id}: already published")
        if not lease.hit <= position <= lease.prompt_len:
            raise CacheUsageError(
                f"window start {position} outside [{lease.hit}, {lease.prompt_len}]"
            )
        lease.window_from = position

    def publish(self, lease: Lease) -> PublishResult:
        """The request's prefill is done: make its prompt KV (whole pages) and the states it
        copied so far part of the cache now, as vLLM's and SGLang's prefix caches do with a
        running request's computed blocks, so that requests arriving while it decodes can
        reuse them and the states stop holding slots of its own. The request keeps its
        prompt locked (it attends to that KV while decoding); ``finish`` inserts the rest.
        Publishes nothing (``cached_tokens == 0``) if the pages cannot be placed. The caller
        writes the prompt's KV into ``PublishResult.pages``."""
        lease = self.in_flight.require(lease)
        result = self.inserter.publish(lease)
        if result.cached_tokens:
            self._write_through(lease.key, lease.namespace)
        return result

    def finish(self, lease: Lease) -> FinishResult:
        """Insert the request's KV (whole pages) and its admitted states, release everything
        else and the locks. Never half-inserts: if the KV cannot be placed, nothing is. The
        caller writes the request's KV into ``FinishResult.pages``."""
        lease = self.in_flight.require(lease)
        result = self.inserter.finish(lease)
        self._write_through(lease.full_key, lease.namespace)
        return result

    def _write_through(self, key: TokenKey, ns: str | None) -> None:
        tiering = self.tiering
        if tiering is None or not tiering.movement.writes_through():
            return
        found = self.tree.match(key, ns)
        path = [n for n in found.path if n.end <= found.matched]
        tiering.write_through(tiering.movement.through(path))

    def abort(self, lease: Lease) -> None:
        """Release everything the request holds; insert nothing."""
        lease = self.in_flight.require(lease)
        self.counters.aborts += 1
        self.inserter.abort(lease)

    def end_session(self, session: str) -> None:
        """The session will send no more requests soon: its entries lose their protection."""
        nodes = self.notes.end_session(validate.text("session", session))
        self.eviction.on_liveness_change(nodes)

    def note_uncached_request(self, prompt_tokens: int) -> None:
        """A request served without the cache (larger than the whole pool): counted as a miss."""
        tokens = validate.whole("prompt_tokens", prompt_tokens, minimum=1)
        self.counters.requests += 1
        self.counters.prompt_tokens += tokens

    # ------------------------------------------------------------------ inspection
    def lookup(self, tokens: object, namespace: str | None = None) -> tuple[int, int]:
        """Pure query: (reusable, attention-matched) length of ``tokens`` as cached now."""
        key = validate.token_key("tokens", tokens)
        result = self.tree.match(key, validate.optional_text("namespace", namespace))
        return result.hit, result.kv_hit

    def clear(self) -> None:
        """Drop every cached entry. No request may be in flight."""
        if len(self.in_flight):
            raise CacheUsageError(f"clear() with {len(self.in_flight)} request(s) in flight")
        self.tree.clear()
        self.notes.clear()
        if self.tiering is not None:
            for tier in self.tiering.tiers:
                tier.clear()

    def is_live(self, node: Node) -> bool:
        return self.notes.is_live(node)

    def state_reason(self, node: Node) -> str:
        """Why the state at ``node`` was checkpointed (a plan's reason, ``"unknown"`` if none)."""
        return self.notes.reason(node)

    def occupancy(self) -> tuple[int, int]:
        """Bytes charged now for KV pages and for states (cached and in flight)."""
        return self.accounting.occupancy()

    def usage(self) -> MemoryUsage:
        """Bytes charged now: KV, states, all, and the budget."""
        kv, state = self.accounting.occupancy()
        return MemoryUsage(kv, state, self.pool.used_bytes, self.pool.budget_bytes)

    def stats(self) -> CacheStats:
        return snapshot(self.counters, self.pool, self.usage())

    def check_integrity(self) -> None:
        """Tree and pool invariants, plus: pool units == tree data + in-flight holdings, and
        every lock belongs to a request in flight. Raises IntegrityError."""
        check_cache_integrity(self.tree, self.pool, self.in_flight)
        if self.tiering is not None:
            for tier in self.tiering.tiers:
                tier.check_integrity()

    def tier_stats(self) -> dict[str, object] | None:
        """Per-tier hit tokens, peak bytes, bytes moved and overrun (None without tiers)."""
        tiering = self.tiering
        if tiering is None:
            return None
        moved: dict[str, int] = {}
        for tier in tiering.tiers:
            moved[f"device->{tier.name}"] = tier.counters.bytes_down
            moved[f"{tier.name}->device"] = tier.counters.bytes_up
        return {
            "tier_hit_tokens": dict(tiering.hit_tokens),
            "tier_bytes_peak": {
                "device": sum(self.pool.peak.values()),
                **{t.name: t.peak_bytes for t in tiering.tiers},
            },
            "bytes_moved": moved,
            "tier_budget_bytes": {t.name: t.budget_bytes for t in tiering.tiers},
            "tier_overrun_bytes": {t.name: t.overrun_bytes() for t in tiering.tiers},
            "tier_evictions": {t.name: t.counters.evictions for t in tiering.tiers},
        }

    def requests_in_flight(self) -> int:
        return len(self.in_flight)


def _components(spec: ModelSpec, pool: MemoryPool, page: int) -> list[Component]:
    components: list[Component] = []
    for group in spec.groups:
        if group.kind == "full":
            store = pool.page_store("full")
            components.append(FullComponent(store, bytes_per_page=pool.unit_bytes("full")))
        elif group.kind == "swa":
            window = group.window
            if window % page:
                raise ConfigError(f"page size {page} does not divide the sliding window {window}")
            components.append(
                SlidingWindowComponent(
                    pool.page_store("swa"), window, bytes_per_page=pool.unit_bytes("swa")
                )
            )
        else:
            components.append(
                RecurrentComponent(
                    pool.slot_store("recurrent"), bytes_per_state=pool.unit_bytes("recurrent")
                )
            )
    return components
