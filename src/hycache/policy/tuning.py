"""hycache's one-time self-tuning: whether to skip checkpoint kinds that are rarely reused.

Skipping (``adaptive``) pays where some kinds are never reused (the end of a ``twice`` prompt,
the prompt end of a chat turn): their states would only crowd out useful ones. It starves a
cache that thrashes: on the Mooncake synthetic trace at 5-20% of its footprint, tail states are
reused once per 16 stored, below the bar, yet they are nearly all the reuse there is. Like
Marconi's alpha, the choice is made once: the caller replays a bootstrap window with every
candidate and scores each (the simulator: tokens reused, on a window it doubles while every
score is 0); the best wins, but the first listed
(the default) keeps its place unless another beats it by ``margin`` (default ``MARGIN``, the
``hycache`` preset's knob ``tune_margin``). (Plain LRU was a
candidate once; the value eviction without skipping came within 2.4% of it on the Mooncake
conversation trace and beat it 2.6x on the synthetic trace in engine mode.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hycache.policy.bootstrap import ScoreAll, in_order

#: the candidates, best-first for ties: the defaults first
CANDIDATES: tuple[Mapping[str, object], ...] = (
    {"eviction": "value", "adaptive": True},
    {"eviction": "value", "adaptive": False},
)
#: another candidate replaces the first (the default) only if it saves this much more: a short
#: window is noisy, and the default is the better bet when they are close
MARGIN = 0.1


def tune_knobs(
    replay: Callable[[Mapping[str, object]], float],
    candidates: Sequence[Mapping[str, object]] = CANDIDATES,
    margin: float = MARGIN,
    *,
    score_all: ScoreAll = in_order,
) -> tuple[Mapping[str, object], list[float]]:
    """``replay(knobs)`` replays the bootstrap window with those knobs and returns its score
    (higher is better). The first candidate wins unless another scores ``margin`` more.
    Returns the winning knobs and every candidate's score, in ``candidates`` order.
    ``score_all`` decides where the replays run (``hycache.policy.bootstrap``)."""
    scores = score_all(replay, candidates)
    best = max(range(len(candidates)), key=lambda i: (scores[i], -i))
    if scores[best] <= scores[0] * (1 + margin):
        best = 0
    return candidates[best], scores
