"""``ServeConfig``: the settings of one server, checked when built (ConfigError naming the
setting). Plain data: nothing here imports the engine or the web stack."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hycache.cache.presets import KNOBS, KnobValue
from hycache.errors import ConfigError

DEFAULT_PORT = 8000
LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class ServeConfig:
    """One model behind one cache preset.

    ``capacity``: the cache's byte budget (None: about 8,192 tokens of KV plus 64 states).
    ``max_running``: requests interleaved by the engine; ``max_queue``: requests waiting to be
    admitted before new ones get 429 (``retry_after_s`` in the Retry-After header).
    ``max_model_len``: prompt + max_tokens bound (None: the model's
    ``max_position_embeddings``). ``session_idle_s``: a session with nothing in flight for
    that long is ended (``cache.end_session``)."""

    model_dir: Path
    model_name: str
    policy: str = "hycache"
    knobs: Mapping[str, KnobValue] = field(default_factory=dict)
    capacity: int | None = None
    dtype: str = "float32"
    max_running: int = 4
    max_queue: int = 32
    retry_after_s: float = 1.0
    max_model_len: int | None = None
    default_max_tokens: int = 16
    session_idle_s: float = 60.0
    drain_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.policy not in KNOBS:
            raise ConfigError(f"unknown policy {self.policy!r}; known: {', '.join(KNOBS)}")
        if not self.model_name:
            raise ConfigError("the served model name must not be empty")
        for name in ("max_running", "max_queue", "default_max_tokens"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ConfigError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.capacity is not None and self.capacity < 1:
            raise ConfigError(f"capacity must be a positive byte count, got {self.capacity}")
        for name in ("retry_after_s", "session_idle_s", "drain_timeout_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
