"""How a one-time bootstrap runs its contest (Marconi's alphas, hycache's knob sets).

A bootstrap replays the same window once per candidate, picks one by the scores and then
*finishes* with it (the simulator: replays the whole source with the pick, carrying on the
pick's window replay where it can). The replays are independent, so the caller decides where
they run: a :class:`Contest` is that choice. It replays every candidate, hands the scores, in
the candidates' order, to ``pick``, and runs ``finish`` on the picked candidate, in the process
that replayed it (whatever that replay kept of its work is there). A score is whatever the
caller's ``pick`` reads (Marconi's: the FLOPs saved; ``hycache``'s: the tokens reused and the
requests that reused them); it must pickle, to cross from a forked replay.
:func:`in_order` does it all here, one replay after the other; the simulator can replay
them in forked processes (``hycache.sim.forked``). The pick never depends on which was used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from hycache.errors import IntegrityError

Candidate = TypeVar("Candidate")
Result = TypeVar("Result")
Score = TypeVar("Score")


@dataclass(frozen=True)
class Picked(Generic[Result]):
    """The picked candidate's ``index`` and what ``finish`` made of it."""

    index: int
    result: Result


@dataclass(frozen=True)
class Outcome(Generic[Score, Result]):
    """Every candidate's score, in the candidates' order, and the pick (None: ``pick`` declined
    them all, nothing was finished)."""

    scores: tuple[Score, ...]
    picked: Picked[Result] | None


class Contest(Protocol):
    """Replay every candidate, ``pick`` by the scores, ``finish`` the pick where it was
    replayed."""

    def __call__(
        self,
        replay: Callable[[Candidate], Score],
        candidates: Sequence[Candidate],
        pick: Callable[[Sequence[Score]], int | None],
        finish: Callable[[Candidate], Result],
    ) -> Outcome[Score, Result]: ...


def checked_pick(
    pick: Callable[[Sequence[Score]], int | None], scores: Sequence[Score]
) -> int | None:
    """``pick(scores)``, which must name a candidate (IntegrityError otherwise)."""
    index = pick(scores)
    if index is not None and not 0 <= index < len(scores):
        raise IntegrityError(f"picked candidate {index} of {len(scores)}")
    return index


def in_order(
    replay: Callable[[Candidate], Score],
    candidates: Sequence[Candidate],
    pick: Callable[[Sequence[Score]], int | None],
    finish: Callable[[Candidate], Result],
) -> Outcome[Score, Result]:
    """The contest run here: the candidates replayed one after the other, then the pick
    finished."""
    scores = tuple(replay(candidate) for candidate in candidates)
    index = checked_pick(pick, scores)
    if index is None:
        return Outcome(scores, None)
    return Outcome(scores, Picked(index, finish(candidates[index])))
