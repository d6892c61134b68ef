"""Running presets over a workload: capacities, Marconi's alpha bootstrap, side by side."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Protocol, runtime_checkable

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import KNOBS, build_cache, resolve_knobs
from hycache.cache.tierconfig import TierConfig
from hycache.cache.tierpresets import preset_tiers
from hycache.errors import ConfigError
from hycache.policy.bootstrap import ScoreAll, in_order
from hycache.policy.eviction.marconi import tune_alpha
from hycache.policy.tuning import CHOSEN_KNOBS, candidates_for, tune_knobs
from hycache.sim.carry import HeadReplays
from hycache.sim.cost import CostModel
from hycache.sim.disagg import PULLS, replay_disagg
from hycache.sim.hardware import hardware_knobs
from hycache.sim.metrics import PolicyResult
from hycache.sim.prefetch import Prefetch
from hycache.sim.progress import Progress
from hycache.sim.replay import replay_engine
from hycache.sim.request import Request
from hycache.sim.serial import SerialReplay, replay_serial
from hycache.sim.sessions import DEFAULT_IDLE_S
from hycache.spec.model import ModelSpec

#: A re-iterable source of requests (a trace is read again for every policy).
Source = Callable[[], Iterable[Request]]

UNLIMITED_BYTES = 1 << 60
#: replay modes: ``hycache.sim.replay`` (serial, engine) and ``hycache.sim.disagg``
MODES = ("serial", "engine", "disagg")


@runtime_checkable
class PrefixSource(Protocol):
    """A source any stretch of which is cheap to read again (a parsed trace): the bootstrap
    replays read their window from it instead of holding it in a list, and the winner's replay
    carried on reads the rest."""

    def window(self, start: int, stop: int) -> Iterator[Request]: ...

    def __len__(self) -> int: ...


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

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.mode == "disagg" and self.tiers is not None:
            raise ConfigError("mode 'disagg' runs without lower tiers (no --host-capacity)")
        if self.mode != "disagg" and (self.decode_capacity is not None or self.pull != "last"):
            raise ConfigError("a decode capacity or pull applies to mode 'disagg' only")
        if self.pull not in PULLS:
            raise ConfigError(f"pull must be one of {', '.join(PULLS)}, got {self.pull!r}")
        if self.session_idle_s is not None and not self.session_idle_s >= 0:
            raise ConfigError(f"session_idle_s must be >= 0 or None, got {self.session_idle_s}")
        for preset, values in (self.knobs or {}).items():
            resolve_knobs(preset, values)


@dataclasses.dataclass(frozen=True)
class _Window:
    """A bootstrap window: its first ``count`` requests of the source, as a source."""

    requests: Source
    count: int
    #: whether that is all of the source
    whole: bool


def _rest(source: Source, start: int) -> Iterator[Request]:
    """``source``'s requests after its first ``start``."""
    if isinstance(source, PrefixSource):
        return source.window(start, len(source))
    return itertools.islice(source(), start, None)


def _bootstrap_window(source: Source, spec: ModelSpec, capacity: int, multiplier: int) -> _Window:
    """The first ``multiplier`` x (requests whose tokens fill ``capacity`` once) requests, as a
    source (a list, unless ``source`` is a :class:`PrefixSource`)."""
    window: list[Request] = []
    keep = not isinstance(source, PrefixSource)
    count = 0
    filled = 0
    fill_count: int | None = None
    per_token = spec.kv_bytes_per_token
    for request in source():
        count += 1
        if keep:
            window.append(request)
        if fill_count is None:
            filled += (request.prompt_len + request.output_len) * per_token + 2 * spec.state_bytes
            if filled >= capacity:
                fill_count = count
        if fill_count is not None and count >= multiplier * fill_count:
            break
    whole = fill_count is None or count < multiplier * fill_count
    if isinstance(source, PrefixSource):
        prefix = source
        return _Window(lambda: prefix.window(0, count), count, whole)
    return _Window(lambda: window, count, whole)


def _window_replay(
    config: SimulationConfig, cache: HybridPrefixCache, window: _Window
) -> SerialReplay:
    """A bootstrap replay of ``window`` (requests no cache of this size holds are served
    uncached and counted)."""
    replay = SerialReplay(
        cache, config.cost, reject_oversized=True, session_idle_s=config.session_idle_s
    )
    return replay.feed(window.requests())


