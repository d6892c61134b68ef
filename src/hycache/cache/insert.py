"""``Inserter``: how a request's KV and states join the tree, at ``finish`` (everything) and at
``publish`` (the prompt, when the prefill ends).

Never half-inserts: if the KV cannot be placed, nothing is, and the slots of states that are
not stored go back to the pool. Both slide windows: SWA KV no later request can read is
inserted as a tombstone (``hycache.cache.windows``).
"""

from __future__ import annotations

from hycache.cache.accounting import Accounting
from hycache.cache.admit import pages_on
from hycache.cache.holds import Holds
from hycache.cache.lease import FinishResult, Lease, PageRef, PublishResult
from hycache.cache.registry import InFlight, NodeNotes
from hycache.cache.states import StateStore
from hycache.cache.windows import slide_args
from hycache.tree.keys import TOKEN_BYTES, TokenKey
from hycache.tree.node import Node


class Inserter:
    """Inserts finished and published requests."""

    def __init__(
        self,
        accounting: Accounting,
        states: StateStore | None,
        holds: Holds,
        in_flight: InFlight,
        notes: NodeNotes,
        *,
        caches_states: bool,
        pins_published_state: bool,
        kv_to_last_state: bool = False,
    ) -> None:
        self.accounting = accounting
        self.tree = accounting.tree
        self.pool = accounting.pool
        self.states = states
        self.holds = holds
        self.in_flight = in_flight
        self.notes = notes
        self.caches_states = caches_states
        self.pins_published_state = pins_published_state
        self.kv_to_last_state = kv_to_last_state

    def finish(self, lease: Lease) -> FinishResult:
        acc = self.accounting
        self.in_flight.tick()
        self.holds.free_spares(lease)
        key, ns = lease.full_key, lease.namespace
        total = len(key) // TOKEN_BYTES
        page = acc.page_size
        cached = total - total % page
        if self.kv_to_last_state:  # no state stored: no KV either
            cached = min(cached, max(lease.checkpoints, default=0))
        for component in acc.kv_components:
            self.pool.free(component.kind, lease.working.pop(component.kind))
        key = key[: cached * TOKEN_BYTES]
        candidates = dict(lease.checkpoints)
        lease.checkpoints = {}
        final = lease.final_state_slot
        running = list(lease.working.pop("recurrent", ()))
        if (
            final is not None
            and self.caches_states
            and total == cached
            and total > lease.hit
            and total not in candidates  # a checkpoint already holds that state
        ):
            running.remove(final)
            candidates[total] = (final, "final")
        args = slide_args(lease, page, has_states=self.states is not None, states=candidates)
        plan = acc.place(key, ns, cached, args) if cached else None
        if plan is None:
            cached = 0  # cannot place the KV: store nothing
        path = acc.insert_path(key, ns, plan) if plan is not None else []
        inserted, refused = self._store(path, key, ns, candidates, cached, lease.generation)
        if running:
            self.pool.free("recurrent", running)
        if self.states is not None and path:
            capped = self.states.cap_states(path[-1])
            inserted = [p for p in inserted if p not in capped]
        pages: dict[str, tuple[PageRef, ...]] = {}
        if path:
            if lease.session is not None:
                # after the state splits: the nodes they created belong to the session too
                self.notes.claim(path[-1], lease.session)
            pages = pages_on(acc, path[-1].path_from_root(), 0, cached)
            # Without a KV component nothing fills the path: the part past the last state
            # stored is an empty leaf that holds nothing and no policy could ever evict; prune.
            self.tree.prune(path[-1])
        self.release(lease)
        return FinishResult(cached, tuple(inserted), tuple(refused), pages)

    def publish(self, lease: Lease) -> PublishResult:
        acc = self.accounting
        self.holds.free_spares(lease)  # the prefill is done: no prefill checkpoint is left
        key, ns = lease.full_key, lease.namespace
        upto = lease.prompt_len - lease.prompt_len % acc.page_size
        if self.kv_to_last_state:
            upto = max((p for p in lease.checkpoints if p <= upto), default=0)
        if upto <= lease.hit:
            return PublishResult(0, ())
        key = key[: upto * TOKEN_BYTES]
        due_at = [p for p in lease.checkpoints if p <= upto]
        args = slide_args(lease, acc.page_size, has_states=self.states is not None, states=due_at)
        need = acc.plan_insert(key, ns, upto, args).units_by_kind()
        moved: dict[str, int] = {}
        for kind, count in need.items():  # the pages move from the request to the tree
            ids = lease.working.get(kind, ())  # sliced, not copied: an untracked pool's
            # ids are a ``range`` of any length
            moved[kind] = min(count, len(ids))
            self.pool.free(kind, ids[: moved[kind]])
            lease.working[kind] = ids[moved[kind] :]
        plan = acc.place(key, ns, upto, args)
        if plan is None:
            for kind, count in moved.items():  # cannot place them: take the pages back
                lease.working[kind] = [*lease.working[kind], *self.pool.alloc(kind, count)]
            return PublishResult(0, ())
        path = acc.insert_path(key, ns, plan)
        due = {p: lease.checkpoints.pop(p) for p in sorted(lease.checkpoints) if p <= upto}
        stored, _refused = self._store(path, key, ns, due, upto, lease.generation)
        lease.published = [self.tree.boundary_on_path(path, p) for p in stored]  # no split:
        # a stored state sits at a node end, and store_states kept ``path`` current
        node = acc.split_at(key, upto, ns)
        # the prompt's KV stays locked (the request attends to it while decoding); the state
        # there only if the preset pins it (the request itself never reads it again)
        pin = self.pins_published_state
        self.tree.lock(node, hold_state=pin)
        self.holds.unlock_lease(lease)
        lease.locked, lease.holds_state = node, pin
        lease.published_upto = upto
        if lease.session is not None:
            self.notes.claim(node, lease.session)
        pages = pages_on(acc, node.path_from_root(), 0, upto)
        return PublishResult(upto, tuple(stored), pages)

    def abort(self, lease: Lease) -> None:
        for kind, ids in lease.working.items():
            self.pool.free(kind, ids)
        lease.working = {}
        self.holds.free_spares(lease)
        for slot, _reason in lease.checkpoints.values():
            self.pool.free("recurrent", [slot])
        lease.checkpoints = {}
        self.release(lease)

    def release(self, lease: Lease) -> None:
        self.holds.unlock_lease(lease)
        self.in_flight.remove(lease)

    def _store(
        self,
        path: list[Node],
        key: TokenKey,
        ns: str | None,
        candidates: dict[int, tuple[int, str]],
        cached: int,
        generation: int,
    ) -> tuple[list[int], list[int]]:
        if self.states is None:
            for slot, _reason in candidates.values():
                self.pool.free("recurrent", [slot])
            return [], sorted(candidates)
        return self.states.store_states(path, key, ns, candidates, cached, generation)
