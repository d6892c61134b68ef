"""Running presets over a workload: capacities, each preset's bootstrap (``hycache.sim.bootstrap``)
then its replay, side by side."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import KNOBS, build_cache, resolve_knobs
from hycache.cache.retune import switch_candidate
from hycache.cache.tierconfig import TierConfig
from hycache.cache.tierpresets import preset_tiers
from hycache.errors import ConfigError
from hycache.policy.bootstrap import Contest, in_order
from hycache.policy.tuning import CHOSEN_KNOBS, candidates_for
from hycache.sim.bootstrap import (
    Choice,
    Halfway,
    Window,
    bootstrap_window,
    choose_alpha,
    choose_knobs,
)
from hycache.sim.carry import HeadReplay
from hycache.sim.cost import CostModel
from hycache.sim.disagg import PULLS, replay_disagg
from hycache.sim.garbage import YOUNG_THRESHOLD, collect_dropped, fewer_collections
from hycache.sim.hardware import hardware_knobs
from hycache.sim.metrics import PolicyResult
from hycache.sim.prefetch import Prefetch
from hycache.sim.progress import Progress
from hycache.sim.replay import EngineReplay, replay_engine
from hycache.sim.serial import SerialReplay, replay_serial
from hycache.sim.sessions import DEFAULT_IDLE_S
from hycache.sim.source import Source, head, rest
from hycache.spec.model import ModelSpec

UNLIMITED_BYTES = 1 << 60
#: replay modes: ``hycache.sim.replay`` (serial, engine) and ``hycache.sim.disagg``
MODES = ("serial", "engine", "disagg")


@dataclasses.dataclass(frozen=True)
class SimulationConfig:
    spec: ModelSpec
    cost: CostModel
    mode: str = "serial"
    token_budget: int = 8192
    knobs: Mapping[str, Mapping[str, object]] | None = None
    progress: bool | None = None
    #: serve a request larger than the whole cache uncached (counted) instead of failing
    reject_oversized: bool = False
    #: end a session idle for longer than this (seconds of trace time; None: never, as
    #: SGLang without a session timeout); see ``hycache.sim.sessions``
    session_idle_s: float | None = DEFAULT_IDLE_S
    #: a host tier under the device (None: the device alone, as before tiers)
    tiers: TierConfig | None = None
    #: ``disagg`` mode: the decode instance's capacity in bytes (None: the prefill's), and
    #: where it resumes (``hycache.sim.disagg.PULLS``)
    decode_capacity: int | None = None
    pull: str = "last"
    #: net container allocations between two young-generation collections during a replay
    #: (None: the interpreter's own pace); see ``hycache.sim.garbage``
    gc_young: int | None = YOUNG_THRESHOLD

    def __post_init__(self) -> None:
        if self.cost.spec != self.spec:  # times and FLOPs are both the cost model's
            raise ConfigError(
                f"the cost model is of {self.cost.spec.name!r}, the config of {self.spec.name!r}"
            )
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "disagg" and self.tiers is not None:
            raise ConfigError("mode 'disagg' runs without lower tiers (no --host-capacity)")
        if self.mode != "disagg" and (self.decode_capacity is not None or self.pull != "last"):
            raise ConfigError("a decode capacity or pull applies to mode 'disagg' only")
        if self.pull not in PULLS:
            raise ConfigError(f"pull must be one of {', '.join(PULLS)}, got {self.pull!r}")
        if self.gc_young is not None and self.gc_young < 1:
            raise ConfigError(f"gc_young must be >= 1 or None, got {self.gc_young}")
        if self.session_idle_s is not None and not self.session_idle_s >= 0:
            raise ConfigError(f"session_idle_s must be >= 0 or None, got {self.session_idle_s}")
        for preset, values in (self.knobs or {}).items():
            resolve_knobs(preset, values)


def preset_knobs(config: SimulationConfig, preset: str) -> dict[str, object]:
    """The knobs set for ``preset``, over the defaults its hardware profile implies."""
    return {**hardware_knobs(preset, config.cost.hw), **(config.knobs or {}).get(preset, {})}


def _build(
    config: SimulationConfig, preset: str, capacity: int, extra: Mapping[str, object]
) -> HybridPrefixCache:
    knobs = preset_knobs(config, preset)
    knobs.update(extra)
    cache = build_cache(config.spec, capacity, preset, track_ids=False, **knobs)
    tiers = _tiers(config, preset, knobs)
    if tiers is not None:
        tiers.attach(cache)
    return cache


def _tiers(config: SimulationConfig, preset: str, knobs: Mapping[str, object]) -> TierConfig | None:
    """The tiers ``preset`` runs with under ``config`` (None: none)."""
    if config.tiers is None:
        return None
    return preset_tiers(config.tiers, preset, resolve_knobs(preset, knobs))


def run_policy(
    config: SimulationConfig,
    preset: str,
    capacity: int,
    source: Source,
    *,
    total: int | None = None,
    contest: Contest = in_order,
) -> PolicyResult:
    """Replay ``source`` through one preset at ``capacity`` bytes. ``contest`` runs the
    bootstrap replays (Marconi's alphas, hycache's candidates) and the replay of the whole
    source with the winner: here in order by default, in forked processes with
    ``hycache.sim.forked.forked_contest``; the result is the same. The
    collector runs at ``config.gc_young``'s pace meanwhile (``hycache.sim.garbage``)."""
    with fewer_collections(config.gc_young):
        return _run_policy(config, preset, capacity, source, total, contest)


