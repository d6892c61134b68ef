"""hycache's eviction: GreedyDual-Size over the *marginal* compute each entry saves.

A recurrent model can only resume where a state sits, so an entry is worth what the next
request loses without it, not what it cost to compute:

* a **state** at prefix length ``p`` saves the prefill of ``(q, p]``, where ``q`` is the nearest
  state above it on the path (the fallback a request would resume from instead);
* a state is **superseded** when the chain below it (nodes with one child each) reaches a
  deeper state: the next request of a conversation resumes at that deeper state, so this one
  only serves requests that diverge inside the chain; it keeps a learned share of its value
  (hits that resumed from superseded states over hits from others, at least
  ``superseded_weight``). Once it is gone, the deeper state's fallback moves up and its value
  grows: a conversation's last state ends up holding the value of the whole conversation;
* **KV on a leaf** goes with the leaf's state (same key); KV on a leaf holding no state is a
  *dead tail* (nothing can resume inside it; it only shows where later prompts diverge) and
  keeps ``dead_weight`` of its value.

Key = ``L + weight * (saved_flops / bytes) ** exponent``, where ``L`` is the aging clock as it
stood at the entry's last access (insert or hit; :mod:`hycache.policy.eviction.aging`) and bytes
include, for a state, the KV of ``(q, p]`` it keeps alive. When an eviction changes a
neighbour's value (its fallback, its being superseded, its node becoming a dead leaf) that
neighbour is re-keyed with its own last-access clock, so the change moves no entry forward in
time.

    path   root ── [0, 1024) S ── [1024, 3000) S' ── [3000, 3400) S''     S, S', S'': states
    value  S:  flops(0, 1024)   S': superseded by S''   S'': flops(1024 or 3000, ...)
"""

from __future__ import annotations

import heapq
import math
from collections.abc import KeysView

from hycache.components.base import Component
from hycache.components.recurrent import RecurrentComponent
from hycache.errors import ConfigError, IntegrityError
from hycache.policy.checkpoint.thresholds import DEFAULT_THRESHOLDS
from hycache.policy.eviction.aging import AgingClocks
from hycache.policy.eviction.base import EvictionContext
from hycache.policy.eviction.guesses import GuessPins
from hycache.policy.eviction.heap import LAYOUT_FREE_COMPACT_FACTOR, HeapEviction, Key
from hycache.tree.node import Node

#: how far down a chain ``superseded`` looks, and how many descendants a re-key visits
WALK_LIMIT = 64
#: defaults of two thresholds (knobs of the ``hycache`` preset, backed by the sweep on the
#: tune split, benchmarks/threshold_sweep.py): a pinned guess is cheap while a state is at most
#: this share of the budget; the running mean of a typical value (``aging_horizon``) weighs
#: the newest value by 1 / ``TYPICAL_WINDOW``
CHEAP_GUESS_SHARE = 1 / 64
TYPICAL_WINDOW = 64
#: how ``by_reason`` weighs a state: its reason's hits per state stored (``state_reuse_rate``),
#: the chance that it is resumed from once more given the hits it has had
#: (``EvictionContext.state_hit_chance``), or that chance with a state not yet resumed from
#: judged by its generation (``EvictionContext.state_lineage_chance``)
REASON_WEIGHTS = ("rate", "chance", "lineage")
#: the weight of KV on a leaf that holds no state (no request can resume inside it); chosen on
#: the tune split by the sweep (docs/benchmarks.md, "Thresholds on the tune split")
DEAD_WEIGHT = 0.05


def check_weighting(exponent: object, reason_weight: object) -> tuple[float, str]:
    """``(exponent, reason_weight)`` as a value eviction takes them; ConfigError unless the
    exponent is a positive finite number and the weight one of ``REASON_WEIGHTS``."""
    if not isinstance(reason_weight, str) or reason_weight not in REASON_WEIGHTS:
        raise ConfigError(f"reason_weight must be one of {REASON_WEIGHTS}, got {reason_weight!r}")
    if isinstance(exponent, bool) or not (
        isinstance(exponent, int | float) and 0 < exponent < math.inf
    ):
        raise ConfigError(f"exponent must be a positive number, got {exponent!r}")
    return float(exponent), reason_weight


