"""Numbers derived from a trace, kept beside its parsed arrays for this build of the code."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hycache.cli.main import main
from hycache.sim import trace_cache
from hycache.sim.trace_cache import cached_derived, code_fingerprint

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def _counted(value: int) -> tuple[list[int], Callable[[], int]]:
    calls: list[int] = []

    def compute() -> int:
        calls.append(1)
        return value

    return calls, compute


def test_derived_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"x": 1}\n')
    cache = tmp_path / "cache"
    calls, compute = _counted(42)
    assert cached_derived(trace, "k", compute, cache_dir=cache) == 42
    assert cached_derived(trace, "k", compute, cache_dir=cache) == 42
    assert len(calls) == 1
    # another key, another limit, another file content: derived again
    cached_derived(trace, "other", compute, cache_dir=cache)
    cached_derived(trace, "k", compute, cache_dir=cache, limit=1)
    trace.write_text('{"x": 2}\n')
    cached_derived(trace, "k", compute, cache_dir=cache)
    assert len(calls) == 4
    # another build of the code: derived again, never read
    monkeypatch.setattr(trace_cache, "code_fingerprint", lambda: "another build")
    cached_derived(trace, "k", compute, cache_dir=cache)
    assert len(calls) == 5


def test_damaged_or_unwritable_cache_still_gives_the_value(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"x": 1}\n')
    cache = tmp_path / "cache"
    calls, compute = _counted(7)
    cached_derived(trace, "k", compute, cache_dir=cache)
    [stored] = cache.glob("*.derived.json")
    assert json.loads(stored.read_text())["code"] == code_fingerprint()
    for damage in (
        "not json",
        "[1, 2]",
        json.dumps({"code": code_fingerprint(), "values": {"k": "7"}}),
    ):
        stored.write_text(damage)
        assert cached_derived(trace, "k", compute, cache_dir=cache) == 7
    assert len(calls) == 4
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    assert cached_derived(trace, "k", compute, cache_dir=blocked) == 7


def test_simulate_reads_the_footprint_it_derived_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hycache.cli import sim

    calls: list[int] = []
    real = sim.footprint_bytes

    def counted(*args: object) -> int:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(sim, "footprint_bytes", counted)
    argv = [
        "simulate",
        "--trace",
        str(TRACES / "mooncake_synthetic.jsonl.gz"),
        "--requests",
        "60",
        "--model",
        "qwen3-next-80b-a3b",
        "--capacity",
        "20%",
        "--policy",
        "vllm",
        "--jobs",
        "1",
    ]
    outputs = []
    for _ in range(2):
        assert main(argv) == 0
        outputs.append(capsys.readouterr().out)
    assert len(calls) == 1
    assert "footprint" in outputs[0]
    strip = [out.rsplit(" ", 1)[0] for out in outputs[0].splitlines()]  # wall_s column last
    assert strip == [out.rsplit(" ", 1)[0] for out in outputs[1].splitlines()]
    assert main([*argv, "--trace-cache", "none"]) == 0  # no cache: derived again
    assert len(calls) == 2