def _run_policy(
    config: SimulationConfig,
    preset: str,
    capacity: int,
    source: Source,
    total: int | None,
    contest: Contest,
) -> PolicyResult:
    knobs = preset_knobs(config, preset)
    resolved = resolve_knobs(preset, knobs)
    #: whether the last replay may carry on a bootstrap replay (``_can_carry`` decides more)
    carry = config.mode == "serial" and config.tiers is None
    #: the same for ``hycache``'s candidates, replayed in the run's own mode
    carry_in_mode = config.mode in ("serial", "engine") and config.tiers is None

    def replay(
        extra: Mapping[str, object], window: Window, halfway: Halfway | None = None
    ) -> SerialReplay:
        """A bootstrap replay of ``window`` (requests no cache of this size holds are served
        uncached and counted); ``halfway`` is called on it once the window's first half
        (``Window.half``) was served."""
        cache = _build(config, preset, capacity, extra)
        done = SerialReplay(
            cache, config.cost, reject_oversized=True, session_idle_s=config.session_idle_s
        )
        requests = iter(window.requests())
        if halfway is not None:
            halfway(done.feed(itertools.islice(requests, window.half)))
        return done.feed(requests)

    def replay_in_mode(
        extra: Mapping[str, object], window: Window, halfway: Halfway | None = None
    ) -> HeadReplay:
        """``hycache``'s bootstrap replay of ``window`` in the run's own mode, ``halfway`` as
        above. In engine mode requests overlap, so which states are taken, published and
        reused differs from a serial replay: the engine loop runs on the whole source until
        the window's requests have left the queue (those that come after wait behind them),
        and can go on from there (requests no cache of this size holds run alone,
        uncached)."""
        if config.mode != "engine":
            return replay(extra, window, halfway)
        cache = _build(config, preset, capacity, extra)
        engine = EngineReplay(
            cache,
            source(),
            config.cost,
            token_budget=cache.config.token_budget or config.token_budget,
            reject_oversized=True,
            session_idle_s=config.session_idle_s,
        )
        if halfway is not None:
            halfway(engine.run_until(window.half))
        return engine.run_until(window.count)

    def finish(choice: Choice) -> PolicyResult:
        """The replay of the whole source with the bootstrap's choice, which it records."""
        if choice.window_requests is not None:
            collect_dropped()  # the bootstrap's losing caches, before the long replay
        carried = choice.carried
        if choice.switched_from is not None:
            carried = _switched(source, choice, replay_in_mode)
        result = _final_replay(config, preset, capacity, source, choice.knobs, carried, total)
        tuned = choice.tuned
        return dataclasses.replace(result, tuned=tuned) if tuned else result

    if preset == "marconi" and "alpha" not in knobs:
        multiplier = int(resolved["bootstrap_multiplier"] or 5)
        window = bootstrap_window(source, config.spec, capacity, multiplier)
        return choose_alpha(window, replay, contest, finish, carry=carry)
    if preset == "hycache" and resolved["tune"] and not CHOSEN_KNOBS & set(knobs):
        causal = bool(resolved["bootstrap_causal"])
        returns = bool(resolved["bootstrap_returns"])
        if causal and not carry_in_mode:
            raise ConfigError(
                "hycache.bootstrap_causal needs a serial or engine run without tiers (it goes "
                "on from the window replay)"
            )
        return choose_knobs(
            lambda multiplier: bootstrap_window(
                source, config.spec, capacity, multiplier, returns=returns
            ),
            int(resolved["bootstrap_multiplier"] or 5),
            candidates_for(
                knobs,
                tune_clock=bool(resolved["tune_clock"]),
                tune_lineage=bool(resolved["tune_lineage"]),
            ),
            float(resolved["tune_margin"] or 0),
            replay_in_mode,
            contest,
            finish,
            carry=carry_in_mode,
            evidence=float(resolved["bootstrap_evidence"] or 0),
            settle=bool(resolved["bootstrap_settle"]),
            causal=causal,
        )
    return finish(Choice())


