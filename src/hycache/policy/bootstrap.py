"""How a one-time bootstrap runs its contest (Marconi's alphas, hycache's knob sets).

A bootstrap replays the same window once per candidate, picks one by the scores and then
*finishes* with it (the simulator: replays the whole source with the pick, carrying on the
pick's window replay where it can). The replays are independent, so the caller decides where
they run: a :class:`Contest` is that choice. It replays every candidate, hands the scores, in
the candidates' order, to ``pick``, and runs ``finish`` on the picked candidate, in the process
that replayed it (whatever that replay kept of its work is there). :func:`in_order` does it all
here, one replay after the other; the simulator can replay them in forked processes
(``hycache.sim.forked``). The pick never depends on which was used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from hycache.errors import IntegrityError

Candidate = TypeVar("Candidate")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Picked(Generic[Result]):
    """The picked candidate's ``index`` and what ``finish`` made of it."""

    index: int
    result: Result


@dataclass(frozen=True)
class Outcome(Generic[Result]):
    """Every candidate's score, in the candidates' order, and the pick (None: ``pick`` declined
    them all, nothing was finished)."""

    scores: tuple[float, ...]
    picked: Picked[Result] | None


class Contest(Protocol):
    """Replay every candidate, ``pick`` by the scores, ``finish`` the pick where it was
    replayed."""

    def __call__(
        self,
        replay: Callable[[Candidate], float],
        candidates: Sequence[Candidate],
        pick: Callable[[Sequence[float]], int | None],
        finish: Callable[[Candidate], Result],
    ) -> Outcome[Result]: ...


def checked_pick(
    pick: Callable[[Sequence[float]], int | None], scores: Sequence[float]
) -> int | None:
    """``pick(scores)``, which must name a candidate (IntegrityError otherwise)."""
    index = pick(scores)
    if index is not None and not 0 <= index < len(scores):
        raise IntegrityError(f"picked candidate {index} of {len(scores)}")
    return index


def in_order(
    replay: Callable[[Candidate], float],
    candidates: Sequence[Candidate],
    pick: Callable[[Sequence[float]], int | None],
    finish: Callable[[Candidate], Result],
) -> Outcome[Result]:
    """The contest run here: the candidates replayed one after the other, then the pick
    finished."""
    scores = tuple(float(replay(candidate)) for candidate in candidates)
    index = checked_pick(pick, scores)
    if index is None:
        return Outcome(scores, None)
    return Outcome(scores, Picked(index, finish(candidates[index])))
