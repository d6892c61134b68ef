"""``RedisTier``: a shared store every engine instance reaches (redis-py, extra ``[redis]``).

One key per object, ``PREFIX:COMPONENT-PAGE-DIGEST``, holding header and payload together
(``Codec``): there is no metadata key that could outlive or precede its payload, so a SET is
the write and the publication at once, and a writer killed before it completes leaves
nothing. Writes are ``SET NX EX ttl`` (objects are immutable: the first writer wins), batched
in one pipeline per call; reads are one pipelined GET (EXISTS for ``locate``). Eviction is
Redis's own: TTL, and ``maxmemory`` with ``allkeys-lru`` (a missing key is a miss).

Failures never reach the engine: a lost connection or a timeout (``timeout`` seconds, which
bounds how long a prefetch may wait: past it the tokens are recomputed) counts and makes
every key a miss; the store is then left alone for ``retry_after`` seconds, after which the
next call reconnects (a restarted server is used again). A blob that does not decode is a
miss, counted and deleted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from hycache.engine.tiers.base import ObjectKey, TierBackend, TierObject
from hycache.engine.tiers.codec import Codec
from hycache.errors import ConfigError, IntegrityError

DEFAULT_TTL_S = 3600
DEFAULT_TIMEOUT_S = 1.0


def _redis() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigError("the Redis tier needs redis-py: pip install 'hycache[redis]'") from None
    return redis


class RedisTier(TierBackend):
    name = "redis"

    def __init__(
        self,
        url: str,
        codec: Codec,
        *,
        prefix: str = "hycache",
        ttl_s: int = DEFAULT_TTL_S,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry_after_s: float = 1.0,
    ) -> None:
        super().__init__()
        redis = _redis()
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if ttl_s <= 0 or timeout_s <= 0:
            raise ConfigError(f"redis tier: ttl and timeout must be > 0, got {ttl_s}, {timeout_s}")
        self.url = url
        self.codec = codec
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.retry_after_s = retry_after_s
        self._down_until = 0.0
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        self._timeout = redis.exceptions.TimeoutError
        try:
            self.client: Any = redis.Redis.from_url(
                url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
            self.client.ping()
        except (ValueError, *self._errors) as exc:
            raise ConfigError(f"redis tier: cannot reach {url}: {exc}") from exc

    def redis_key(self, key: ObjectKey) -> str:
        return f"{self.prefix}:{key.name}"

    # ------------------------------------------------------------------ failure handling
    def _available(self) -> bool:
        return time.monotonic() >= self._down_until

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, self._timeout):
            self.counters.timeouts += 1
        else:
            self.counters.errors += 1
        self._down_until = time.monotonic() + self.retry_after_s

    def _pipeline(self, calls: Sequence[tuple[str, tuple[Any, ...], dict[str, Any]]]) -> list[Any]:
        """Run the calls in one pipelined round trip; None when the store failed."""
        pipe = self.client.pipeline(transaction=False)
        for name, args, kwargs in calls:
            getattr(pipe, name)(*args, **kwargs)
        result: list[Any] = pipe.execute(raise_on_error=False)
        return result

    # ------------------------------------------------------------------ the contract
    def locate(self, keys: Sequence[ObjectKey]) -> list[bool]:
        if not keys or not self._available():
            return [False] * len(keys)
        try:
            found = self._pipeline([("exists", (self.redis_key(k),), {}) for k in keys])
        except self._errors as exc:
            self._failed(exc)
            return [False] * len(keys)
        return [f == 1 for f in found]

    def get(self, keys: Sequence[ObjectKey]) -> list[TierObject | None]:
        if not keys:
            return []
        if not self._available():
            self.counters.misses += len(keys)
            return [None] * len(keys)
        try:
            blobs = self._pipeline([("get", (self.redis_key(k),), {}) for k in keys])
        except self._errors as exc:
            self._failed(exc)
            self.counters.misses += len(keys)
            return [None] * len(keys)
        out: list[TierObject | None] = []
        bad: list[str] = []
        for key, blob in zip(keys, blobs, strict=True):
            if not isinstance(blob, bytes):
                self.counters.misses += 1
                out.append(None)
                continue
            try:
                obj = self.codec.decode(key, blob)
            except IntegrityError:
                self.counters.invalid += 1
                bad.append(self.redis_key(key))
                out.append(None)
                continue
            self.counters.hits += 1
            self.counters.bytes_read += len(blob)
            out.append(obj)
        if bad:
            try:
                self.client.delete(*bad)
            except self._errors as exc:
                self._failed(exc)
        return out

    def put(self, objects: Sequence[TierObject]) -> int:
        if not objects:
            return 0
        if not self._available():
            self.counters.not_stored += len(objects)
            return 0
        blobs = [self.codec.encode(obj) for obj in objects]
        calls = [
            ("set", (self.redis_key(obj.key), blob), {"nx": True, "ex": self.ttl_s})
            for obj, blob in zip(objects, blobs, strict=True)
        ]
        try:
            done = self._pipeline(calls)
        except self._errors as exc:
            self._failed(exc)
            self.counters.not_stored += len(objects)
            return 0
        stored = 0
        for blob, ok in zip(blobs, done, strict=True):
            if ok is True:
                stored += 1
                self.counters.bytes_written += len(blob)
                self.counters.corrupted += self.codec.corrupt
            elif isinstance(ok, BaseException):
                self.counters.not_stored += 1  # e.g. OOM under maxmemory with noeviction
        self.counters.stored += stored
        return stored

    def clear(self) -> None:
        try:
            keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=1000))
            if keys:
                self.client.delete(*keys)
        except self._errors as exc:
            self._failed(exc)

    def close(self) -> None:
        self.client.close()
