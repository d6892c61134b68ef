"""Bootstrap contests in forked processes: the serial scores, in order, computed elsewhere, and
the winner finished where it was replayed."""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Sequence

import pytest

from hycache.errors import CapacityError, ConfigError, IntegrityError
from hycache.policy.bootstrap import Outcome, Picked, in_order
from hycache.policy.eviction.marconi import ALPHA_GRID, pick_alpha
from hycache.sim import forked
from hycache.sim.forked import contest_processes, forked_contest


class Unpicklable:
    """A replay's closure may hold objects that do not pickle: workers inherit them."""

    def __init__(self) -> None:
        self.offset = 0.5
        self.guard = threading.Lock()  # locks refuse to pickle

    def __call__(self, x: float) -> float:
        return x * x + self.offset


def _best(scores: Sequence[float]) -> int:
    return max(range(len(scores)), key=lambda i: scores[i])


def _pid_of(_x: object) -> float:
    return float(os.getpid())


def test_scores_and_the_finished_winner_equal_the_serial_ones() -> None:
    replay = Unpicklable()
    with pytest.raises(TypeError):
        pickle.dumps(replay)
    candidates = [3.0, 1.0, 2.0, 0.0, 5.0]
    for workers in (2, 3, 5):
        got = forked_contest(workers)(replay, candidates, _best, lambda x: (x, replay(x)))
        assert got == in_order(replay, candidates, _best, lambda x: (x, replay(x)))
        assert got == Outcome((9.5, 1.5, 4.5, 0.5, 25.5), Picked(4, (5.0, 25.5)))


def test_this_process_replays_the_first_candidate_and_every_workers_th() -> None:
    parent = float(os.getpid())
    scores = forked_contest(2)(_pid_of, [0, 1, 2, 3], lambda _s: None, _pid_of).scores
    assert scores[0] == scores[2] == parent
    assert parent not in (scores[1], scores[3])
    scores = forked_contest(3)(_pid_of, [0, 1, 2, 3, 4], lambda _s: None, _pid_of).scores
    assert [pid == parent for pid in scores] == [True, False, False, True, False]


@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("winner", [0, 1, 2])
def test_the_winner_is_finished_where_it_was_replayed(workers: int, winner: int) -> None:
    """A finish that reads what its own process's replays left behind: only the process that
    replayed the winner holds its record."""
    replayed: list[int] = []

    def replay(x: int) -> float:
        replayed.append(x)
        return float(os.getpid())

    def finish(x: int) -> tuple[bool, float]:
        return x in replayed, float(os.getpid())

    outcome = forked_contest(workers)(replay, [0, 1, 2], lambda _s: winner, finish)
    assert outcome.picked is not None and outcome.picked.index == winner
    found, pid = outcome.picked.result
    assert found and pid == outcome.scores[winner]
    here = [x for x in range(3) if x % workers == 0]
    assert replayed == here  # the workers' replays stayed in the workers


@pytest.mark.parametrize(
    ("candidates", "workers", "rounds", "shared"),
    [
        (3, 2, 2, 3),
        (2, 2, 2, 2),
        (1, 4, 1, 1),
        (4, 2, 2, 2),
        (5, 3, 3, 5),
        (21, 2, 2, 2),
        (3, 1, 1, 1),
    ],
)
def test_processes_share_the_cores_below_two_rounds(
    candidates: int, workers: int, rounds: int, shared: int
) -> None:
    assert contest_processes(candidates, workers) == rounds
    assert contest_processes(candidates, workers, share_cores=True) == shared


@pytest.mark.parametrize("winner", [0, 1, 2])
def test_sharing_the_cores_gives_each_candidate_a_process(winner: int) -> None:
    """3 candidates on 2 cores: one process each (this one replays the first), the serial
    scores and result, and the winner finished where it was replayed."""
    replay = Unpicklable()
    candidates = [3.0, 1.0, 2.0]
    contest = forked_contest(2, share_cores=True)
    got = contest(replay, candidates, lambda _s: winner, lambda x: (x, replay(x)))
    assert got == in_order(replay, candidates, lambda _s: winner, lambda x: (x, replay(x)))
    pids = contest(_pid_of, candidates, lambda _s: winner, _pid_of)
    assert pids.scores[0] == float(os.getpid()) and len(set(pids.scores)) == 3
    assert pids.picked is not None and pids.picked.result == pids.scores[winner]


def test_one_worker_or_no_fork_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = float(os.getpid())
    one = forked_contest(1)(_pid_of, [0, 1], lambda _s: 1, _pid_of)
    assert one == Outcome((parent, parent), Picked(1, parent))
    assert forked_contest(4)(_pid_of, [0], lambda _s: 0, _pid_of).scores == (parent,)
    monkeypatch.setattr(forked, "can_fork", lambda: False)
    assert forked_contest(4)(_pid_of, [0, 1], lambda _s: 1, _pid_of).scores == (parent, parent)


def test_a_failing_replay_raises_its_typed_error_here() -> None:
    def replay(x: float) -> float:
        if x > 1:
            raise CapacityError(f"candidate {x} does not fit")
        return x

    def contest(candidates: list[float]) -> Outcome[float, float]:
        return forked_contest(2)(replay, candidates, _best, replay)

    with pytest.raises(CapacityError, match="candidate 2 does not fit"):
        contest([0, 1, 2])
    # the first failure in the candidates' order, wherever it ran (3 here, 4 in a worker)
    with pytest.raises(CapacityError, match="candidate 3 does not fit"):
        contest([0, 3, 4])
    with pytest.raises(CapacityError, match="candidate 3 does not fit"):
        contest([3, 4, 0])
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        forked_contest(0)


def test_a_failing_finish_in_a_worker_raises_here() -> None:
    def finish(x: float) -> float:
        raise CapacityError(f"finishing {x} failed in {os.getpid()}")

    with pytest.raises(CapacityError, match="finishing 1 failed") as raised:
        forked_contest(2)(float, [0, 1], lambda _s: 1, finish)
    assert str(os.getpid()) not in str(raised.value)


def test_a_pick_outside_the_candidates_is_an_integrity_error() -> None:
    with pytest.raises(IntegrityError, match="picked candidate 3 of 3"):
        forked_contest(2)(float, [0, 1, 2], lambda _s: 3, float)
    with pytest.raises(IntegrityError, match="picked candidate -1 of 2"):
        in_order(float, [0, 1], lambda _s: -1, float)


def test_marconi_picks_the_same_alpha_either_way() -> None:
    def score(alpha: float) -> float:
        return -((alpha - 1.3) ** 2)

    def pick(scores: Sequence[float]) -> int:
        return pick_alpha(ALPHA_GRID, scores)

    got = forked_contest(2)(score, ALPHA_GRID, pick, lambda alpha: alpha)
    assert got == in_order(score, ALPHA_GRID, pick, lambda alpha: alpha)
    assert got.picked == Picked(13, 1.3)
