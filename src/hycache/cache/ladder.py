"""``HitLadder``: per checkpoint reason, how many states were resumed from at least ``k`` times
and how many of them are still stored with exactly ``k``; what the cache's view reads to tell
the chance that a state which has had ``k`` hits is resumed from once more
(``CacheView.state_hit_chance``).

A stored state climbs one rung per hit: its ``k``-th hit counts it on rung ``k``. Rung 0 (every
state stored) is the cache's own count (``Counters.reason_inserted``), so the ladder starts at
rung 1. A state still stored on rung ``k`` has not settled there: it may climb yet. So the
states that settled on rung ``k`` or went past it are those that reached it less those still
stored on it, and of them, the ones that reached rung ``k + 1`` went on.
"""

from __future__ import annotations

from hycache.errors import IntegrityError


class HitLadder:
    """Per rung ``k`` >= 1: the states that reached ``k`` hits (``at``) and the stored ones that
    have had exactly ``k`` (``live_at``). Every call is O(1) (amortised)."""

    def __init__(self) -> None:
        self._reached: list[int] = [0]  # [k]: states that reached k hits; [0] unused
        self._live: list[int] = [0]  # [k]: stored states that have had exactly k

    def climb(self, rung: int) -> None:
        """A stored state had its ``rung``-th hit (``rung`` >= 1)."""
        if rung < 1:
            raise IntegrityError(f"a hit ladder starts at rung 1, got {rung}")
        if rung > 1 and self.live_at(rung - 1) <= 0:
            raise IntegrityError(f"no stored state on rung {rung - 1} climbed to rung {rung}")
        while rung >= len(self._reached):
            self._reached.append(0)
            self._live.append(0)
        self._reached[rung] += 1
        self._live[rung] += 1
        if rung > 1:
            self._live[rung - 1] -= 1

    def leave(self, rung: int) -> None:
        """A state that had ``rung`` hits left the cache (``rung`` >= 1)."""
        if self.live_at(rung) <= 0:
            raise IntegrityError(f"no stored state on rung {rung} of this hit ladder")
        self._live[rung] -= 1

    def at(self, rung: int) -> int:
        """States that reached ``rung`` hits (0 beyond the top, and for rung 0: the cache
        counts those)."""
        return self._reached[rung] if 0 < rung < len(self._reached) else 0

    def live_at(self, rung: int) -> int:
        """Stored states that have had exactly ``rung`` hits (0 beyond the top)."""
        return self._live[rung] if 0 < rung < len(self._live) else 0
