"""The eviction contract: what a policy sees of the cache (``EvictionContext``) and the hooks
the cache calls (``EvictionPolicy``).

A policy never sees the cache itself: it gets a narrow read-only view when the cache is built
(``attach``) and hooks when entries are inserted, hit or must go. Every cached entry is a
(node, component) pair; a policy yields victims, the cache evicts them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

from hycache.compiled import mypyc_attr, own_abc_caches
from hycache.components.base import Component
from hycache.components.full import PagedKVComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import CacheUsageError
from hycache.tree.node import Node
from hycache.tree.radix import RadixTree


class EvictionContext(Protocol):
    """The part of a cache an eviction policy may read."""

    @property
    def clock(self) -> int:
        """Logical time: one tick per admit and per finish."""

    @property
    def tree(self) -> RadixTree:
        """The radix tree (read only: the cache does every mutation)."""

    @property
    def page_size(self) -> int: ...

    @property
    def kv_components(self) -> Sequence[PagedKVComponent]: ...

    @property
    def recurrent(self) -> RecurrentComponent | None: ...

    @property
    def budget_bytes(self) -> int:
        """The pool's whole budget."""

    def resource_of(self, kind: str) -> str:
        """The pool resource (budget) that entries of ``kind`` are charged to."""

    def prefill_flops(self, start: int, length: int) -> float:
        """FLOPs to prefill ``length`` tokens after a prefix of ``start`` tokens."""

    def is_live(self, node: Node) -> bool:
        """Whether ``node`` belongs to a session that has not ended."""

    def state_reason(self, node: Node) -> str:
        """Why the state at ``node`` was checkpointed (``"unknown"`` if no reason is known)."""

    def state_reuse_rate(self, node: Node) -> float:
        """``(hits + 1) / (stored + 2)`` of the checkpoint reason of the state at ``node``."""

    def state_hit_chance(self, node: Node) -> float:
        """The chance that the state at ``node``, resumed from ``k`` times since it was stored,
        is resumed from once more, learned from the states of its checkpoint reason
        (``hycache.cache.ladder``): for ``k`` = 0, ``(states resumed from + 1) / (stored + 2)``;
        else ``(states that had a (k+1)-th hit + c0) / (states that had a k-th, less those
        still stored with k, + 1)``, ``c0`` being the chance for ``k`` = 0."""

    def state_lineage_chance(self, node: Node) -> float:
        """``state_hit_chance`` for a state resumed from before; for one not yet, the chance
        learned for its reason and generation (``hycache.cache.generations``), with
        ``state_hit_chance``'s as the prior of generation 0."""

    def mean_state_reuse_rate(self) -> float:
        """``(hits + 1) / (stored + 2)`` over the states of every checkpoint reason."""

    def passed_by_others(self, node: Node) -> bool:
        """Whether a lock other than that of the request that published ``node``'s state
        passes through ``node``."""

    def requests_in_flight(self) -> int:
        """How many requests were admitted and have not finished or been aborted."""


@mypyc_attr(allow_interpreted_subclasses=True)
class EvictionPolicy(ABC):
    """Chooses victims. The cache calls the hooks; ``next_victim`` yields (node, component)
    pairs to evict, best first, until the cache has freed enough; it must skip pinned
    entries."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own_abc_caches(cls)

    _context: EvictionContext | None = None
    #: whether a request's lock on its published prompt also pins the state there (the
    #: request itself never reads that state again)
    pins_published_state: bool = True

    def __init__(self) -> None:
        self._context = None

    def attach(self, context: EvictionContext) -> None:
        """Called once by the cache that owns this policy."""
        if self._context is not None:
            raise CacheUsageError("an eviction policy serves one cache; build a new one")
        self._context = context

    @property
    def context(self) -> EvictionContext:
        if self._context is None:
            raise CacheUsageError("eviction policy used before a cache attached it")
        return self._context

    def pinned(self, node: Node, component: Component) -> bool:
        """Whether the entry may not be evicted now (``next_victim`` never yields it).
        Default: the tree's rule (KV on a locked path, a state where a lock ends). A policy
        may pin more, never less (the cache counts locked KV without asking)."""
        return self.context.tree.pinned(node, component)

    @abstractmethod
    def on_insert(self, node: Node, component: Component) -> None:
        """``component`` got new data on ``node`` (now = ``context.clock``)."""

    @abstractmethod
    def on_hit(self, path: list[Node], used: Node | None) -> None:
        """A request reused ``path`` (root to the hit); ``used`` holds the state it copied."""

    def on_cover(self, path: Sequence[Node], covered: int) -> None:
        """An insert is about to place a sequence (before room is made for it): ``path`` (root
        first) are the nodes already in the tree that it matched, of which those ending at or
        before ``covered`` tokens it covers whole. Policies that do not rank by what an insert
        walks over ignore it."""
        return None

    @abstractmethod
    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        """The next entry to evict that frees bytes of ``resource`` (None: nothing left)."""

    @abstractmethod
    def end_round(self) -> None:
        """The cache freed enough (or gave up): entries skipped this round become candidates
        again."""

    def on_liveness_change(self, nodes: list[Node]) -> None:
        """The session owning ``nodes`` ended (``context.is_live`` changed for them).
        Policies that do not rank by liveness ignore it."""
        return None


own_abc_caches(EvictionPolicy)
