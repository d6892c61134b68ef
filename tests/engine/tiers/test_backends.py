"""The tier backends and the blob format on their own: what a reader refuses, what a killed
writer leaves, LRU budgets."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from hycache.engine.tiers.base import ObjectKey, TierObject
from hycache.engine.tiers.codec import Codec
from hycache.engine.tiers.disk import DiskTier
from hycache.engine.tiers.fingerprint import TierIdentity
from hycache.engine.tiers.host import HostTier
from hycache.engine.tiers.redis import RedisTier
from hycache.errors import ConfigError, IntegrityError
from tests.redis_server import RedisServer

IDENTITY = TierIdentity("f" * 32, 4, {"full": (("float32", (4, 2, 8)), ("float32", (4, 2, 8)))})


def obj(i: int, identity: TierIdentity = IDENTITY) -> TierObject:
    key = ObjectKey("full", 4, i.to_bytes(16, "big"))
    g = torch.Generator().manual_seed(i)
    tensors = tuple(torch.randn((4, 2, 8), generator=g) for _ in range(2))
    return TierObject(key, 4 * (i + 1), tensors, "w")


def same(a: TierObject | None, b: TierObject) -> bool:
    return a is not None and all(
        torch.equal(x, y) for x, y in zip(a.tensors, b.tensors, strict=True)
    )


# ---------------------------------------------------------------------- the blob format
def test_codec_round_trip_and_refusals() -> None:
    codec = Codec(IDENTITY)
    o = obj(1)
    blob = codec.encode(o)
    assert same(codec.decode(o.key, blob), o)
    bad = {
        "truncated": blob[:-3],
        "payload flipped": blob[:-5] + bytes([blob[-5] ^ 1]) + blob[-4:],
        "not an object": b"garbage",
        "another key": blob,
    }
    for what, data in bad.items():
        key = obj(2).key if what == "another key" else o.key
        with pytest.raises(IntegrityError):
            codec.decode(key, data)
    other = TierIdentity("0" * 32, 4, IDENTITY.specs)
    with pytest.raises(IntegrityError, match="fingerprint"):
        Codec(other).decode(o.key, blob)
    wider = TierIdentity("f" * 32, 4, {"full": (("float64", (4, 2, 8)),) * 2})
    with pytest.raises(IntegrityError):
        Codec(wider).decode(o.key, blob)


def test_without_checksum_damage_passes_the_reader() -> None:
    damaged = Codec(IDENTITY, corrupt=True).encode(obj(1))
    with pytest.raises(IntegrityError, match="checksum"):
        Codec(IDENTITY).decode(obj(1).key, damaged)
    read = Codec(IDENTITY, verify=False).decode(obj(1).key, damaged)
    assert not same(read, obj(1)) and all(bool(t.isfinite().all()) for t in read.tensors)


# ---------------------------------------------------------------------- host and disk
def test_host_lru_within_budget() -> None:
    host = HostTier(3 * obj(0).nbytes)
    host.put([obj(i) for i in range(3)])
    host.get([obj(0).key])  # 0 becomes most recent
    host.put([obj(3)])
    assert host.locate([obj(i).key for i in range(4)]) == [True, False, True, True]
    assert host.used_bytes <= host.budget_bytes and host.counters.evictions == 1


def test_disk_lru_and_corruption(tmp_path: Path) -> None:
    codec = Codec(IDENTITY)
    size = len(codec.encode(obj(0))) + 8  # headers differ by a few digits
    disk = DiskTier(tmp_path, 3 * size, codec)
    disk.put([obj(i) for i in range(4)])
    assert disk.locate([obj(i).key for i in range(4)]) == [False, True, True, True]
    assert disk.used_bytes <= 3 * size
    path = tmp_path / (obj(2).key.name + ".obj")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x10
    path.write_bytes(bytes(data))
    assert disk.get([obj(2).key]) == [None] and disk.counters.invalid == 1
    assert not path.exists()  # deleted
    reopened = DiskTier(tmp_path, 3 * size, codec)  # LRU seeded from the files
    assert same(reopened.get([obj(3).key])[0], obj(3))


def test_disk_writer_killed_between_write_and_publish(tmp_path: Path) -> None:
    """A writer killed after writing its temporary file, before the rename: no reader ever
    sees the object, and the next tier on the directory removes the leftover."""
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from hycache.engine.tiers.codec import Codec\n"
        "from hycache.engine.tiers.disk import DiskTier\n"
        "from tests.engine.tiers.test_backends import IDENTITY, obj\n"
        "disk = DiskTier(Path(sys.argv[1]), 1 << 20, Codec(IDENTITY))\n"
        "disk.stage(Codec(IDENTITY).encode(obj(1)))\n"
        "print('staged', flush=True)\n"
        "time.sleep(60)\n"
    )
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    child = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"staged"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    assert list(tmp_path.glob(".tmp-*"))
    reader = DiskTier(tmp_path, 1 << 20, Codec(IDENTITY))
    assert reader.get([obj(1).key]) == [None] and not list(tmp_path.glob(".tmp-*"))


def test_disk_needs_a_writable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="cannot create"):
        DiskTier(blocker / "sub", 1 << 20, Codec(IDENTITY))


# ---------------------------------------------------------------------- Redis
def test_redis_round_trip_corruption_and_ttl(redis_server: Callable[..., RedisServer]) -> None:
    import redis

    server = redis_server()
    tier = RedisTier(server.url, Codec(IDENTITY), prefix="t", ttl_s=100)
    assert tier.put([obj(1), obj(2)]) == 2 and tier.put([obj(1)]) == 0  # immutable: NX
    assert same(tier.get([obj(1).key])[0], obj(1))
    client = redis.Redis.from_url(server.url)
    key = tier.redis_key(obj(2).key)
    assert 0 < client.ttl(key) <= 100
    client.setrange(key, client.strlen(key) - 1, b"\x00")
    assert tier.get([obj(2).key]) == [None] and tier.counters.invalid == 1
    assert not client.exists(key)


def test_redis_writer_killed_mid_write_leaves_nothing(
    redis_server: Callable[..., RedisServer],
) -> None:
    """A writer that sent MULTI and a whole SET, and half of another, then died: neither
    key exists (the transaction never ran; a torn command never executes)."""
    server = redis_server()
    tier = RedisTier(server.url, Codec(IDENTITY), prefix="t")
    blobs = [Codec(IDENTITY).encode(obj(i)) for i in (1, 2)]
    keys = [tier.redis_key(obj(i).key).encode() for i in (1, 2)]

    def command(*parts: bytes) -> bytes:
        out = b"*%d\r\n" % len(parts)
        for p in parts:
            out += b"$%d\r\n%s\r\n" % (len(p), p)
        return out

    with socket.create_connection(("127.0.0.1", server.port)) as s:
        s.sendall(command(b"MULTI") + command(b"SET", keys[0], blobs[0]))
        torn = command(b"SET", keys[1], blobs[1])
        s.sendall(torn[: len(torn) // 2])
        time.sleep(0.1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    time.sleep(0.1)
    assert tier.get([obj(1).key, obj(2).key]) == [None, None]
    assert tier.counters.invalid == 0


def test_redis_unreachable_is_a_config_error() -> None:
    from tests.redis_server import free_port

    with pytest.raises(ConfigError, match="cannot reach"):
        RedisTier(f"redis://127.0.0.1:{free_port()}", Codec(IDENTITY), timeout_s=0.2)
