"""Bootstrap replays in forked processes: the serial scores, in order, computed elsewhere."""

from __future__ import annotations

import os
import pickle
import threading

import pytest

from hycache.errors import CapacityError, ConfigError
from hycache.policy.bootstrap import in_order
from hycache.policy.eviction.marconi import tune_alpha
from hycache.sim import forked
from hycache.sim.forked import forked_scorer


class Unpicklable:
    """A replay's closure may hold objects that do not pickle: workers inherit them."""

    def __init__(self) -> None:
        self.offset = 0.5
        self.guard = threading.Lock()  # locks refuse to pickle

    def __call__(self, x: float) -> float:
        return x * x + self.offset


def test_scores_come_back_in_order_and_equal_the_serial_ones() -> None:
    replay = Unpicklable()
    with pytest.raises(TypeError):
        pickle.dumps(replay)
    candidates = [3.0, 1.0, 2.0, 0.0, 5.0]
    assert forked_scorer(2)(replay, candidates) == in_order(replay, candidates)
    assert forked_scorer(2)(replay, candidates) == [9.5, 1.5, 4.5, 0.5, 25.5]


def test_this_process_replays_the_first_candidate_and_every_workers_th() -> None:
    parent = float(os.getpid())
    pids = forked_scorer(2)(lambda _x: float(os.getpid()), [0, 1, 2, 3])
    assert pids[0] == pids[2] == parent
    assert parent not in (pids[1], pids[3])
    pids = forked_scorer(3)(lambda _x: float(os.getpid()), [0, 1, 2, 3, 4])
    assert [pid == parent for pid in pids] == [True, False, False, True, False]


def test_what_this_process_replays_stays_here() -> None:
    kept: list[float] = []

    def replay(x: float) -> float:
        kept.append(x)
        return x

    assert forked_scorer(2)(replay, [4.0, 5.0, 6.0]) == [4.0, 5.0, 6.0]
    assert kept == [4.0, 6.0]


def test_one_worker_or_no_fork_replays_here(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = float(os.getpid())
    assert forked_scorer(1)(lambda _x: float(os.getpid()), [0, 1]) == [parent, parent]
    assert forked_scorer(4)(lambda _x: float(os.getpid()), [0]) == [parent]
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    assert forked_scorer(4)(lambda _x: float(os.getpid()), [0, 1]) == [parent, parent]


def test_a_failing_replay_raises_its_typed_error_here() -> None:
    def replay(x: float) -> float:
        if x > 1:
            raise CapacityError(f"candidate {x} does not fit")
        return x

    with pytest.raises(CapacityError, match="candidate 2 does not fit"):
        forked_scorer(2)(replay, [0, 1, 2])
    # the first failure in the candidates' order, wherever it ran (3 here, 4 in a worker)
    with pytest.raises(CapacityError, match="candidate 3 does not fit"):
        forked_scorer(2)(replay, [0, 3, 4])
    with pytest.raises(CapacityError, match="candidate 3 does not fit"):
        forked_scorer(2)(replay, [3, 4, 0])
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        forked_scorer(0)


def test_marconi_picks_the_same_alpha_either_way() -> None:
    def score(alpha: float) -> float:
        return -((alpha - 1.3) ** 2)

    assert tune_alpha(score, score_all=forked_scorer(2)) == tune_alpha(score)
