"""Replaying a bootstrap's candidates in this process and forked local ones.

:func:`forked_scorer` gives a ``hycache.policy.bootstrap.ScoreAll`` that replays the candidates
on up to ``workers`` processes: this one and ``workers - 1`` forked from it. This process
replays the first candidate and every ``workers``-th after it, in order, so that whatever the
replay keeps of its own work stays here (the simulator carries the winner's replay on,
``hycache.sim.carry``); the forked workers replay the others. They inherit the replay function
(a closure over the config and the bootstrap window; nothing of it is pickled); only the
candidates and their scores cross between processes. The scores come back in the candidates'
order and equal the serial ones: each replay builds its own cache from the same inputs.
Where ``fork`` is not available, or one worker or one candidate is asked for, the candidates
are replayed here in order (``in_order``).
"""

from __future__ import annotations

import functools
import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from hycache.errors import ConfigError, IntegrityError
from hycache.policy.bootstrap import ScoreAll, in_order

Candidate = TypeVar("Candidate")

#: the replay a forked worker runs: set in each worker by ``_adopt``
_REPLAY: list[Callable[[Any], float]] = []


def _adopt(replay: Callable[[Any], float]) -> None:
    """A worker's initializer; under ``fork`` its argument is inherited, not pickled."""
    _REPLAY[:] = [replay]


def _replay_inherited(candidate: Any) -> float:
    if len(_REPLAY) != 1:
        raise IntegrityError(f"a worker holds {len(_REPLAY)} replays, not 1")
    return _REPLAY[0](candidate)


def can_fork() -> bool:
    """Whether this platform can fork workers that inherit this process's objects."""
    return "fork" in multiprocessing.get_all_start_methods()


def forked_scorer(workers: int) -> ScoreAll:
    """A ``ScoreAll`` replaying on up to ``workers`` processes, this one included (ConfigError
    if < 1)."""
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")

    def score_all(
        replay: Callable[[Candidate], float], candidates: Sequence[Candidate]
    ) -> list[float]:
        count = min(workers, len(candidates))
        if count <= 1 or not can_fork():
            return in_order(replay, candidates)
        outcomes: dict[int, float | BaseException] = {}
        pool = ProcessPoolExecutor(
            count - 1,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_adopt,
            initargs=(replay,),
        )
        with pool:  # the workers fork before this process starts replaying
            elsewhere = {
                index: pool.submit(_replay_inherited, candidate)
                for index, candidate in enumerate(candidates)
                if index % count
            }
            for index in range(0, len(candidates), count):
                outcomes[index] = _outcome(functools.partial(replay, candidates[index]))
            for index, job in elsewhere.items():
                outcomes[index] = _outcome(job.result)
        scores: list[float] = []
        for index in range(len(candidates)):
            outcome = outcomes[index]
            if isinstance(outcome, BaseException):
                raise outcome  # the error the serial replays would have met first
            scores.append(outcome)
        return scores

    return score_all


def _outcome(run: Callable[[], float]) -> float | BaseException:
    try:
        return float(run())
    except Exception as exc:  # re-raised by the caller, in the candidates' order
        return exc
