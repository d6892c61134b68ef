"""``TierSettings``: the tiers a run puts under the device, from ``host=SIZE,disk=SIZE,
redis=URL`` (any subset, in that order of speed), and ``build_chain`` to make them.

Sizes go through ``cli.sizes`` (``64MiB``, ``1e6``; no percentages). Bad text raises
``ConfigError`` naming the item, before anything is built. ``TIER_INJECTS``: the store
faults ``verify --inject`` can inject (``corrupt-store``: every disk and Redis payload is
damaged after its checksum is taken; ``no-checksum``: the same, and readers skip the
checksum, so the damage reaches the model).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hycache.engine.tiers.base import TierBackend
from hycache.engine.tiers.chain import TierChain
from hycache.engine.tiers.codec import Codec
from hycache.engine.tiers.disk import DiskTier
from hycache.engine.tiers.fingerprint import TierIdentity
from hycache.engine.tiers.host import HostTier
from hycache.engine.tiers.redis import DEFAULT_TIMEOUT_S, DEFAULT_TTL_S, RedisTier
from hycache.errors import ConfigError

TIERS = ("host", "disk", "redis")
TIER_INJECTS = ("corrupt-store", "no-checksum")


@dataclass(frozen=True)
class TierSettings:
    """Budgets of the host and disk tiers (0: absent), the Redis URL (None: absent), the
    Redis TTL, the prefetch timeout (seconds a read from Redis may take) and how long a
    failed store is left alone before the next call reconnects."""

    host_bytes: int = 0
    disk_bytes: int = 0
    redis_url: str | None = None
    ttl_s: int = DEFAULT_TTL_S
    timeout_s: float = DEFAULT_TIMEOUT_S
    retry_after_s: float = 1.0

    @property
    def names(self) -> tuple[str, ...]:
        present = (self.host_bytes > 0, self.disk_bytes > 0, self.redis_url is not None)
        return tuple(n for n, p in zip(TIERS, present, strict=True) if p)


def parse_tiers(text: str) -> TierSettings:
    """``host=SIZE,disk=SIZE,redis=URL`` -> settings; ConfigError naming the bad item."""
    from hycache.cli.sizes import parse_size

    values: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            raise ConfigError(
                f"--tiers: {item!r} is not NAME=VALUE (host=SIZE, disk=SIZE, redis=URL)"
            )
        if name not in TIERS:
            raise ConfigError(f"--tiers: unknown tier {name!r}; known: {', '.join(TIERS)}")
        if name in values:
            raise ConfigError(f"--tiers: {name} given twice")
        values[name] = value.strip()
    if not values:
        raise ConfigError("--tiers: no tier given (host=SIZE,disk=SIZE,redis=URL)")
    url = values.get("redis")
    if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError(f"--tiers: redis={url!r} is not a redis:// URL")
    sizes = {}
    for name in ("host", "disk"):
        if name in values:
            try:
                sizes[name] = parse_size(values[name])
            except ConfigError as exc:
                raise ConfigError(f"--tiers: {name}: {exc}") from None
    return TierSettings(sizes.get("host", 0), sizes.get("disk", 0), url)


def build_chain(
    settings: TierSettings,
    identity: TierIdentity,
    *,
    disk_dir: str | os.PathLike[str] | None = None,
    prefix: str = "hycache",
    writer: str = "",
    inject: str | None = None,
) -> TierChain:
    """The chain ``settings`` describe; ``disk_dir`` is required with a disk tier."""
    if inject is not None and inject not in TIER_INJECTS:
        raise ConfigError(f"unknown tier inject {inject!r}; known: {', '.join(TIER_INJECTS)}")
    codec = Codec(identity, writer=writer, verify=inject != "no-checksum", corrupt=bool(inject))
    backends: list[TierBackend] = []
    if settings.host_bytes:
        backends.append(HostTier(settings.host_bytes))
    if settings.disk_bytes:
        if disk_dir is None:
            raise ConfigError("a disk tier needs a directory")
        backends.append(DiskTier(disk_dir, settings.disk_bytes, codec))
    if settings.redis_url is not None:
        backends.append(
            RedisTier(
                settings.redis_url,
                codec,
                prefix=prefix,
                ttl_s=settings.ttl_s,
                timeout_s=settings.timeout_s,
                retry_after_s=settings.retry_after_s,
            )
        )
    return TierChain(backends, identity, writer=writer)
