"""``GenerationOdds``: per checkpoint reason and generation, how many states stored were
resumed from and how many left the cache unused; what the cache's view reads to tell the
chance that a state not yet resumed from will be (``CacheView.state_lineage_chance``).

A state's *generation* is one more than that of the state its request resumed from, or 0
where the request resumed from none (``Lease.generation``, noted by
``NodeNotes.note_generation``). A
conversation served from the cache turn after turn stores states of rising generations; a
new one starts at 0. Where the cache can keep only a few conversations, the ones it already
kept are the ones likely to come back while still cached, and the odds per generation learn
that from the stream.

The chance at generation ``g`` is ``(first hits + c) / (settled + 1)``, ``c`` being the chance
at ``g - 1`` (at 0: the caller's prior), ``settled`` the states of ``g`` resumed from or gone
unused: a generation few states reached borrows the one below it instead of a constant.
"""

from __future__ import annotations

from hycache.errors import IntegrityError


class GenerationOdds:
    """First hits and unused departures per (reason, generation); a reason's chances are
    memoised until one of its counts or the prior changes."""

    def __init__(self) -> None:
        self._first: dict[str, list[int]] = {}  # reason -> [g]: states resumed from
        self._unused: dict[str, list[int]] = {}  # reason -> [g]: states gone unused
        self._memo: dict[str, tuple[float, list[float]]] = {}  # reason -> (prior, chances)

    def first_hit(self, reason: str, generation: int) -> None:
        """A state of ``reason`` and ``generation`` was resumed from for the first time."""
        self._count(self._first, reason, generation)

    def left_unused(self, reason: str, generation: int) -> None:
        """A state of ``reason`` and ``generation`` left the cache never resumed from."""
        self._count(self._unused, reason, generation)

    def settled(self, reason: str, generation: int) -> tuple[int, int]:
        """``(resumed from, gone unused)`` of ``reason``'s states of ``generation``."""
        return (
            _at(self._first.get(reason), generation),
            _at(self._unused.get(reason), generation),
        )

    def chance(self, reason: str, generation: int, prior: float) -> float:
        """The chance that a state of ``reason`` and ``generation`` is resumed from, the
        generations below it each the prior of the next (see the module docstring)."""
        if generation < 0:
            raise IntegrityError(f"a generation is never negative, got {generation}")
        memo = self._memo.get(reason)
        if memo is None or memo[0] != prior:
            memo = self._memo[reason] = (prior, [])
        chances = memo[1]
        first, unused = self._first.get(reason), self._unused.get(reason)
        while len(chances) <= generation:
            g = len(chances)
            below = chances[-1] if chances else prior
            hits = _at(first, g)
            chances.append((hits + below) / (hits + _at(unused, g) + 1))
        return chances[generation]

    def _count(self, table: dict[str, list[int]], reason: str, generation: int) -> None:
        if generation < 0:
            raise IntegrityError(f"a generation is never negative, got {generation}")
        counts = table.get(reason)
        if counts is None:
            counts = table[reason] = []
        while len(counts) <= generation:
            counts.append(0)
        counts[generation] += 1
        self._memo.pop(reason, None)


def _at(counts: list[int] | None, generation: int) -> int:
    return counts[generation] if counts is not None and generation < len(counts) else 0
