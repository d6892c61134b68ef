"""The ``hycache`` preset: its knobs (``HYCACHE_KNOBS``) and its builder (``build_hycache``):
one shared byte budget, the learned checkpoint planner, the value eviction and the holds of
requests in flight. ``hycache.cache.presets`` gathers it with the other presets."""

from __future__ import annotations

from hycache.cache.config import SPARE_SLOT_SHARE, CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.knobs import (
    Knob,
    KnobValue,
    admission,
    budget,
    number,
    optional_int,
    positive,
    share,
)
from hycache.memory.layouts import shared_pool
from hycache.policy.checkpoint.hycache import HycachePlanner
from hycache.policy.checkpoint.thresholds import DEFAULT_THRESHOLDS as T
from hycache.policy.checkpoint.thresholds import PlannerThresholds
from hycache.policy.eviction.base import EvictionPolicy
from hycache.policy.eviction.gdsf import GDSFEviction
from hycache.policy.eviction.lru import LRUEviction
from hycache.policy.eviction.value import (
    CHEAP_GUESS_SHARE,
    DEAD_WEIGHT,
    REASON_WEIGHTS,
    TYPICAL_WINDOW,
    ValueEviction,
)
from hycache.policy.tuning import EVIDENCE_FILLS, MARGIN
from hycache.spec.model import ModelSpec

