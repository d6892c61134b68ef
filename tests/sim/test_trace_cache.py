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


def test_builds_used_in_turn_each_read_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"x": 1}\n')
    cache = tmp_path / "cache"
    calls: list[str] = []

    def derive_as(build: str) -> int:
        monkeypatch.setattr(trace_cache, "code_fingerprint", lambda: build)

        def compute() -> int:
            calls.append(build)
            return len(build)

        return cached_derived(trace, "k", compute, cache_dir=cache)

    builds = [f"build {i}" * (i + 1) for i in range(trace_cache.KEEP_BUILDS)]
    for _ in range(3):
        for build in builds:
            assert derive_as(build) == len(build)
    assert calls == builds  # each derived once, then read in turn
    # one build more: the least recent writer (builds[0]) is forgotten, the others kept
    derive_as("one more")
    for build in builds[1:]:
        derive_as(build)
    assert calls == [*builds, "one more"]
    derive_as(builds[0])
    assert calls == [*builds, "one more", builds[0]]
    [stored] = cache.glob("*.derived.json")
    assert len(json.loads(stored.read_text())["builds"]) == trace_cache.KEEP_BUILDS


def test_damaged_or_unwritable_cache_still_gives_the_value(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"x": 1}\n')
    cache = tmp_path / "cache"
    calls, compute = _counted(7)
    cached_derived(trace, "k", compute, cache_dir=cache)
    [stored] = cache.glob("*.derived.json")
    assert json.loads(stored.read_text())["builds"][0]["code"] == code_fingerprint()
    for damage in (
        "not json",
        "[1, 2]",
        json.dumps({"builds": [{"code": code_fingerprint(), "values": {"k": "7"}}]}),
        json.dumps({"builds": [["not", "an", "entry"], {"code": 3, "values": {"k": 7}}]}),
        json.dumps({"builds": {"code": code_fingerprint()}}),
        json.dumps({"code": code_fingerprint(), "values": {"k": 7}}),  # the earlier layout
    ):
        stored.write_text(damage)
        assert cached_derived(trace, "k", compute, cache_dir=cache) == 7
    assert len(calls) == 7
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
