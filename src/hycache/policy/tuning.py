"""hycache's one-time self-tuning: whether to skip checkpoint kinds that are rarely reused, and
which clock the value eviction ages by.

Skipping (``adaptive``) pays where some kinds are never reused (the end of a ``twice`` prompt,
the prompt end of a chat turn): their states would only crowd out useful ones. It starves a
cache that thrashes: on the Mooncake synthetic trace at 5-20% of its footprint, tail states are
reused once per 16 stored, below the bar, yet they are nearly all the reuse there is.

The clock: by default the value eviction ages entries on the clock its hits favour
(``hycache.policy.eviction.aging``). That judge only sees the entries that survived to be hit;
on real chat streams it settles on the aged clock although GreedyDual's flat clock alone keeps
more conversations (the hits it would have had are misses it cannot see). So the bootstrap also
replays the flat clock alone (``aging_horizon`` 0), unless the user set ``aging_horizon`` or
turned this off (the ``hycache`` preset's knob ``tune_clock``).

The value-led candidate: where the cache holds only a few conversations (real chat at a
gigabyte or two), which of them it keeps matters more than when each was last used. Marconi's
oracle finds that by raising alpha; here the flat clock, values raised to
``VALUE_LED_EXPONENT`` instead of 0.5, and each state weighed by the chance of one more hit
given the hits it has had (``reason_weight`` ``chance``) stand for it. On the built-in
workloads it rarely wins its window; it is left out where the user set any of its knobs.

The lineage candidate: the flat clock and each state not yet resumed from weighed by the
chance learned for its generation (``reason_weight`` ``lineage``, ``hycache.cache.generations``):
where the cache holds only a few of many live conversations, it keeps serving those it kept
instead of trading them for new ones. It needs a window that sees conversations come back
(the simulator's ``bootstrap_returns``); it is left out where the user set ``reason_weight`` or
``aging_horizon``, or turned it off (the ``hycache`` preset's knob ``tune_lineage``).

Like Marconi's alpha, the choice is made once: the caller replays a bootstrap window with every
candidate (``hycache.policy.bootstrap``) and scores each (the simulator: tokens reused, on a
window it doubles until some candidate reused tokens in as many requests as fill the cache
once, ``has_evidence``, and, with the knob ``bootstrap_settle``, until the window's first half
picks the same candidate); the best wins (``pick_knobs``), ties
going to the one listed first (the default), and the default keeps its place unless another
beats it by ``margin`` (default ``MARGIN``, the ``hycache`` preset's knob ``tune_margin``).
(Plain LRU was a candidate once; the value eviction without skipping came within 2.4% of it
on the Mooncake conversation trace and beat it 2.6x on the synthetic trace in engine mode.)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

#: the value-led candidate's exponent of saved FLOPs per byte (the default's is 0.5): chosen on
#: the tuning ShareGPT samples among 1, 2, 3 and 4, where 2 and 3 came out on a plateau
#: (docs/benchmarks.md, "A value-led bootstrap candidate")
VALUE_LED_EXPONENT = 2.0
#: the candidates, best-first for ties: the defaults first
CANDIDATES: tuple[Mapping[str, object], ...] = (
    {"eviction": "value", "adaptive": True},
    {"eviction": "value", "adaptive": False},
    {"eviction": "value", "adaptive": True, "aging_horizon": 0},
    {
        "eviction": "value",
        "adaptive": True,
        "aging_horizon": 0,
        "exponent": VALUE_LED_EXPONENT,
        "reason_weight": "chance",
    },
    {"eviction": "value", "adaptive": True, "aging_horizon": 0, "reason_weight": "lineage"},
)
#: the knobs every candidate sets: a user who sets one of them turns tuning off
CHOSEN_KNOBS = frozenset({"eviction", "adaptive"})
#: another candidate replaces the first (the default) only if it saves this share more. 0: the
#: best score wins; the sweep on the tune split found 0 never worse than 0.1, and the clock
#: candidate's gains on the tuning sets need it (docs/benchmarks.md, "GreedyDual's flat clock
#: as a bootstrap candidate")
MARGIN = 0.0
#: a window is judged once some candidate reused tokens in this many cache fills of requests
#: (the ``hycache`` preset's knob ``bootstrap_evidence``; 0: in one request). One fill is the
#: window's own unit, no constant of its own: fewer hits than one cache generation of requests
#: are a handful of events, and which candidate had them is closer to a coin than to a measure
#: (docs/benchmarks.md, "A bootstrap window that waits for evidence")
EVIDENCE_FILLS = 1.0


def candidates_for(
    user_knobs: Collection[str], *, tune_clock: bool = True, tune_lineage: bool = True
) -> tuple[Mapping[str, object], ...]:
    """The candidates worth replaying when the user set ``user_knobs``: none that would
    override a knob the user set beyond ``CHOSEN_KNOBS``, no clock candidate unless
    ``tune_clock`` and no lineage candidate unless ``tune_lineage``."""
    return tuple(
        candidate
        for candidate in CANDIDATES
        if not (set(candidate) - CHOSEN_KNOBS) & set(user_knobs)
        and (tune_clock or "aging_horizon" not in candidate)
        and (tune_lineage or candidate.get("reason_weight") != "lineage")
    )


def pick_knobs(scores: Sequence[float], margin: float = MARGIN) -> int:
    """The index of the winning candidate, given every candidate's score (higher is better,
    the candidates in ``CANDIDATES``' order of preference): the first one unless another
    scores ``margin`` more; among those, the best, ties going to the one listed first."""
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    if scores[best] <= scores[0] * (1 + margin):
        return 0
    return best


def has_evidence(hits: Sequence[int], fill: int, evidence: float = EVIDENCE_FILLS) -> bool:
    """Whether a window that ``fill`` requests fill the cache in holds enough evidence: some
    candidate's replay (``hits``: per candidate, the requests that reused tokens) reused
    tokens in at least ``evidence`` x ``fill`` requests, and in at least one."""
    return max(hits, default=0) >= max(1, math.ceil(evidence * fill))