HYCACHE_KNOBS: dict[str, Knob] = {
    "page_size": Knob(1, int, "radix tree granularity in tokens", "-"),
    "interval": Knob(0, int, "extra checkpoint every N prompt tokens (0: none)", "-"),
    "adaptive": Knob(True, bool, "skip checkpoint kinds that are rarely reused", "-"),
    "free_room": Knob(
        True,
        bool,
        "until memory first runs short, also take the left-out candidates and a state every "
        "max(divergence grid, state weight in KV tokens) while they all fit into free memory",
        "-",
    ),
    "keep_best": Knob(
        True,
        bool,
        "adaptive: the checkpoint kind reused at the highest rate is never skipped",
        "-",
    ),
    "proven_first": Knob(
        True,
        bool,
        "a prefill keeps the checkpoint kinds resumed from first (by reuse rate); kinds never "
        "resumed from follow in the order branch, tail, prompt end",
        "-",
    ),
    "skip_first_step": Knob(
        True,
        bool,
        "a prefill checkpoint the kernel cannot copy out because it lies within the first "
        "kernel-grid step past the state the prefill resumes from is not a candidate (it would "
        "cost a forward pass to save a later request less than one grid step over that state)",
        "-",
    ),
    "decode_room": Knob(
        True,
        bool,
        "engine mode: prefill chunks are planned a token shorter than the token budget for "
        "every request in flight (each decodes a token per step beside the prefill), on the "
        "kernel grid; false: chunks of the whole budget, which a step with decodes cannot run "
        "whole (the sliver left costs a step more)",
        "-",
    ),
    "eviction": Knob(
        "value",
        str,
        "GreedyDual-Size over the marginal compute saved (value), plain GreedyDual-Size "
        "(gds), with frequency (gdsf), or lru",
        "-",
        ("value", "gds", "gdsf", "lru"),
    ),
    "admission": Knob("always", str, "state admission", "-", ("always", "second_sighting")),
    "session_aware": Knob(False, bool, "entries of live sessions are evicted last", "-"),
    "token_budget": Knob(None, int, "prefill token budget per chunk", "-", optional=True),
    "learn_grid": Knob(
        True,
        bool,
        "round the prompt-end checkpoint down to the learned divergence grid (false: the "
        "page grid)",
        "-",
    ),
    "tail": Knob(
        True,
        bool,
        "checkpoint at the prompt end less the learned unique tail of prompts sharing a prefix",
        "-",
    ),
    "by_reason": Knob(
        True,
        bool,
        "value eviction: weight a state by how often states of its checkpoint reason were reused",
        "-",
    ),
    "reason_weight": Knob(
        "rate",
        str,
        "value eviction (with by_reason): rate (a state's reason's hits per state stored), "
        "chance (the chance a state is resumed from once more, given the hits it has had, "
        "learned per checkpoint reason) or lineage (chance, a state not yet resumed from "
        "judged by its generation: how many times its conversation was resumed from the cache "
        "in a row)",
        "-",
        REASON_WEIGHTS,
    ),
    "superseded_weight": Knob(
        0.05,
        float,
        "value eviction: the least weight of a superseded state (1: superseded states are not "
        "discounted)",
        "-",
    ),
    "learn_superseded": Knob(
        True,
        bool,
        "value eviction: learn the superseded weight from the hits (false: superseded_weight)",
        "-",
    ),
    "dead_weight": Knob(
        DEAD_WEIGHT,
        float,
        "value eviction: weight of KV on a leaf holding no state (a dead tail)",
        "-",
    ),
    "exponent": Knob(
        0.5, float, "value eviction: exponent of saved FLOPs per byte in the value", "-"
    ),
    "aging_horizon": Knob(
        1600,
        int,
        "value eviction: cache ticks over which the clock advances by one typical value (0: "
        "GreedyDual's clock alone)",
        "-",
    ),
    "learn_aging": Knob(
        True,
        bool,
        "value eviction: age by the clock (aged or GreedyDual's alone) that ranks the entries "
        "hits come back to higher, learned online (false: aged, as aging_horizon says)",
        "-",
    ),
    "read_matched_kv": Knob(
        True,
        bool,
        "a request that recomputes tokens whose attention KV is cached (to rebuild its "
        "state) reads that KV in place instead of holding pages of its own",
        "-",
    ),
    "reserve_checkpoint_slot": Knob(
        True,
        bool,
        "a request reserves a state slot for its prefill checkpoint when admitted (a full "
        "pool would otherwise make it skip the state)",
        "-",
    ),
    "pin_published_state": Knob(
        False,
        bool,
        "a running request whose prefill is done pins the state at its prompt end",
        "-",
    ),
    "tune": Knob(
        True,
        bool,
        "pick eviction, adaptive and the aging clock once by replaying a bootstrap window "
        "(the simulator does it when neither eviction nor adaptive is set), as Marconi "
        "picks alpha",
        "-",
    ),
    "tune_clock": Knob(
        True,
        bool,
        "tune: also try GreedyDual's flat aging clock alone (aging_horizon 0) unless "
        "aging_horizon is set",
        "-",
    ),
    "tune_lineage": Knob(
        True,
        bool,
        "tune: also try the lineage candidate (flat clock, reason_weight lineage) unless "
        "reason_weight or aging_horizon is set",
        "-",
    ),
    "bootstrap_multiplier": Knob(
        5,
        int,
        "bootstrap window for tuning, in multiples of the requests that fill the cache once",
        "-",
    ),
    # the thresholds: each default is backed by the sweep on the tune split (docs/benchmarks.md,
    # "Thresholds on the tune split")
    "warmup": Knob(
        T.warmup, int, "adaptive: states of a kind stored before its reuse rate is trusted", "-"
    ),
    "reuse_ratio": Knob(
        T.reuse_ratio,
        int,
        "adaptive: a checkpoint kind pays while one in this many of its states is reused",
        "-",
    ),
    "donated_reuse_ratio": Knob(
        T.donated_reuse_ratio,
        int,
        "adaptive: the same for the donated end-of-request state (no copy, no slot held)",
        "-",
    ),
    "retry_every": Knob(
        T.retry_every, int, "adaptive: a kind that does not pay is still tried every N-th plan", "-"
    ),
    "early_retry_every": Knob(
        T.early_retry_every,
        int,
        "adaptive: the same for a checkpoint before the prompt end (a pass or slot more)",
        "-",
    ),
    "max_grid": Knob(T.max_grid, int, "the coarsest divergence grid learned, in tokens", "-"),
    "tail_quantile": Knob(
        T.tail_quantile,
        float,
        "the tail checkpoint steps back by this quantile of the recent unique tails, in "
        "[0, 1] (unset: by the tail that maximises the tokens a later prompt reuses)",
        "-",
        optional=True,
    ),
    "grid_share": Knob(
        T.grid_share,
        float,
        "the divergence grid is the coarsest one at least this share of the observed "
        "divergences fall on, in (0, 1]",
        "-",
    ),
    "grid_warmup": Knob(
        T.grid_warmup, int, "divergences observed before the learned grid replaces the page", "-"
    ),
    "tail_warmup": Knob(
        T.tail_warmup,
        int,
        "unique tails observed before the learned tail replaces default_tail",
        "-",
    ),
    "tail_memory": Knob(
        T.tail_memory, int, "how many recent unique tails the step back is chosen from", "-"
    ),
    "default_tail": Knob(
        T.default_tail, int, "the tail checkpoint's step back in tokens before tail_warmup", "-"
    ),
    "typical_window": Knob(
        TYPICAL_WINDOW,
        int,
        "value eviction: the running mean of a typical value (aging) weighs a new value 1/N",
        "-",
    ),
    "cheap_guess_share": Knob(
        CHEAP_GUESS_SHARE,
        float,
        "value eviction: an unproven tail guess is pinned while a state is at most this share "
        "of the budget, in (0, 1]",
        "-",
    ),
    "pin_reused_guesses": Knob(
        True,
        bool,
        "value eviction: an unproven tail guess is also pinned while tail states are resumed "
        "from at least as often as states on average (false: only while cheap)",
        "-",
    ),
    "strict_guess_pins": Knob(
        True,
        bool,
        "value eviction: an unproven tail guess is cheap only while the guesses of every "
        "request in flight together are, and tails pay only above the planner's bar (one "
        "reuse per reuse_ratio stored); false: one state against the budget, tails against "
        "the average alone",
        "-",
    ),
    "spare_slot_share": Knob(
        SPARE_SLOT_SHARE,
        float,
        "reserve_checkpoint_slot: only while a state slot is at most this share of the "
        "budget, in (0, 1]",
        "-",
    ),
    "tune_margin": Knob(
        MARGIN,
        float,
        "tune: another candidate replaces the default only if it reuses this share more "
        "(0: the best wins, ties to the default)",
        "-",
    ),
    "bootstrap_evidence": Knob(
        EVIDENCE_FILLS,
        float,
        "tune: the bootstrap window doubles until some candidate reused tokens in this many "
        "cache fills of requests (0: in one request)",
        "-",
    ),
    "bootstrap_settle": Knob(
        False,
        bool,
        "tune: the bootstrap window also doubles until its first half picks the same "
        "candidate (false: the evidence alone decides)",
        "-",
    ),
    "bootstrap_returns": Knob(
        True,
        bool,
        "tune: the bootstrap window also holds the bootstrap multiplier times the median "
        "number of requests after which a session's next request arrives, estimated on the "
        "window (false: cache fills alone)",
        "-",
    ),
    "bootstrap_causal": Knob(
        False,
        bool,
        "tune: the cache runs the default candidate through the window and switches to the "
        "pick in place where the window ends (false: the pick's own window replay goes on)",
        "-",
    ),
}

