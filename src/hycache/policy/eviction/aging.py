"""The aging clock of the value eviction, and which of two clocks to age by, learned online.

A GreedyDual key is ``L + value``, with ``L`` as it stood at the entry's last access. Two
clocks are kept side by side for every entry:

* **flat**: GreedyDual's ``L`` alone (the largest key evicted so far, on this clock's scale);
* **aged**: ``L`` plus one typical value per ``horizon`` cache ticks, so an entry not touched
  for that long has lost a typical value against the entries touched now.

Neither is right everywhere: a chat stream comes back to a conversation's state after a long
pause, which the aged clock has written off; a stream whose reuse is all near the newest
entries wants the old but valuable ones to make room. The clock that ranks the entries hits
come back to higher wins. At every hit on entry ``h`` (before it is refreshed),
``samples`` live entries are drawn at random from its heap; each clock scores the share of them
it would evict before ``h``. The running sum of ``aged share - flat share`` picks the live clock:
aged while the sum stays above ``-1``, flat once it falls below (back to aged above ``+1``: one
whole hit's worth either way, so a tie does not flip it to and fro). A switch re-keys every
entry with its other born time (same value, no entry moves forward in time).
"""

from __future__ import annotations

import random
from collections.abc import KeysView

from hycache.tree.node import Node

Ident = tuple[Node, int]
Key = tuple[float, ...]
HeapEntry = tuple[Key, int, Node, int]

#: entries drawn per hit to rank it against; the score is a running sum over hits, so the
#: sample only needs to be large enough that one hit cannot flip the clock (one sample would);
#: 64 rather than 16 halves how far results move with the sampler's seed (docs/benchmarks.md,
#: "Parked inner KV")
SAMPLES = 64
#: how far the running score must cross zero before the live clock changes: one hit's worth
SWITCH_AT = 1.0


class AgingClocks:
    """Born times (the clock at the last access) of every entry, on both clocks; which clock
    is live; the learned score. ``aged`` alone (``learn=False``) or flat alone
    (``horizon == 0``) give GreedyDual with or without aging, never switching."""

    def __init__(self, horizon: int, *, learn: bool, samples: int = SAMPLES) -> None:
        self.horizon = horizon
        self.learn = learn and horizon > 0
        self.samples = samples
        self.aged = horizon > 0  # the live clock
        self.switches = 0
        self.score = 0.0
        self._clock_aged = 0.0
        self._clock_flat = 0.0
        self._born: dict[Ident, tuple[float, float]] = {}
        self._rng = random.Random(0)

    def born(self, ident: Ident) -> float:
        """The live clock at ``ident``'s last access (the clock now if never stamped)."""
        pair = self._born.get(ident)
        if pair is None:
            return self._clock_aged if self.aged else self._clock_flat
        return pair[0] if self.aged else pair[1]

    def stamp(self, ident: Ident, typical: float, tick: int) -> None:
        """``ident`` is accessed now (insert or hit)."""
        aged = self._clock_aged + typical * tick / self.horizon if self.horizon else 0.0
        self._born[ident] = (aged, self._clock_flat)

    def evicted(self, ident: Ident, live_key: float) -> None:
        """``ident`` left with live key ``live_key``: each clock moves up to its own key."""
        pair = self._born.pop(ident, None)
        if pair is None:
            pair = (self._clock_aged, self._clock_flat)
        aged, flat = self._keys(pair, live_key)
        if self.aged:
            aged = live_key  # the live clock takes the key itself, not a sum rounded again
        else:
            flat = live_key
        self._clock_aged = max(self._clock_aged, aged)
        self._clock_flat = max(self._clock_flat, flat)

    def forget(self, live: KeysView[Ident]) -> None:
        self._born = {i: t for i, t in self._born.items() if i in live}

    def observe_hit(self, ident: Ident, current: dict[Ident, Key], heap: list[HeapEntry]) -> bool:
        """Score a hit on ``ident`` (before it is refreshed) against ``samples`` live entries
        of ``heap``; returns whether the live clock changed (the caller re-keys)."""
        if not self.learn or not heap:
            return False
        key = current.get(ident)
        pair = self._born.get(ident)
        if key is None or pair is None:
            return False
        aged, flat = self._keys(pair, key[-1])
        below_aged = below_flat = drawn = 0
        draw, size = self._rng.getrandbits, len(heap)
        bits = size.bit_length()
        for _ in range(self.samples):
            # ``randrange(size)``'s own draw (the same numbers), without its Python frames
            index = draw(bits)
            while index >= size:
                index = draw(bits)
            other_key, _, node, slot = heap[index]
            other = (node, slot)
            if other == ident or current.get(other) != other_key:
                continue  # the hit itself, or a superseded heap entry
            other_pair = self._born.get(other)
            if other_pair is None:
                continue
            other_aged, other_flat = self._keys(other_pair, other_key[-1])
            drawn += 1
            below_aged += other_aged < aged
            below_flat += other_flat < flat
        if drawn:
            self.score += (below_aged - below_flat) / drawn
        if (self.score < -SWITCH_AT) if self.aged else (self.score > SWITCH_AT):
            self.aged = not self.aged
            self.switches += 1
            return True
        return False

    def rebased(self, ident: Ident, key: float) -> float:
        """After a switch: the live key of ``ident`` whose key on the old clock was ``key``."""
        pair = self._born.get(ident)
        if pair is None:
            return key
        aged_before = not self.aged
        value = key - (pair[0] if aged_before else pair[1])
        return (pair[0] if self.aged else pair[1]) + value

    def _keys(self, pair: tuple[float, float], live_key: float) -> tuple[float, float]:
        value = live_key - (pair[0] if self.aged else pair[1])
        return pair[0] + value, pair[1] + value
