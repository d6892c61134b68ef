"""Carrying a bootstrap's winning replay on to the end of the trace.

A bootstrap (Marconi's alphas, hycache's knob sets) replays the head of a trace once per
candidate and then the chosen candidate replays the whole trace. When that last replay runs in
the same mode with the same settings, its first ``head`` requests redo exactly the winner's
bootstrap replay: :class:`HeadReplays` keeps the bootstrap replays that can still win so that
the winner's goes on instead (a ``SerialReplay`` is fed the rest; an ``EngineReplay``, which
ran on the whole trace and stopped once the head had left the queue, runs on to the end).

Which candidate wins is the bootstrap's rule (``hycache.policy.tuning``,
``hycache.policy.eviction.marconi``): both pick the first candidate or the first of those with
the highest score. So at most two replays are kept: the first candidate's and the first one
with the highest score so far. A winner that was not kept (a replay that ran in another
process, a rule that picked something else) is simply replayed again from the start: the
result is the same either way.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from hycache.sim.replay import EngineReplay
from hycache.sim.serial import SerialReplay

Candidate = TypeVar("Candidate")
#: a replay that can be carried on: serial, or in engine mode (both resumable)
HeadReplay = SerialReplay | EngineReplay


class HeadReplays(Generic[Candidate]):
    """The bootstrap replays of a trace's first ``head`` requests that may win."""

    def __init__(self, head: int) -> None:
        self.head = head
        self._first: tuple[Candidate, HeadReplay] | None = None
        self._best: tuple[Candidate, float, HeadReplay] | None = None

    def offer(self, candidate: Candidate, score: float, replay: HeadReplay) -> None:
        """A finished bootstrap replay, offered in the candidates' order."""
        if replay.served != self.head:
            return  # not a replay of the whole head: nothing to carry on
        if self._first is None:
            self._first = (candidate, replay)
        if self._best is None or score > self._best[1]:
            self._best = (candidate, score, replay)

    def winner(self, chosen: Candidate) -> HeadReplay | None:
        """The kept replay of ``chosen`` (None: it was not kept here), handed over once."""
        pairs = [self._first] if self._first is not None else []
        if self._best is not None:
            pairs.append((self._best[0], self._best[2]))
        self._first = self._best = None
        return next((replay for candidate, replay in pairs if candidate == chosen), None)
