"""``Runtime``: everything one server holds, and the only way routes reach the engine.

Built from a ``ServeConfig``: the model (``load_model``), its tokenizer, a cache of the
configured preset, an ``Engine`` interleaving up to ``max_running`` requests, and the
``OnlineEngine`` that runs it on its scheduler thread. Routes submit ``EngineRequest``s and
read the cache only through ``snapshot`` and ``check``, which run on the scheduler thread
(``OnlineEngine.call``). Between steps the scheduler ends idle sessions.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from hycache.cache.presets import build_cache
from hycache.engine.engine import Engine
from hycache.engine.model import load_model
from hycache.engine.online import OnlineEngine
from hycache.serve.config import ServeConfig
from hycache.serve.metrics import CacheSnapshot, ServeMetrics
from hycache.serve.sessions import SessionTracker
from hycache.serve.tokenizer import TextCodec
from hycache.spec.model import ModelSpec

#: the context length when the checkpoint's config names none
FALLBACK_CONTEXT = 4096


def default_capacity(spec: ModelSpec) -> int:
    """About 8,192 tokens of KV plus 64 states."""
    return spec.kv_bytes_per_token * 8192 + spec.state_bytes * 64


class Runtime:
    """A loaded model behind a cache, served by an engine on its own thread."""

    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.model = load_model(config.model_dir, dtype=config.dtype)
        self.codec = TextCodec.load(config.model_dir, self.model.vocab_size)
        capacity = config.capacity or default_capacity(self.model.spec)
        knobs: dict[str, Any] = dict(config.knobs)
        self.cache = build_cache(self.model.spec, capacity, config.policy, **knobs)
        self.engine = Engine(self.model, self.cache, max_running=config.max_running)
        self.sessions = SessionTracker(config.session_idle_s)
        self.online = OnlineEngine(
            self.engine,
            max_queue=config.max_queue,
            retry_after=config.retry_after_s,
            on_round=self._between_steps,
        )
        self.metrics = ServeMetrics(self.snapshot)
        context = getattr(self.model.config, "max_position_embeddings", None)
        limit = context if isinstance(context, int) and context > 1 else FALLBACK_CONTEXT
        if config.max_model_len is not None:
            limit = min(limit, config.max_model_len)
        self.max_model_len = limit
        self.draining = False
        self.drained = False
        self._ids = itertools.count()
        self._prefix = os.urandom(4).hex()

    @property
    def model_name(self) -> str:
        return self.config.model_name

    def new_id(self) -> str:
        """A request id unique within this server."""
        return f"{self._prefix}{next(self._ids):08x}"

    def start(self) -> None:
        self.online.start()

    def shutdown(self, *, drain: bool = True) -> bool:
        """Stop admitting; finish (``drain``) or abort what is in flight. Whether the
        scheduler stopped within the drain timeout."""
        self.draining = True
        self.drained = self.online.shutdown(drain=drain, timeout=self.config.drain_timeout_s)
        return self.drained

    # ------------------------------------------------------------------ scheduler thread
    def _between_steps(self) -> None:
        self.sessions.expire(self.cache.end_session)

    def snapshot(self) -> CacheSnapshot:
        """The cache's statistics and the scheduler's counts, taken between two steps."""

        def take(engine: Engine) -> CacheSnapshot:
            return CacheSnapshot(
                stats=engine.cache.stats(),
                kinds=tuple(engine.cache.pool.costs),
                running=self.online.running(),
                waiting=self.online.waiting() + self.online.queued,
                sessions_active=self.sessions.active(),
                sessions_ended=self.sessions.ended,
                engine_errors=self.online.errors,
            )

        return self.online.call(take)

    def check(self) -> dict[str, int]:
        """Check the cache's integrity and the engine's memory accounting between two steps
        (IntegrityError); a few numbers about what is held."""

        def run(engine: Engine) -> dict[str, int]:
            engine.cache.check_integrity()
            engine.memory.check()
            return {
                "requests_in_flight": engine.cache.requests_in_flight(),
                "used_bytes": engine.cache.pool.used_bytes,
                "budget_bytes": engine.cache.pool.budget_bytes,
                "live_tensor_bytes": engine.memory.live_tensor_bytes(),
            }

        return self.online.call(run)