class ValueEviction(HeapEviction):
    """See the module docstring. Mutates only its own heaps and records."""

    def __init__(
        self,
        *,
        session_aware: bool = False,
        superseded_weight: float = 0.05,
        dead_weight: float = DEAD_WEIGHT,
        by_reason: bool = True,
        reason_weight: str = "rate",
        exponent: float = 0.5,
        aging_horizon: int = 1600,
        learn_aging: bool = True,
        learn_superseded: bool = True,
        pins_published_state: bool = True,
        typical_window: int = TYPICAL_WINDOW,
        cheap_guess_share: float = CHEAP_GUESS_SHARE,
        pin_reused_guesses: bool = True,
        strict_guess_pins: bool = True,
        guess_reuse_ratio: int = DEFAULT_THRESHOLDS.reuse_ratio,
    ) -> None:
        super().__init__(session_aware=session_aware, pins_published_state=pins_published_state)
        self.refresh_state_path = False  # a hit refreshes only the state it resumed from
        self.superseded_weight = superseded_weight
        self.dead_weight = dead_weight
        self.by_reason = by_reason
        self.exponent, self.reason_weight = check_weighting(exponent, reason_weight)
        self.aging_horizon = aging_horizon
        self.learn_aging = learn_aging
        self.learn_superseded = learn_superseded
        self.typical_window = typical_window
        self._guesses = GuessPins(
            cheap_share=cheap_guess_share,
            pin_reused=pin_reused_guesses,
            strict=strict_guess_pins,
            reuse_ratio=guess_reuse_ratio,
        )
        self._superseded_hits = 0
        self._frontier_hits = 0
        self._typical = 0.0
        self._aging = AgingClocks(aging_horizon, learn=learn_aging)
        if not self._aging.learn:  # no sampler reads the heaps' layout
            self.compact_factor = LAYOUT_FREE_COMPACT_FACTOR
        self._dirty: list[Node] = []

    def attach(self, context: EvictionContext) -> None:
        super().attach(context)
        self._state = context.recurrent
        self._kv_per_token = (
            sum(c.bytes_per_page for c in context.kv_components) / context.page_size
        )
        self._state_slot = -1 if self._state is None else self._state.slot
        #: per slot, whether its entries are states (a recurrent component on any tier)
        self._is_state = tuple(isinstance(c, RecurrentComponent) for c in self._components)

    # ------------------------------------------------------------------ values
    def _holder_above(self, node: Node) -> Node | None:
        if not (self._state is not None):
            raise IntegrityError("broken invariant: self._state is not None")
        return self._state.holder_above(node)

    def _superseded(self, node: Node) -> bool:
        state = self._state
        if not (state is not None):
            raise IntegrityError("broken invariant: state is not None")
        slot = state.slot
        below = node
        for _ in range(WALK_LIMIT):
            children = below.children
            if len(children) != 1:
                return False
            below = next(iter(children.values()))
            if below.data[slot] is not None:
                return True
        return False

    def _state_value(self, node: Node) -> float:
        state = self._state
        if not (state is not None):
            raise IntegrityError("broken invariant: state is not None")
        slot = self._state_slot
        fallback = 0  # the end of the nearest state above (``holder_above``), inlined
        above = node.parent
        while above is not None and above.parent is not None:
            if above.data[slot] is not None:
                fallback = above.end
                break
            above = above.parent
        end = node.end
        view = self._view
        saved = view.prefill_flops(fallback, end - fallback)
        size = state.bytes_per_state + self._kv_per_token * (end - fallback)
        children = len(node.children)
        if children > 1:
            weight = float(children)  # the fallback of every continuation below
        elif self._superseded(node):
            weight = self._superseded_factor()
        else:
            weight = 1.0
        if self.by_reason:
            if self.reason_weight == "chance":
                weight *= view.state_hit_chance(node)
            elif self.reason_weight == "lineage":
                weight *= view.state_lineage_chance(node)
            else:
                weight *= view.state_reuse_rate(node)
        density: float = (saved / size) ** self.exponent
        return weight * density

    def _superseded_factor(self) -> float:
        """How much a superseded state is worth next to one that is not: learned from which
        kind the hits resumed from (conversations resume at the deepest state; prompts that
        share all but a tail resume at a superseded one), never below ``superseded_weight``."""
        if not self.learn_superseded:
            return self.superseded_weight
        ratio = (self._superseded_hits + 1) / (self._frontier_hits + 1)
        return min(1.0, max(self.superseded_weight, ratio))

    def _value(self, node: Node, component: Component) -> float:
        if self._state is not None and (
            self._is_state[component.slot] or node.data[self._state_slot] is not None
        ):
            return self._state_value(node)  # a state, or KV on the node holding it
        saved = self._view.prefill_flops(node.start, node.end - node.start)
        value: float = (saved / max(component.bytes_on(node), 1)) ** self.exponent
        if self._state is not None and not node.children:
            value *= self.dead_weight  # a leaf no request can resume inside
        return value

    def key(self, node: Node, component: Component) -> Key:
        value = self._value(node, component)
        self._typical += (value - self._typical) / self.typical_window  # a running mean
        return (self._aging.born((node, component.slot)) + value,)

    # ------------------------------------------------------------------ hooks
    def on_insert(self, node: Node, component: Component) -> None:
        self._settle()
        self._aging.stamp((node, component.slot), self._typical, self._view.clock)
        super().on_insert(node, component)
        if isinstance(component, RecurrentComponent):
            self._mark_neighbours(node)
            self._settle()
        elif node.parent is not None and self._state is not None and self._state.has(node.parent):
            self._dirty.append(node.parent)  # one more continuation below that state

    def touch(self, node: Node, component: Component) -> None:
        self._aging.stamp((node, component.slot), self._typical, self._view.clock)

    def on_hit(self, path: list[Node], used: Node | None) -> None:
        self._settle()
        if used is not None and self._state is not None and self._state.has(used):
            if self._superseded(used):
                self._superseded_hits += 1
            else:
                self._frontier_hits += 1
            slot = self._state_slot
            if self._aging.observe_hit((used, slot), self._current, self._slot_heap[slot]):
                self._rekey_all()
        super().on_hit(path, used)

    def evicted(self, node: Node, component: Component, key: Key) -> None:
        self._aging.evicted((node, component.slot), key[-1])
        if isinstance(component, RecurrentComponent):
            self._mark_neighbours(node)
            self._dirty.append(node)  # its KV, if a leaf, is a dead tail now
        else:
            if self._state is not None and self._state.has(node):
                above = self._holder_above(node)
                if above is not None:
                    self._dirty.append(above)
            if node.parent is not None:
                self._dirty.append(node.parent)  # may become a leaf

    @property
    def cheap_guess_share(self) -> float:
        return self._guesses.cheap_share

    @property
    def pin_reused_guesses(self) -> bool:
        return self._guesses.pin_reused

    @property
    def strict_guess_pins(self) -> bool:
        return self._guesses.strict

    def pinned(self, node: Node, component: Component) -> bool:
        """Also keeps a state that running requests pass through (a lock goes on below it) if
        it is a branch point, or the deepest state of its chain: a shared prefix's state is
        what the next arrivals resume from; an old turn of a conversation is not, and neither
        is the state at a lock that only holds KV (a request's published prompt, or the KV it
        reads in place past its resume point). A ``tail`` guess that only the request which
        took it passes (it decodes behind it and never reads it) is kept as
        :mod:`hycache.policy.eviction.guesses` says."""
        if super().pinned(node, component):
            return True
        if not (node.lock_ref > 0 and isinstance(component, RecurrentComponent)):
            return False
        view = self._view
        if not view.tree.locks_passing(node):
            return False  # locks only end here: KV-only locks (nobody will read this state)
        if len(node.children) > 1:
            return True  # a branch point: the fallback of every continuation below
        state = self._state
        if state is None:
            raise IntegrityError("broken invariant: a state pinned without a recurrent group")
        if view.state_reason(node) == "tail" and not self._guesses.keeps(
            view, node, state.bytes_per_state
        ):
            return False  # an unproven guess only its own request passes, and memory is dear
        return not self._superseded(node)

    def next_victim(self, resource: str) -> tuple[Node, Component] | None:
        self._settle()
        return super().next_victim(resource)

    def end_round(self) -> None:
        super().end_round()
        self._settle()

    def forget(self, live: KeysView[tuple[Node, int]]) -> None:
        self._aging.forget(live)

    def reweigh(self, *, exponent: float, reason_weight: str) -> None:
        """From now on weigh values with ``exponent`` and ``reason_weight`` (what they give a new
        policy); every entry is re-keyed, same last-access clock, new value. ConfigError, before
        anything changes, where ``check_weighting`` refuses them."""
        self.exponent, self.reason_weight = check_weighting(exponent, reason_weight)
        self._dirty.extend(node for node, _slot in self._current)
        self._settle()

    def fix_flat_clock(self) -> None:
        """From now on age by GreedyDual's flat clock alone and stop learning the clock (what
        ``aging_horizon`` 0 gives a new policy); every entry is re-keyed if the live clock was
        the aged one."""
        aging = self._aging
        aging.learn = False
        if aging.aged:
            aging.aged = False
            self._rekey_all()

    # ------------------------------------------------------------------ re-keying
    def _rekey_all(self) -> None:
        """The live aging clock changed: every entry goes back in with its born time on the
        new clock, same value."""
        aging, current = self._aging, self._current
        for ident, key in list(current.items()):
            node, slot = ident
            rebased = (*key[:-1], aging.rebased(ident, key[-1]))
            current[ident] = rebased
            heapq.heappush(self._slot_heap[slot], (rebased, next(self._seq), node, slot))
            self._entries += 1

    def _mark_neighbours(self, node: Node) -> None:
        """The states whose value depends on the state at ``node``: the one above (it may be
        superseded or not any more), the nearest ones below (their fallback), and the node's
        own KV (a leaf's KV follows its state)."""
        state = self._state
        if not (state is not None):
            raise IntegrityError("broken invariant: state is not None")
        above = self._holder_above(node)
        if above is not None:
            self._dirty.append(above)
        self._dirty.append(node)
        stack = list(node.children.values())
        visited = 0
        while stack and visited < WALK_LIMIT:
            below = stack.pop()
            visited += 1
            if state.has(below):
                self._dirty.append(below)
            else:
                stack.extend(below.children.values())

    def _settle(self) -> None:
        """Re-key the marked nodes' entries (same last-access clock, new value). Safe inside a
        round: a stashed entry's old key is superseded and skipped when it comes back."""
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, []
        components = self._components
        for node in dict.fromkeys(dirty):
            if node.parent is None:
                continue
            data = node.data
            for component in components:
                slot = component.slot
                if data[slot] is not None and (node, slot) in self._current:
                    self._push(node, component)
