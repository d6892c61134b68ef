"""A request's hold on the cache, from admit to finish or abort."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hycache.policy.checkpoint.base import PrefillPlan
from hycache.tree.keys import TOKEN_BYTES, TokenKey
from hycache.tree.node import Node
from hycache.tree.runkey import RunKey


@dataclass(frozen=True)
class PageRef:
    """One KV page: the pool's page id and the first token position it holds."""

    start: int
    page: int


@dataclass(eq=False)
class Lease:
    """What an admitted request holds. Created and mutated only by ``HybridPrefixCache``.

    ``hit``: tokens reused (prefill starts there); ``kv_hit``: what attention alone matched;
    ``source_state``: slot id of the cached state the engine must copy into its private slot
    (copy-on-write) before extending; ``working``: unit ids per kind held while running (KV pages
    for the new tokens, the running state slots); ``checkpoints``: recorded state copies,
    position -> (slot id, reason). Compared by identity: each admission is its own lease."""

    request_id: int
    key: TokenKey
    prompt_len: int
    max_new_tokens: int
    namespace: str | None
    session: str | None
    hit: int
    kv_hit: int
    plan: PrefillPlan
    locked: Node | None
    source_state: int | None
    working: dict[str, Sequence[int]]
    checkpoints: dict[int, tuple[int, str]] = field(default_factory=dict)
    #: per KV kind, the cached pages the request reuses for ``[0, hit)`` (a sliding window's
    #: dropped pages are absent), in position order
    reused_pages: dict[str, tuple[PageRef, ...]] = field(default_factory=dict)
    #: the request reads cached full-attention KV in place for ``[hit, kv_read_end)`` (see
    #: ``kv_locked``) from ``in_place_pages``; ``kv_read_end == hit``: it reads none
    kv_read_end: int = 0
    in_place_pages: tuple[PageRef, ...] = ()
    #: the first position whose sliding-window KV the request holds when that is past
    #: ``hit``: an engine that loaded the prompt beyond the hit from storage of its own holds
    #: only the window before where it resumes (``HybridPrefixCache.window_loaded_from``);
    #: inserts keep no sliding-window KV below it. 0: from the hit, as it computed it
    window_from: int = 0
    #: whether the lock on ``locked`` also pins the state there (see ``RadixTree.lock``)
    holds_state: bool = True
    #: a KV-only lock deeper than ``locked``: attention matched past the state the request
    #: resumes from, and it reads that cached KV in place while recomputing the state
    kv_locked: Node | None = None
    #: the generation of the states the request stores: one more than that of the state it
    #: resumed from, 0 where it resumed from none (``hycache.cache.generations``)
    generation: int = 0
    #: state slots reserved at admission for prefill checkpoints (freed when the prefill ends)
    spare_slots: list[int] = field(default_factory=list)
    #: the shared prefix length (its ``kv_hit``) whose missing state the spare was reserved for
    spare_for: int | None = None
    #: the nodes whose states ``publish`` stored (the request's own, passed by its own lock)
    published: list[Node] = field(default_factory=list)
    #: how far ``publish`` made the prompt part of the cache (0: not published)
    published_upto: int = 0
    fed: bytearray = field(default_factory=bytearray)
    #: the decoded tokens fed back, when one of them came as a run key (``fed`` is empty then)
    fed_runs: RunKey | None = None
    #: lower tiers: tokens of ``hit`` whose KV was loaded from each, and the bytes each
    #: moved up to the device
    tier_tokens: dict[str, int] = field(default_factory=dict)
    loaded_bytes_by_tier: dict[str, int] = field(default_factory=dict)
    active: bool = True

    @property
    def loaded_bytes(self) -> int:
        """Bytes moved up from every lower tier for this request."""
        return sum(self.loaded_bytes_by_tier.values())

    @property
    def final_state_slot(self) -> int | None:
        """The running state slot ``finish`` keeps as the end-of-request state when the plan
        donates it (the caller copies the state after the last fed token there first); None
        when the plan keeps no end state or the model has no recurrent layers."""
        running = self.working.get("recurrent", ())
        return running[-1] if self.plan.keep_final_state and running else None

    @property
    def recompute(self) -> int:
        return self.kv_hit - self.hit

    @property
    def length(self) -> int:
        """Tokens with KV so far: the prompt plus the decoded tokens fed back."""
        fed = self.fed if self.fed_runs is None else self.fed_runs
        return self.prompt_len + len(fed) // TOKEN_BYTES

    @property
    def full_key(self) -> TokenKey:
        """The prompt's key followed by the decoded tokens fed back."""
        if self.fed_runs is not None:
            return self.key + self.fed_runs
        return self.key + bytes(self.fed)


@dataclass(frozen=True)
class Wait:
    """Admission must wait: memory is held by requests in flight. ``short_bytes`` per resource."""

    reason: str
    short_bytes: dict[str, int]


@dataclass(frozen=True)
class FinishResult:
    """What ``finish`` stored: tokens whose KV is now cached (``[0, cached_tokens)``), the
    positions of states inserted and refused, and per KV kind the pages that hold the cached
    tokens now (write the request's KV there; a sliding window's dropped pages are absent)."""

    cached_tokens: int
    states_inserted: tuple[int, ...]
    states_refused: tuple[int, ...]
    pages: dict[str, tuple[PageRef, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class PublishResult:
    """What ``publish`` made part of the cache: the prompt's tokens ``[0, cached_tokens)``
    (0: nothing), the positions of the states stored, and per KV kind the pages that hold
    those tokens now."""

    cached_tokens: int
    states_inserted: tuple[int, ...]
    pages: dict[str, tuple[PageRef, ...]] = field(default_factory=dict)