def _switched(
    source: Source,
    choice: Choice,
    replay_in_mode: Callable[[Mapping[str, object], Window], HeadReplay],
) -> HeadReplay:
    """A causal choice's run up to the end of its window: the first candidate's window replay
    (the one kept, or a new one), switched to the pick in place. (Where the run may not carry
    it on, ``_final_replay`` replays from the start and meets what stops it there.)"""
    carried = choice.carried
    if carried is None:
        count = choice.window_requests or 0
        window = Window(lambda: head(source, count), count, False, None)
        carried = replay_in_mode(choice.switched_from or {}, window)
    switch_candidate(carried.cache, choice.knobs)
    return carried


def _final_replay(
    config: SimulationConfig,
    preset: str,
    capacity: int,
    source: Source,
    extra: Mapping[str, object],
    carried: HeadReplay | None,
    total: int | None,
) -> PolicyResult:
    """``run_policy``'s replay of the whole source with the bootstrap's choice ``extra``,
    carrying on the winner's window replay ``carried`` where it can."""
    knobs = preset_knobs(config, preset)
    tiers = _tiers(config, preset, {**knobs, **extra})
    prefetch = None if tiers is None else Prefetch.of(tiers, config.cost)
    shown: dict[str, object] = dict(resolve_knobs(preset, {**knobs, **extra}))
    bar = Progress(total, f"{preset} {config.mode}", enabled=config.progress)
    try:
        if config.mode == "serial":
            if isinstance(carried, SerialReplay) and _can_carry(config, carried):
                carried.reject_oversized = config.reject_oversized
                bar.advance(carried.served)
                remaining = rest(source, carried.served)
                return carried.feed(remaining, bar.advance).result(shown)
            replay = SerialReplay(
                _build(config, preset, capacity, extra),
                config.cost,
                reject_oversized=config.reject_oversized,
                session_idle_s=config.session_idle_s,
                prefetch=prefetch,
            )
            return replay.feed(source(), bar.advance).result(shown)
        if (
            config.mode == "engine"
            and isinstance(carried, EngineReplay)
            and _can_carry(config, carried)
        ):
            carried.reject_oversized = config.reject_oversized
            bar.advance(carried.finished)
            carried.tick = bar.advance
            return carried.result(shown)
        cache = _build(config, preset, capacity, extra)
        if config.mode == "disagg":
            decode = _build(config, preset, config.decode_capacity or capacity, extra)
            return replay_disagg(
                cache,
                decode,
                source(),
                config.cost,
                knobs=shown,
                tick=bar.advance,
                reject_oversized=config.reject_oversized,
                session_idle_s=config.session_idle_s,
                pull=config.pull,
            )
        budget = cache.config.token_budget or config.token_budget
        return replay_engine(
            cache,
            source(),
            config.cost,
            token_budget=budget,
            knobs=shown,
            tick=bar.advance,
            reject_oversized=config.reject_oversized,
            session_idle_s=config.session_idle_s,
            prefetch=prefetch,
        )
    finally:
        bar.close()


def _can_carry(config: SimulationConfig, replay: HeadReplay) -> bool:
    """Whether the run under ``config`` starts exactly as the bootstrap ``replay`` did: no
    tiers (a bootstrap replays without prefetch), and no request it served uncached that the
    run must reject with its CapacityError instead."""
    return config.tiers is None and (config.reject_oversized or replay.rejected == 0)


def unlimited_replay(
    config: SimulationConfig, source: Source, *, page_size: int = 16
) -> PolicyResult:
    """Caching everything in serial mode with no capacity limit: the KV of every distinct page
    of ``page_size`` tokens plus a state at each request's branch point and end (Marconi's
    placement, which keeps at most two states per sequence)."""
    cache = build_cache(
        config.spec, UNLIMITED_BYTES, "marconi", track_ids=False, page_size=page_size, alpha=1.0
    )
    return replay_serial(cache, source(), config.cost)


def footprint_bytes(config: SimulationConfig, source: Source) -> int:
    """The unlimited footprint, the same whatever preset is measured against it: the peak
    bytes of ``unlimited_replay`` (16-token pages)."""
    return unlimited_replay(config, source).peak_bytes


def infinite_hit_rate(config: SimulationConfig, source: Source) -> float:
    """The infinite-cache bound on the token hit rate: the share of prompt tokens whose KV an
    earlier request left (its prompt or its output), token by token: the ``kv_hit_rate`` of
    ``unlimited_replay`` with one-token pages. A cache of unlimited size with a state at every
    token would reuse all of them; a preset's token hit rate stays at or below it."""
    return unlimited_replay(config, source, page_size=1).kv_hit_rate


def simulate(
    config: SimulationConfig,
    source: Source,
    capacity: int,
    policies: Sequence[str],
    *,
    total: int | None = None,
) -> dict[str, PolicyResult]:
    """Every policy over the same requests at one capacity."""
    for policy in policies:
        if policy not in KNOBS:
            raise ConfigError(f"unknown policy {policy!r}; known: {', '.join(KNOBS)}")
    return {p: run_policy(config, p, capacity, source, total=total) for p in policies}
