"""A bootstrap's contest run in this process and forked local ones.

:func:`forked_contest` gives a ``hycache.policy.bootstrap.Contest`` that replays the
candidates on up to ``workers`` processes: this one and ``workers - 1`` forked from it. This
process replays the first candidate and every ``workers``-th after it, in order; worker ``w``
replays candidates ``w``, ``w + workers``, ... in order. They inherit the replay and finish
functions (closures over the config, the source and the bootstrap window; nothing of them is
pickled); only scores, the pick and the finished result cross between processes. The winner
is finished in the process that replayed it, where that replay's work still is (the simulator
carries it on to the end of the source, ``hycache.sim.carry``): a winner replayed by a worker
costs this process no replay of its own. The scores equal the serial ones and so does the
result: each replay builds its own cache from the same inputs.
Where ``fork`` is not available, or one worker or one candidate is asked for, everything runs
here in order (``in_order``).

The pick waits for the last replay, so replays in rounds of ``workers`` leave cores idle in a
last, partial round (3 candidates on 2 cores: two rounds, one core idle in the second). With
``share_cores`` a contest of fewer than two rounds' worth runs one process per candidate
instead, the processes sharing the cores (``contest_processes``).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from hycache.errors import ConfigError, IntegrityError
from hycache.policy.bootstrap import Contest, Outcome, Picked, checked_pick, in_order

Candidate = TypeVar("Candidate")
Result = TypeVar("Result")
Score = TypeVar("Score")

#: how long a worker told to stop may take to exit before it is killed
STOP_TIMEOUT_S = 5.0


def can_fork() -> bool:
    """Whether this platform can fork workers that inherit this process's objects."""
    return "fork" in multiprocessing.get_all_start_methods()


def contest_processes(candidates: int, workers: int, *, share_cores: bool = False) -> int:
    """Processes, this one included, for a contest of ``candidates`` replays on ``workers``
    cores: at most ``workers``, one per candidate where there are fewer. With ``share_cores``,
    more than ``workers`` candidates but fewer than twice as many get one process each: in
    rounds they would take two replay times with up to half the cores idle in the second;
    sharing the cores they all end after ``candidates / workers`` (1.5 for 3 on 2), for as
    many replays held at once (at most twice ``workers``). From two rounds on, the idle share
    of a partial last round is smaller and the rounds keep ``workers`` replays at a time."""
    if share_cores and workers > 1 and candidates < 2 * workers:
        return candidates
    return min(workers, candidates)


def forked_contest(workers: int, *, share_cores: bool = False) -> Contest:
    """A ``Contest`` replaying on up to ``workers`` processes, this one included, or on
    ``contest_processes`` sharing ``workers`` cores (``share_cores``); ConfigError if
    ``workers`` < 1."""
    if workers < 1:
        raise ConfigError(f"workers must be >= 1, got {workers}")

    def contest(
        replay: Callable[[Candidate], Score],
        candidates: Sequence[Candidate],
        pick: Callable[[Sequence[Score]], int | None],
        finish: Callable[[Candidate], Result],
    ) -> Outcome[Score, Result]:
        count = contest_processes(len(candidates), workers, share_cores=share_cores)
        if count <= 1 or not can_fork():
            return in_order(replay, candidates, pick, finish)
        return _Workers(count, replay, candidates, finish).run(pick)

    return contest


class _Workers:
    """``count - 1`` forked workers beside this process, for one contest."""

    def __init__(
        self,
        count: int,
        replay: Callable[[Any], Any],
        candidates: Sequence[Any],
        finish: Callable[[Any], Any],
    ) -> None:
        self.count = count
        self.replay = replay
        self.candidates = candidates
        self.finish = finish
        self.links: list[tuple[BaseProcess, Connection]] = []
        context = multiprocessing.get_context("fork")
        for worker in range(1, count):
            here, there = context.Pipe()
            share = range(worker, len(candidates), count)
            process = context.Process(
                target=_work, args=(there, replay, finish, candidates, share), daemon=True
            )
            process.start()  # forked before this process starts replaying
            there.close()
            self.links.append((process, here))

    def run(self, pick: Callable[[Sequence[Any]], int | None]) -> Outcome[Any, Any]:
        try:
            outcomes: dict[int, object] = {}
            for index in range(0, len(self.candidates), self.count):
                outcomes[index] = _outcome(functools.partial(self.replay, self.candidates[index]))
            for worker, (_process, link) in enumerate(self.links, start=1):
                for index in range(worker, len(self.candidates), self.count):
                    outcomes[index] = _received(link)
            scores: list[object] = []
            for index in range(len(self.candidates)):
                outcome = outcomes[index]
                if isinstance(outcome, BaseException):
                    raise outcome  # the error the serial replays would have met first
                scores.append(outcome)
            picked = checked_pick(pick, scores)
            if picked is None:
                return Outcome(tuple(scores), None)
            index = picked
            owner = index % self.count
            if owner == 0:
                self._stop_all()
                return Outcome(tuple(scores), Picked(index, self.finish(self.candidates[index])))
            _process, link = self.links[owner - 1]
            link.send(index)
            result = _received(link)
            if isinstance(result, BaseException):
                raise result
            return Outcome(tuple(scores), Picked(index, result))
        finally:
            self._stop_all()

    def _stop_all(self) -> None:
        """Tell every worker still waiting to stop and reap them all (idempotent)."""
        for _process, link in self.links:
            with contextlib.suppress(BrokenPipeError, OSError):
                link.send(None)  # a worker gone already (finished its winner, or failed)
            link.close()
        for process, _link in self.links:
            process.join(STOP_TIMEOUT_S)
            if process.is_alive():
                process.kill()
                process.join()
        self.links = []


def _work(
    link: Connection,
    replay: Callable[[Any], Any],
    finish: Callable[[Any], Any],
    candidates: Sequence[Any],
    share: range,
) -> None:
    """A worker: replay its share in order, sending each outcome; then finish the candidate
    it is sent, or stop when sent None."""
    try:
        for index in share:
            _send(link, _outcome(functools.partial(replay, candidates[index])))
        command = link.recv()
        if command is None:
            return
        try:
            result: Any = finish(candidates[command])
        except Exception as exc:  # re-raised by the parent
            result = exc
        _send(link, result)
    except (EOFError, BrokenPipeError):
        return  # the parent is gone: nothing to report to
    finally:
        link.close()


def _send(link: Connection, message: object) -> None:
    """Send ``message``; one that does not pickle goes as an IntegrityError naming it."""
    try:
        link.send(message)
    except Exception as exc:
        link.send(IntegrityError(f"a bootstrap worker could not send {message!r} back: {exc}"))


def _received(link: Connection) -> Any:
    try:
        return link.recv()
    except EOFError:
        raise IntegrityError("a bootstrap worker exited without reporting") from None


def _outcome(run: Callable[[], object]) -> object:
    """``run()``'s score, or the exception it raised."""
    try:
        return run()
    except Exception as exc:  # re-raised by the caller, in the candidates' order
        return exc
