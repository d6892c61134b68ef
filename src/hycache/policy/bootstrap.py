"""How a one-time bootstrap scores its candidates (Marconi's alphas, hycache's knob sets).

A bootstrap replays the same window once per candidate; the replays are independent, so the
caller decides where they run. :class:`ScoreAll` is that choice: given ``replay`` and the
candidates, it returns every candidate's score in the candidates' order. :func:`in_order`
replays them here, one after the other; the simulator can replay them in parallel
(``hycache.sim.forked``). The decision never depends on which was used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

Candidate = TypeVar("Candidate")


class ScoreAll(Protocol):
    """Every candidate's score, in the order of ``candidates``."""

    def __call__(
        self, replay: Callable[[Candidate], float], candidates: Sequence[Candidate]
    ) -> list[float]: ...


def in_order(replay: Callable[[Candidate], float], candidates: Sequence[Candidate]) -> list[float]:
    """Replay the candidates here, one after the other."""
    return [replay(candidate) for candidate in candidates]
