"""Running the engine over a tier chain and counting wrong tokens against cold runs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine, RequestResult
from hycache.engine.model import LoadedModel
from hycache.engine.tiers.chain import TierChain
from hycache.engine.tiers.config import TierSettings, build_chain
from hycache.engine.tiers.fingerprint import model_identity
from hycache.engine.verify import compare, default_capacity
from hycache.engine.workloads import SessionSource, Turn, generate_turns

#: a device a quarter of verify's default: most hits must come from the tiers
DEVICE_SHARE = 0.25
TOLERANCE = 1e-4


def chain_for(
    model: LoadedModel,
    tmp: Path,
    *,
    host: int = 0,
    disk: int = 0,
    redis_url: str | None = None,
    prefix: str = "test",
    writer: str = "w1",
    inject: str | None = None,
    timeout_s: float = 1.0,
    retry_after_s: float = 1.0,
) -> TierChain:
    page = build_cache(model.spec, default_capacity(model.spec), "hycache").page_size
    settings = TierSettings(host, disk, redis_url, timeout_s=timeout_s, retry_after_s=retry_after_s)
    return build_chain(
        settings,
        model_identity(model, page),
        disk_dir=tmp / f"disk-{writer}",
        prefix=prefix,
        writer=writer,
        inject=inject,
    )


class Hook(SessionSource):
    """The chat workload, calling ``actions[k]`` once ``k`` requests have finished."""

    def __init__(self, turns: list[Turn], actions: dict[int, Callable[[], None]]) -> None:
        super().__init__(turns)
        self.actions = actions
        self.finished = 0

    def done(self, result: RequestResult) -> None:
        super().done(result)
        self.finished += 1
        action = self.actions.get(self.finished)
        if action is not None:
            action()


@dataclass(frozen=True)
class Outcome:
    """A run: results, the device's reused tokens, tokens loaded from the tiers, wrong ones."""

    results: list[RequestResult]
    device_tokens: int
    tier_tokens: int
    wrong: int


def run_chat(
    model: LoadedModel,
    chain: TierChain | None,
    *,
    requests: int = 16,
    actions: dict[int, Callable[[], None]] | None = None,
    engine_hook: Callable[[Engine], None] | None = None,
) -> Outcome:
    """The chat workload on a small device over ``chain`` (``actions[k]`` run after ``k``
    requests finished), every request compared with its cold run: ``wrong`` counts requests
    that differ (or failed)."""
    capacity = int(default_capacity(model.spec) * DEVICE_SHARE)
    cache = build_cache(model.spec, capacity, "hycache", track_ids=True)
    engine = Engine(model, cache, max_running=2, tiers=chain)
    if engine_hook is not None:
        engine_hook(engine)
    turns = generate_turns("chat", requests=requests, seed=0, vocab=model.vocab_size)
    source = Hook(turns, actions or {})
    results = engine.run(source)
    wrong = 0
    for r in results:
        if r.status != "done":
            wrong += 1
            continue
        cold = engine.run_cold(r.request.prompt, r.request.max_new_tokens)
        delta, mismatch, _, _ = compare(r, cold, TOLERANCE)
        wrong += int(bool(mismatch) or delta > TOLERANCE or bool(r.violations))
    tier_tokens = sum(r.tier_tokens for r in results)
    return Outcome(results, cache.stats().reused_tokens, tier_tokens, wrong)
