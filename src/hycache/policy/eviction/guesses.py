"""Whether a running request keeps its own *tail* guess pinned (the value eviction's rule).

A tail guess is the state a request takes at its prompt end less the learned tail, betting
that a later prompt shares all but its tail. While the request decodes behind it, only its
own lock passes the guess: it never reads it again, so pinning it only serves requests that
arrive meanwhile. The guess stays pinned once some request resumed from it, or while others
pass it, and otherwise while either holds:

* **cheap**: a state is at most ``cheap_share`` of the budget (the slot it holds costs little).
  With ``strict``, the guesses of every request in flight together: each running request
  may hold one, so a burst of them pins that many states at once;
* **tails pay** (``pin_reused``): tail states have been resumed from at least as often as
  states of all reasons together, both as ``(hits + 1) / (stored + 2)``, learned from the
  stream. Where questions on one document arrive together (docqa) the guess is what the next
  ones resume from; where guesses rarely pay (shared-prefix), a pinned one costs a request's
  slot in a burst. With ``strict``, tails must also pass the checkpoint planner's own bar
  for a kind that pays (one reuse in ``reuse_ratio`` stored states): where nearly nothing is
  reused, being the best of the kinds is not paying.
"""

from __future__ import annotations

from hycache.errors import ConfigError
from hycache.policy.checkpoint.thresholds import DEFAULT_THRESHOLDS
from hycache.policy.eviction.base import EvictionContext
from hycache.tree.node import Node


class GuessPins:
    """The rule above; ``cheap_share`` in (0, 1], ``reuse_ratio`` >= 1. ``keeps`` asks the
    cache's ``view``."""

    def __init__(
        self,
        *,
        cheap_share: float,
        pin_reused: bool,
        strict: bool = True,
        reuse_ratio: int = DEFAULT_THRESHOLDS.reuse_ratio,
    ) -> None:
        if not 0 < cheap_share <= 1:
            raise ConfigError(f"cheap_share must be in (0, 1], got {cheap_share}")
        if reuse_ratio < 1:
            raise ConfigError(f"reuse_ratio must be at least 1, got {reuse_ratio}")
        self.cheap_share = cheap_share
        self.pin_reused = pin_reused
        self.strict = strict
        self.reuse_ratio = reuse_ratio

    def keeps(self, view: EvictionContext, node: Node, state_bytes: int) -> bool:
        """Whether the tail guess at ``node`` (a state of ``state_bytes``), which its own
        request's lock passes, stays pinned."""
        if node.hits or view.passed_by_others(node):
            return True
        holders = max(1, view.requests_in_flight()) if self.strict else 1
        if state_bytes * holders <= view.budget_bytes * self.cheap_share:
            return True
        if not self.pin_reused:
            return False
        rate = view.state_reuse_rate(node)
        if self.strict and rate * self.reuse_ratio < 1:
            return False
        return rate >= view.mean_state_reuse_rate()