#: the planner's threshold knobs that are counts, ratios or token lengths (positive integers)
PLANNER_COUNTS = (
    "warmup",
    "reuse_ratio",
    "donated_reuse_ratio",
    "retry_every",
    "early_retry_every",
    "max_grid",
    "grid_warmup",
    "tail_warmup",
    "tail_memory",
    "default_tail",
)
#: the value eviction's threshold knobs (``ValueEviction`` attributes of the same names)
EVICTION_THRESHOLDS = (
    "superseded_weight",
    "dead_weight",
    "exponent",
    "aging_horizon",
    "typical_window",
    "cheap_guess_share",
)
#: every threshold knob (benchmarks/threshold_sweep.py sweeps each)
THRESHOLD_KNOBS = (
    *PLANNER_COUNTS,
    "grid_share",
    *EVICTION_THRESHOLDS,
    "spare_slot_share",
    "tune_margin",
    "bootstrap_evidence",
)


def _planner_thresholds(k: dict[str, KnobValue]) -> PlannerThresholds:
    """The planner's threshold knobs, checked: counts and lengths are positive integers,
    shares lie in (0, 1] (the tail quantile in [0, 1])."""
    counts = {name: positive("hycache", name, k[name]) for name in PLANNER_COUNTS}
    return PlannerThresholds(
        **counts,
        grid_share=share("hycache", "grid_share", k["grid_share"]),
        tail_quantile=None
        if k["tail_quantile"] is None
        else share("hycache", "tail_quantile", k["tail_quantile"], closed=True),
    )


