"""``hycache verify --tiers``: the tiers line, two instances on one store, the store faults
the checksum catches, and bad input (exit 2 before any model is built)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hycache.cli.main import main
from tests.redis_server import RedisServer, free_port

BASE = ["verify", "--arch", "qwen3_next", "--policy", "hycache", "--requests", "10"]
SMALL = ["--device-capacity", "90KB"]


def test_tiers_line_and_two_instances(
    redis_server: Callable[..., RedisServer], capsys: pytest.CaptureFixture[str]
) -> None:
    server = redis_server()
    tiers = f"host=64KiB,disk=128KiB,redis={server.url}"
    assert main([*BASE, *SMALL, "--tiers", tiers, "--instances", "2"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("tiers: "))
    counts = dict(item.split("=") for item in line.removeprefix("tiers: ").split())
    assert list(counts) == ["device", "host", "disk", "redis"]
    assert int(counts["redis"]) > 0
    second = next(x for x in out.splitlines() if "instance 2:" in x)
    assert "of which 0 from objects" not in second and "PASS" in out


@pytest.mark.parametrize(("inject", "code"), [("corrupt-store", 0), ("no-checksum", 1)])
def test_checksums_turn_damaged_objects_into_misses(
    inject: str, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*BASE, *SMALL, "--tiers", "disk=4MiB", "--inject", inject]
    assert main(argv) == code
    out = capsys.readouterr().out
    fired = next(x for x in out.splitlines() if x.startswith(f"inject {inject}: fired"))
    assert "fired 0 " not in fired


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tiers", "host"], "is not NAME=VALUE"),
        (["--tiers", "gpu=1MB"], "unknown tier 'gpu'"),
        (["--tiers", "host=lots"], "host: size 'lots'"),
        (["--tiers", "redis=localhost:6379"], "not a redis:// URL"),
        (["--tiers", "host=1MB", "--instances", "2"], "share a Redis store"),
        (["--instances", "2"], "need --tiers"),
        (["--inject", "corrupt-store"], "damages stored objects"),
        (["--tiers", "host=1MB", "--inject", "no-checksum"], "damages stored objects"),
        (["--tiers", "redis=redis://127.0.0.1:PORT"], "cannot reach"),
    ],
)
def test_bad_tier_options_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.replace("PORT", str(free_port())) for a in argv]
    assert main([*BASE, *argv]) == 2
    assert message in capsys.readouterr().err
