"""A request's hold on the cache, from admit to finish or abort."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hycache.policy.base import PrefillPlan
from hycache.tree.keys import TOKEN_BYTES
from hycache.tree.node import Node


@dataclass
class Lease:
    """What an admitted request holds. Created and mutated only by ``HybridPrefixCache``.

    ``hit``: tokens reused (prefill starts there); ``kv_hit``: what attention alone matched;
    ``source_state``: slot id of the cached state the engine must copy into its private slot
    (copy-on-write) before extending; ``working``: unit ids per kind held while running (KV pages
    for the new tokens, the running state slots); ``checkpoints``: recorded state copies,
    position -> (slot id, reason)."""

    request_id: int
    key: bytes
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
    #: whether the lock on ``locked`` also pins the state there (see ``RadixTree.lock``)
    holds_state: bool = True
    #: a KV-only lock deeper than ``locked``: attention matched past the state the request
    #: resumes from, and it reads that cached KV in place while recomputing the state
    kv_locked: Node | None = None
    #: state slots reserved at admission for prefill checkpoints (freed when the prefill ends)
    spare_slots: list[int] = field(default_factory=list)
    #: the shared prefix length (its ``kv_hit``) whose missing state the spare was reserved for
    spare_for: int | None = None
    #: the nodes whose states ``publish`` stored (the request's own, passed by its own lock)
    published: list[Node] = field(default_factory=list)
    fed: bytearray = field(default_factory=bytearray)
    active: bool = True

    @property
    def recompute(self) -> int:
        return self.kv_hit - self.hit

    @property
    def length(self) -> int:
        """Tokens with KV so far: the prompt plus the decoded tokens fed back."""
        return self.prompt_len + len(self.fed) // TOKEN_BYTES

    @property
    def full_key(self) -> bytes:
        return self.key + bytes(self.fed)


@dataclass(frozen=True)
class Wait:
    """Admission must wait: memory is held by requests in flight. ``short_bytes`` per resource."""

    reason: str
    short_bytes: dict[str, int]


@dataclass(frozen=True)
class FinishResult:
    """What ``finish`` stored: tokens whose KV is now cached and states inserted/refused."""

    cached_tokens: int
    states_inserted: tuple[int, ...]
    states_refused: tuple[int, ...]