def _hycache_eviction(k: dict[str, KnobValue]) -> EvictionPolicy:
    name = str(k["eviction"])
    session_aware, pins = bool(k["session_aware"]), bool(k["pin_published_state"])
    if name == "lru":
        return LRUEviction(session_aware=session_aware, pins_published_state=pins)
    if name == "value":
        return ValueEviction(
            session_aware=session_aware,
            pins_published_state=pins,
            superseded_weight=number("hycache", "superseded_weight", k["superseded_weight"]),
            learn_superseded=bool(k["learn_superseded"]),
            dead_weight=number("hycache", "dead_weight", k["dead_weight"]),
            by_reason=bool(k["by_reason"]),
            reason_weight=str(k["reason_weight"]),
            exponent=number("hycache", "exponent", k["exponent"]),
            aging_horizon=optional_int("hycache", "aging_horizon", k["aging_horizon"]) or 0,
            learn_aging=bool(k["learn_aging"]),
            typical_window=positive("hycache", "typical_window", k["typical_window"]),
            cheap_guess_share=share("hycache", "cheap_guess_share", k["cheap_guess_share"]),
            pin_reused_guesses=bool(k["pin_reused_guesses"]),
            strict_guess_pins=bool(k["strict_guess_pins"]),
            guess_reuse_ratio=positive("hycache", "reuse_ratio", k["reuse_ratio"]),
        )
    return GDSFEviction(
        session_aware=session_aware, use_frequency=name == "gdsf", pins_published_state=pins
    )


def build_hycache(
    spec: ModelSpec, capacity: int, k: dict[str, KnobValue], track_ids: bool
) -> HybridPrefixCache:
    page = positive("hycache", "page_size", k["page_size"])
    interval = k["interval"]
    interval = optional_int("hycache", "interval", interval) or 0
    return HybridPrefixCache(
        spec,
        shared_pool(spec, capacity, page, track_ids=track_ids),
        CacheConfig(
            page_size=page,
            token_budget=budget(k["token_budget"]),
            read_matched_kv=bool(k["read_matched_kv"]),
            reserve_checkpoint_slot=bool(k["reserve_checkpoint_slot"]),
            spare_slot_share=share("hycache", "spare_slot_share", k["spare_slot_share"]),
            name="hycache",
        ),
        checkpoint=HycachePlanner(
            interval,
            adaptive=bool(k["adaptive"]),
            learn_grid=bool(k["learn_grid"]),
            tail_checkpoint=bool(k["tail"]),
            free_room=bool(k["free_room"]),
            keep_best=bool(k["keep_best"]),
            proven_first=bool(k["proven_first"]),
            skip_first_step=bool(k["skip_first_step"]),
            decode_room=bool(k["decode_room"]),
            thresholds=_planner_thresholds(k),
        ),
        admission=admission(k["admission"]),
        eviction=_hycache_eviction(k),
    )
