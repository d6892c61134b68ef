"""``Admitter``: admission of a request: match, lock, reserve the working set, plan the prefill.

Arguments arrive checked (``hycache.cache.validate``). A request that no empty pool could hold
raises CapacityError before anything changes; one that would fit once requests in flight
finish gets a ``Wait`` (the only change left behind: a node split at its match).
"""

from __future__ import annotations

from hycache.cache.accounting import Accounting
from hycache.cache.holds import Holds
from hycache.cache.lease import Lease, PageRef, Wait
from hycache.cache.registry import InFlight, NodeNotes
from hycache.cache.stats import Counters
from hycache.errors import CapacityError
from hycache.policy.checkpoint.base import CheckpointPolicy, PlanInput
from hycache.policy.eviction.base import EvictionPolicy
from hycache.tree.keys import TOKEN_BYTES, TokenKey
from hycache.tree.node import Node


class Admitter:
    """Turns a checked request into a ``Lease`` (or a ``Wait``)."""

    def __init__(
        self,
        accounting: Accounting,
        holds: Holds,
        in_flight: InFlight,
        notes: NodeNotes,
        counters: Counters,
        checkpoint: CheckpointPolicy,
        eviction: EvictionPolicy,
        *,
        kernel_chunk: int | None,
    ) -> None:
        self.accounting = accounting
        self.tree = accounting.tree
        self.pool = accounting.pool
        self.holds = holds
        self.in_flight = in_flight
        self.notes = notes
        self.counters = counters
        self.checkpoint = checkpoint
        self.eviction = eviction
        self.kernel_chunk = kernel_chunk
        #: KV tokens (over every attention component) that weigh as much as one state
        self.state_kv_tokens: int | None = None
        kv_page = sum(c.bytes_per_page for c in accounting.kv_components)
        if accounting.recurrent is not None and kv_page:
            state = self.pool.unit_bytes("recurrent")
            self.state_kv_tokens = state * accounting.page_size // kv_page

    def check_fits(self, n: int, max_new_tokens: int, token_budget: int | None) -> None:
        """CapacityError if no empty pool could ever run the request (checked first)."""
        whole = self.accounting.working_set(
            n + max_new_tokens, chunk=token_budget, output=max_new_tokens
        )
        if not self.pool.fits_empty(whole):
            need = self.pool.demand_bytes(whole)
            raise CapacityError(
                f"request of {n} + {max_new_tokens} tokens needs {need} bytes of working memory; "
                f"the {self.pool.describe()} pool can never hold it"
            )

    def admit(
        self,
        key: TokenKey,
        max_new_tokens: int,
        namespace: str | None,
        session: str | None,
        token_budget: int | None,
        kernel_grid: bool,
    ) -> Lease | Wait:
        n = len(key) // TOKEN_BYTES
        self.check_fits(n, max_new_tokens, token_budget)
        self.in_flight.tick()
        acc, holds = self.accounting, self.holds
        result = self.tree.match(key[: (n - 1) * TOKEN_BYTES], namespace)
        hit = result.hit
        locked = kv_locked = None
        if hit > 0:
            locked = acc.split_at(key, hit, namespace)
            self.tree.lock(locked)
        in_place = holds.kv_read_in_place(result, session) if kernel_grid else 0
        if in_place > hit:
            kv_locked = acc.split_at(key, in_place, namespace)
            self.tree.lock(kv_locked, hold_state=False)
        demand = acc.working_set(
            n + max_new_tokens - hit, max(0, in_place - hit), token_budget, max_new_tokens
        )
        spare = int(kernel_grid and holds.wants_spare(key, namespace, hit, result))
        # The reused prefix's pages are part of the working set too: the request can only ever
        # run if its whole sequence fits (recomputed from scratch if need be).
        whole = acc.working_set(n + max_new_tokens, chunk=token_budget, output=max_new_tokens)
        short = acc.ensure(holds.with_spare(demand, spare))
        if short and spare and not len(self.in_flight):
            spare = 0  # nothing in flight would ever free the spare's room: run without it
            short = acc.ensure(demand)
        if short and (locked or kv_locked) is not None and not len(self.in_flight):
            # Nothing in flight will ever free memory: only this request's own locks (its
            # reused path and the states on it) stand in the way. Admit it as a miss rather
            # than answer a Wait that no finish could ever end.
            holds.unlock_admitted(locked, kv_locked)
            locked = kv_locked = None
            hit, demand = 0, whole
            short = acc.ensure(demand)
        if short:
            holds.unlock_admitted(locked, kv_locked)
            self.counters.waits += 1
            return Wait("memory is held by requests in flight", short)
        working = {kind: self.pool.alloc(kind, count) for kind, count in demand.items()}
        spares = list(self.pool.alloc("recurrent", spare)) if spare else []
        plan = self.checkpoint.plan(
            PlanInput(
                n,
                hit,
                result.kv_hit,
                acc.page_size,
                token_budget,
                max_new_tokens,
                {
                    r: (stored, self.counters.reason_hits[r])
                    for r, stored in self.counters.reason_inserted.items()
                },
                self.kernel_chunk if kernel_grid else None,
                *self._state_room(),
                len(self.in_flight),
            )
        )
        source = None
        recurrent = acc.recurrent
        if recurrent is not None and locked is not None:
            source = recurrent.state_of(locked)
            self.counters.cow_copies += source is not None
            if source is not None:
                self.counters.reason_hits[self.notes.reason(locked)] += 1
                self.notes.count_state_hit(locked)
                locked.hits += 1
        path = [] if locked is None else locked.path_from_root()
        self.eviction.on_hit(path, locked)
        self._count_match(key, n, hit, result.kv_hit, list(result.path))
        if session is not None:
            self.notes.start_session(session)
            if locked is not None:
                self.notes.claim(locked, session)
        read_end = in_place if kv_locked is not None else hit
        lease = Lease(
            self.in_flight.next_id(),
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
            reused_pages=self._pages(path, hit),
            kv_read_end=read_end,
            in_place_pages=self._in_place(kv_locked, hit),
            generation=(
                self.notes.generation(locked) + 1
                if source is not None and locked is not None
                else 0
            ),
        )
        self.counters.in_place_tokens += read_end - hit
        if spares and not any(p.position <= n for p in plan.checkpoints):
            holds.free_spares(lease)
        self.in_flight.add(lease)
        return lease

    def _state_room(self) -> tuple[int | None, int | None]:
        """States that fit into free memory now (None once memory has ever been short: free
        memory is then only the churn of evictions), and the KV tokens one state weighs."""
        if self.accounting.recurrent is None:
            return None, None
        if self.accounting.ever_short:
            return None, self.state_kv_tokens
        pool = self.pool
        free = pool.free_bytes(pool.resource_of("recurrent")) // pool.unit_bytes("recurrent")
        return free, self.state_kv_tokens

    def _pages(self, path: list[Node], upto: int) -> dict[str, tuple[PageRef, ...]]:
        return pages_on(self.accounting, path, 0, upto)

    def _in_place(self, kv_locked: Node | None, hit: int) -> tuple[PageRef, ...]:
        if kv_locked is None:
            return ()
        full = pages_on(self.accounting, kv_locked.path_from_root(), hit, kv_locked.end)
        return full.get("full", ())

    def _count_match(self, key: TokenKey, n: int, hit: int, kv_hit: int, path: list[Node]) -> None:
        c = self.counters
        c.requests += 1
        c.prompt_tokens += n
        c.kv_matched_tokens += kv_hit
        c.reused_tokens += hit
        c.requests_hit += hit > 0
        if hit:
            c.published_reused_tokens += self._from_published(key, hit)
        for component in self.tree.components:
            accepted = component.deepest_accepted(path, kv_hit) if kv_hit else 0
            if accepted > 0:
                c.component_hits[component.name] += 1
            else:
                c.component_misses[component.name] += 1

    def _from_published(self, key: TokenKey, hit: int) -> int:
        """Tokens of the hit that a request still in flight published past its own hit (they
        would be missing had it not published its prompt when its prefill ended)."""
        best = 0
        for lease in self.in_flight:
            upto = min(hit, lease.published_upto)
            if upto - lease.hit > best and (
                key[: upto * TOKEN_BYTES] == lease.key[: upto * TOKEN_BYTES]
            ):  # compared only when it could raise ``best``
                best = upto - lease.hit
        return best


def pages_on(
    accounting: Accounting, path: list[Node], lo: int, hi: int
) -> dict[str, tuple[PageRef, ...]]:
    """Per KV kind, the pages the nodes of ``path`` hold for positions in ``[lo, hi)``. Empty
    when the pool keeps no page ids (an accounting-only pool: ids mean nothing there)."""
    page = accounting.page_size
    out: dict[str, tuple[PageRef, ...]] = {}
    if not accounting.pool.track_ids:
        return out
    for component in accounting.kv_components:
        refs: list[PageRef] = []
        for node in path:
            if node.end <= lo or node.start >= hi:
                continue
            data = node.data[component.slot]
            if data is None:
                continue
            for j, page_id in enumerate(data):
                start = node.start + j * page
                if lo <= start < hi:
                    refs.append(PageRef(start, page_id))
        out[component.kind] = tuple(refs)
    return out
