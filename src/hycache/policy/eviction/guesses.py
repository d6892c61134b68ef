"""Whether a running request keeps its own *tail* guess pinned (the value eviction's rule).

A tail guess is the state a request takes at its prompt end less the learned tail, betting
that a later prompt shares all but its tail. While the request decodes behind it, only its
own lock passes the guess: it never reads it again, so pinning it only serves requests that
arrive meanwhile. The guess stays pinned once some request resumed from it, or while others
pass it, and otherwise while either holds:

* **cheap**: a state is at most ``cheap_share`` of the budget (the slot it holds costs little);
* **tails pay** (``pin_reused``): tail states have been resumed from at least as often as
  states of all reasons together, both as ``(hits + 1) / (stored + 2)``, learned from the
  stream. Where questions on one document arrive together (docqa) the guess is what the next
  ones resume from; where guesses rarely pay (shared-prefix), a pinned one costs a request's
  slot in a burst.
"""

from __future__ import annotations

from hycache.errors import ConfigError
from hycache.policy.eviction.base import EvictionContext
from hycache.tree.node import Node


class GuessPins:
    """The rule above; ``cheap_share`` in (0, 1]. ``keeps`` asks the cache's ``view``."""

    def __init__(self, *, cheap_share: float, pin_reused: bool) -> None:
        if not 0 < cheap_share <= 1:
            raise ConfigError(f"cheap_share must be in (0, 1], got {cheap_share}")
        self.cheap_share = cheap_share
        self.pin_reused = pin_reused

    def keeps(self, view: EvictionContext, node: Node, state_bytes: int) -> bool:
        """Whether the tail guess at ``node`` (a state of ``state_bytes``), which its own
        request's lock passes, stays pinned."""
        if node.hits or view.passed_by_others(node):
            return True
        if state_bytes <= view.budget_bytes * self.cheap_share:
            return True
        return self.pin_reused and view.state_reuse_rate(node) >= view.mean_state_reuse_rate()