def _tune_hycache(
    config: SimulationConfig,
    capacity: int,
    source: Source,
    multiplier: int,
    margin: float,
    candidates: Sequence[Mapping[str, object]],
    score_all: ScoreAll,
) -> tuple[Mapping[str, object], HeadReplays[Mapping[str, object]]]:
    """hycache's one-time choice (``hycache.policy.tuning``) on a bootstrap window of
    ``multiplier`` cache fills, and the window replays that may be carried on. A window in
    which no candidate reused a single token tells them apart no better than a coin: it is
    doubled until some candidate reuses something or it holds the whole source."""
    while True:
        window = _bootstrap_window(source, config.spec, capacity, multiplier)
        kept: HeadReplays[Mapping[str, object]] = HeadReplays(window.count)

        def replay(
            choice: Mapping[str, object],
            window: _Window = window,
            kept: HeadReplays[Mapping[str, object]] = kept,
        ) -> float:
            done = _window_replay(config, _build(config, "hycache", capacity, choice), window)
            score = float(done.cache.stats().reused_tokens)
            kept.offer(choice, score, done)
            return score

        chosen, scores = tune_knobs(replay, candidates, margin, score_all=score_all)
        if any(scores) or window.whole:
            return chosen, kept
        multiplier *= 2


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
    score_all: ScoreAll = in_order,
) -> PolicyResult:
    """Replay ``source`` through one preset at ``capacity`` bytes. ``score_all`` runs the
    bootstrap replays (Marconi's alphas, hycache's candidates): here in order by default, in
    forked processes with ``hycache.sim.forked.forked_scorer``; the result is the same."""
    knobs = preset_knobs(config, preset)
    extra: dict[str, object] = {}
    tuned: dict[str, object] = {}
    carried: SerialReplay | None = None
    if preset == "marconi" and "alpha" not in knobs:
        multiplier = int(resolve_knobs("marconi", knobs)["bootstrap_multiplier"] or 5)
        window = _bootstrap_window(source, config.spec, capacity, multiplier)
        alphas: HeadReplays[float] = HeadReplays(window.count)

        def score(alpha: float) -> float:
            done = _window_replay(
                config, _build(config, preset, capacity, {"alpha": alpha}), window
            )
            saved = done.result().prefill_flops_saved
            alphas.offer(alpha, saved, done)
            return saved

        best, _scores = tune_alpha(score, score_all=score_all)
        extra["alpha"] = best
        tuned = {"alpha": best, "window_requests": window.count}
        carried = alphas.winner(best)
    resolved = resolve_knobs(preset, knobs)
    if preset == "hycache" and resolved["tune"] and not CHOSEN_KNOBS & set(knobs):
        multiplier = int(resolved["bootstrap_multiplier"] or 5)
        chosen, kept = _tune_hycache(
            config,
            capacity,
            source,
            multiplier,
            float(resolved["tune_margin"] or 0),
            candidates_for(knobs, tune_clock=bool(resolved["tune_clock"])),
            score_all,
        )
        extra.update(chosen)
        tuned = {**chosen, "window_requests": kept.head}
        carried = kept.winner(chosen)
    result = _final_replay(config, preset, capacity, source, extra, carried, total)
    return dataclasses.replace(result, tuned=tuned) if tuned else result


def _final_replay(
    config: SimulationConfig,
    preset: str,
    capacity: int,
    source: Source,
    extra: Mapping[str, object],
    carried: SerialReplay | None,
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
            if carried is not None and _can_carry(config, carried):
                carried.reject_oversized = config.reject_oversized
                bar.advance(carried.served)
                rest = _rest(source, carried.served)
                return carried.feed(rest, bar.advance).result(shown)
            replay = SerialReplay(
                _build(config, preset, capacity, extra),
                config.cost,
                reject_oversized=config.reject_oversized,
                session_idle_s=config.session_idle_s,
                prefetch=prefetch,
            )
            return replay.feed(source(), bar.advance).result(shown)
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


def _can_carry(config: SimulationConfig, replay: SerialReplay) -> bool:
    """Whether the serial run under ``config`` starts exactly as the bootstrap ``replay`` did:
    no tiers (a bootstrap replays without prefetch), and no request it served uncached that the
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
