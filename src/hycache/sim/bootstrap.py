"""The one-time bootstrap replays of the simulator: Marconi's alpha and ``hycache``'s
candidates, each chosen by replaying the first requests of the source (a window of
``multiplier`` cache fills) once per choice.

A :class:`Choice` says what won, what to record of it (``PolicyResult.tuned``) and which
window replay may be carried on instead of replaying the window again (``hycache.sim.carry``).
The replays themselves are the caller's (``replay(knobs, window)``), and so is what is done
with the choice (``finish(choice)``, run by the contest where the winner's window replay ran,
``hycache.policy.bootstrap``): this module knows windows and scores, not how a cache is
built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hycache.errors import IntegrityError
from hycache.policy.bootstrap import Contest
from hycache.policy.eviction.marconi import ALPHA_GRID, pick_alpha
from hycache.policy.tuning import EVIDENCE_FILLS, has_evidence, pick_knobs
from hycache.sim.carry import HeadReplay, HeadReplays
from hycache.sim.request import Request
from hycache.sim.serial import SerialReplay
from hycache.sim.source import PrefixSource, Source
from hycache.spec.model import ModelSpec


@dataclass(frozen=True)
class Window:
    """A bootstrap window: its first ``count`` requests of the source, as a source."""

    requests: Source
    count: int
    #: whether that is all of the source
    whole: bool
    #: how many first requests of the source fill the cache once (None: all do not)
    fill: int | None

    @property
    def half(self) -> int:
        """The requests of the window's first half (at least one)."""
        return max(1, self.count // 2)


Result = TypeVar("Result")

#: replays ``window`` on a fresh cache built with ``knobs`` over the preset's
Replay = Callable[[Mapping[str, object], Window], SerialReplay]

#: called on a window replay once the window's first half was served
Halfway = Callable[[HeadReplay], None]

#: the same in the run's own mode (``hycache``'s candidates: serial, or engine mode), calling
#: ``halfway`` (when given) once the window's first half was served
RunReplay = Callable[[Mapping[str, object], Window, Halfway | None], HeadReplay]

#: a ``hycache`` candidate's score on a window: the tokens it reused, the requests that did,
#: the tokens it reused in the window's first half
WindowReuse = tuple[float, int, float]


@dataclass(frozen=True)
class Choice:
    """What a bootstrap chose: ``knobs`` over the preset's, the requests its window held (None:
    nothing was tuned), and the winner's window replay to carry on (None: none kept). With
    ``switched_from`` (a causal choice) the run goes through the window with those knobs (the
    first candidate's, ``carried`` their window replay) and switches to ``knobs`` in place
    where the window ends."""

    knobs: Mapping[str, object] = field(default_factory=dict)
    window_requests: int | None = None
    carried: HeadReplay | None = None
    switched_from: Mapping[str, object] | None = None

    @property
    def tuned(self) -> dict[str, object]:
        """The record for ``PolicyResult.tuned``: the knobs and ``window_requests``; empty
        when nothing was tuned."""
        if self.window_requests is None:
            return {}
        return {**self.knobs, "window_requests": self.window_requests}


def bootstrap_window(
    source: Source, spec: ModelSpec, capacity: int, multiplier: int, *, returns: bool = False
) -> Window:
    """The first ``multiplier`` x (requests whose tokens fill ``capacity`` once) requests, as a
    source (a list, unless ``source`` is a :class:`PrefixSource`). ``returns``: then, while
    the median return distance estimated on the window (``ReturnDistances.median``) is more
    than a ``multiplier``-th of it, the window grows to ``multiplier`` x that median, so that
    it shows a candidate keeping conversations until they come back, not only filling."""
    window: list[Request] = []
    keep = not isinstance(source, PrefixSource)
    count = 0
    filled = 0
    fill_count: int | None = None
    target: int | None = None
    distances = ReturnDistances() if returns else None
    per_token = spec.kv_bytes_per_token
    whole = True
    for request in source():
        count += 1
        if keep:
            window.append(request)
        if distances is not None:
            distances.see(request)
        if fill_count is None:
            filled += (request.prompt_len + request.output_len) * per_token + 2 * spec.state_bytes
            if filled >= capacity:
                fill_count = count
                target = multiplier * fill_count
        if target is not None and count >= target:
            median = None if distances is None else distances.median()
            if median is None or multiplier * median <= count:
                whole = False
                break
            target = multiplier * median
    if isinstance(source, PrefixSource):
        prefix = source
        return Window(lambda: prefix.window(0, count), count, whole, fill_count)
    return Window(lambda: window, count, whole, fill_count)


class ReturnDistances:
    """How many requests after a session's request its next one arrives (a conversation's
    next turn), over the requests seen so far."""

    def __init__(self) -> None:
        self._last: dict[tuple[str | None, str], int] = {}
        self._returns: list[int] = []
        self._seen = 0

    def see(self, request: Request) -> None:
        """Count ``request``, the next one of the stream."""
        self._seen += 1
        if request.session is None:
            return
        key = (request.namespace, request.session)
        last = self._last.get(key)
        if last is not None:
            self._returns.append(self._seen - last)
        self._last[key] = self._seen

    def median(self) -> int | None:
        """The median distance, a session's latest request so far counted as one whose next
        has not come yet (Kaplan-Meier: a stream's head sees the short returns first and
        would otherwise understate it); None where fewer than half are seen to come back."""
        ends = sorted(
            [(distance, 1) for distance in self._returns]
            + [(self._seen - last, 0) for last in self._last.values()]
        )
        at_risk, survival, i = len(ends), 1.0, 0
        while i < len(ends):
            distance, returned, tied = ends[i][0], 0, 0
            while i < len(ends) and ends[i][0] == distance:
                returned += ends[i][1]
                tied += 1
                i += 1
            if returned:
                survival *= 1 - returned / at_risk
                if survival <= 0.5:
                    return distance
            at_risk -= tied
        return None


def choose_alpha(
    window: Window,
    replay: Replay,
    contest: Contest,
    finish: Callable[[Choice], Result],
    *,
    carry: bool = True,
) -> Result:
    """Marconi's alpha (``pick_alpha``), scored by the prefill FLOPs each window replay saved;
    ``finish`` runs on the choice where the winner's window replay ran (kept for it only if
    ``carry``)."""
    alphas: HeadReplays[float] = HeadReplays(window.count)

    def score(alpha: float) -> float:
        done = replay({"alpha": alpha}, window)
        saved = done.result().prefill_flops_saved
        if carry:
            alphas.offer(alpha, saved, done)
        return saved

    def finish_alpha(alpha: float) -> Result:
        return finish(Choice({"alpha": alpha}, window.count, alphas.winner(alpha)))

    outcome = contest(score, ALPHA_GRID, lambda s: pick_alpha(ALPHA_GRID, s), finish_alpha)
    if outcome.picked is None:
        raise IntegrityError("Marconi's bootstrap picked no alpha")
    return outcome.picked.result


def choose_knobs(
    window_of: Callable[[int], Window],
    multiplier: int,
    candidates: Sequence[Mapping[str, object]],
    margin: float,
    replay: RunReplay,
    contest: Contest,
    finish: Callable[[Choice], Result],
    *,
    carry: bool = True,
    evidence: float = EVIDENCE_FILLS,
    settle: bool = False,
    causal: bool = False,
) -> Result:
    """``hycache``'s choice (``hycache.policy.tuning.pick_knobs``) among ``candidates``,
    scored by the tokens each window replay reused, on ``window_of(multiplier)``; ``finish``
    runs on the choice where the winner's window replay ran (kept for it only if ``carry``).
    ``causal``: ``finish`` runs where the first candidate's window replay ran, on a choice
    that switches from it to the pick (``Choice.switched_from``): no window counts the reuse
    of a candidate the cache did not run.
    The window must hold evidence (``has_evidence``): it is doubled until some candidate
    reused tokens in ``evidence`` times as many requests as fill the cache once
    (``Window.fill``), or it holds the whole source. ``settle``: it is also doubled until
    its first half (``Window.half``: the window before, once doubled) picks the same
    candidate, so a pick is trusted only where a window twice as long would not overturn a
    shorter one's."""
    picked: list[Mapping[str, object]] = []  # causal: the pick, known where the first ran
    while True:
        window = window_of(multiplier)
        kept: HeadReplays[Mapping[str, object]] = HeadReplays(window.count)

        def score(
            choice: Mapping[str, object],
            window: Window = window,
            kept: HeadReplays[Mapping[str, object]] = kept,
        ) -> WindowReuse:
            halves: list[float] = []
            done = replay(
                choice, window, lambda r: halves.append(float(r.cache.stats().reused_tokens))
            )
            stats = done.cache.stats()
            reused = float(stats.reused_tokens)
            if carry:
                kept.offer(choice, reused, done)
            if len(halves) != 1:
                raise IntegrityError(f"a window replay reported its half {len(halves)} times")
            return reused, stats.requests_hit, halves[0]

        def pick(scores: Sequence[WindowReuse], window: Window = window) -> int | None:
            hits = [hits for _, hits, _ in scores]
            index = pick_knobs([reused for reused, _, _ in scores], margin)
            enough = window.fill is not None and has_evidence(hits, window.fill, evidence)
            if window.whole or (
                enough
                and (not settle or index == pick_knobs([half for _, _, half in scores], margin))
            ):
                if causal:
                    picked.append(candidates[index])
                    return 0  # finished where the first candidate ran, switched to the pick
                return index
            return None

        def finish_knobs(
            choice: Mapping[str, object],
            window: Window = window,
            kept: HeadReplays[Mapping[str, object]] = kept,
        ) -> Result:
            if causal:
                return finish(Choice(picked[-1], window.count, kept.winner(choice), choice))
            return finish(Choice(choice, window.count, kept.winner(choice)))

        outcome = contest(score, candidates, pick, finish_knobs)
        if outcome.picked is not None:
            return outcome.picked.result
        multiplier *= 2
