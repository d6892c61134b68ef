"""Replaying a bootstrap's candidates in forked local processes.

:func:`forked_scorer` gives a ``hycache.policy.bootstrap.ScoreAll`` that replays the candidates
in up to ``workers`` processes forked from this one. The workers inherit the replay function
(a closure over the config and the bootstrap window; nothing of it is pickled); only the
candidates and their scores cross between processes. The scores come back in the candidates'
order and equal the serial ones: each replay builds its own cache from the same inputs.
Where ``fork`` is not available, or one worker or one candidate is asked for, the candidates
are replayed here in order (``in_order``).
"""

from __future__ import annotations

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
    """A ``ScoreAll`` replaying in up to ``workers`` forked processes (ConfigError if < 1)."""
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")

    def score_all(
        replay: Callable[[Candidate], float], candidates: Sequence[Candidate]
    ) -> list[float]:
        count = min(workers, len(candidates))
        if count <= 1 or not can_fork():
            return in_order(replay, candidates)
        pool = ProcessPoolExecutor(
            count,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_adopt,
            initargs=(replay,),
        )
        with pool:
            return [float(score) for score in pool.map(_replay_inherited, candidates)]

    return score_all
