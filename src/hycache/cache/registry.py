"""What the cache knows besides the tree and the pool: requests in flight, the logical clock,
and notes on nodes (the session owning a node, why a state was checkpointed, how often it was
resumed from)."""

from __future__ import annotations

from collections.abc import Iterator

from hycache.cache.generations import GenerationOdds
from hycache.cache.ladder import HitLadder
from hycache.cache.lease import Lease
from hycache.errors import CacheUsageError
from hycache.tree.node import Node


class InFlight:
    """Requests in flight by id, and the cache's logical clock (one tick per admit and finish).

    ``require`` answers whether a lease may still be used; a finished or aborted lease, or one
    of another cache, raises CacheUsageError."""

    def __init__(self) -> None:
        self._leases: dict[int, Lease] = {}
        self._next_id = 0
        self.clock = 0

    def tick(self) -> None:
        self.clock += 1

    def next_id(self) -> int:
        return self._next_id

    def add(self, lease: Lease) -> None:
        self._leases[lease.request_id] = lease
        self._next_id = lease.request_id + 1

    def remove(self, lease: Lease) -> None:
        lease.active = False
        del self._leases[lease.request_id]

    def require(self, lease: object) -> Lease:
        if not isinstance(lease, Lease):
            raise CacheUsageError(f"expected a Lease from admit(), got {type(lease).__name__}")
        if not lease.active or self._leases.get(lease.request_id) is not lease:
            raise CacheUsageError(f"request {lease.request_id} is not in flight")
        return lease

    def __iter__(self) -> Iterator[Lease]:
        return iter(self._leases.values())

    def __len__(self) -> int:
        return len(self._leases)


class NodeNotes:
    """Per-node notes kept beside the tree: the session that owns a node (set by ``claim``,
    live until ``end_session``), the reason a state was checkpointed for and the hits it had
    since it was stored, and per reason the ladder of those hits (``HitLadder``; kept, like
    the cache's counters, when the cache is cleared); and each stored state's generation,
    with per reason and generation the states resumed from or gone unused
    (``GenerationOdds``, kept likewise)."""

    def __init__(self) -> None:
        self.live_sessions: set[str] = set()
        self._session: dict[Node, str] = {}
        self._reason: dict[Node, str] = {}
        self._state_hits: dict[Node, int] = {}
        self._ladders: dict[str, HitLadder] = {}
        self._generation: dict[Node, int] = {}
        self.generation_odds = GenerationOdds()

    def start_session(self, session: str) -> None:
        self.live_sessions.add(session)

    def end_session(self, session: str) -> list[Node]:
        """Ends ``session``; returns the (attached) nodes it owned."""
        self.live_sessions.discard(session)
        return [n for n, s in self._session.items() if s == session and n.parent is not None]

    def is_live(self, node: Node) -> bool:
        session = self._session.get(node)
        return session is not None and session in self.live_sessions

    def claim(self, node: Node, session: str) -> None:
        """The nodes from the root to ``node`` belong to ``session``."""
        for on_path in node.path_from_root():
            self._session[on_path] = session

    def note_reason(self, node: Node, reason: str) -> None:
        """A state was stored at ``node`` for ``reason``; it has had no hit yet."""
        self.state_gone(node)  # one stored before it, if the cache was not told it went
        self._reason[node] = reason
        self._state_hits[node] = 0

    def note_generation(self, node: Node, generation: int) -> None:
        """The state just stored at ``node`` is of ``generation`` (``GenerationOdds``); only
        the generations above 0 are kept (``generation`` reads 0 for the rest)."""
        if generation:
            self._generation[node] = generation

    def generation(self, node: Node) -> int:
        """The generation of the state at ``node`` (0 where none was noted)."""
        return self._generation.get(node, 0)

    def count_state_hit(self, node: Node) -> None:
        """A request resumed from the state at ``node``: one rung up its reason's ladder."""
        hits = self._state_hits.get(node, 0) + 1
        self._state_hits[node] = hits
        reason = self.reason(node)
        if hits == 1:
            self.generation_odds.first_hit(reason, self.generation(node))
        ladder = self._ladders.get(reason)
        if ladder is None:
            ladder = self._ladders[reason] = HitLadder()
        ladder.climb(hits)

    def state_gone(self, node: Node) -> None:
        """The state at ``node`` left the cache (its reason note stays for the stats)."""
        stored = node in self._state_hits
        hits = self._state_hits.pop(node, 0)
        generation = self._generation.pop(node, 0)
        if stored and not hits:
            self.generation_odds.left_unused(self.reason(node), generation)
        if hits:
            ladder = self._ladders.get(self.reason(node))
            if ladder is not None:
                ladder.leave(hits)

    def state_hits(self, node: Node) -> int:
        """Hits on the state at ``node`` since it was stored."""
        return self._state_hits.get(node, 0)

    def ladder(self, reason: str) -> HitLadder | None:
        """The hit ladder of ``reason`` (None: no state of it was resumed from yet)."""
        return self._ladders.get(reason)

    def reason(self, node: Node) -> str:
        return self._reason.get(node, "unknown")

    def drop_session(self, node: Node) -> None:
        self._session.pop(node, None)

    def drop_reason(self, node: Node) -> None:
        self.state_gone(node)
        self._reason.pop(node, None)

    def clear(self) -> None:
        for node in list(self._state_hits):
            self.state_gone(node)  # every stored state leaves its rung
        self._session.clear()
        self._reason.clear()
