"""benchmarks/sharegpt_samples.py on tiny chat traces: the columns, the bars, bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.scripts import load_script


def _load() -> ModuleType:
    load_script("marconi_reference")  # the script imports it
    return load_script("sharegpt_samples")


def _tiny_trace(path: Path, sessions: int, rate: float) -> None:
    trace_mod = load_script("sharegpt_trace")
    conversations = [
        [trace_mod.Message("human" if m % 2 == 0 else "gpt", f"s{s} m{m} " * 40) for m in range(8)]
        for s in range(sessions)
    ]

    def tokenize(text: str) -> list[int]:  # a stand-in: one id per character
        return [1, *(ord(c) % 32000 for c in text)]

    trace_mod.write(trace_mod.build(conversations, rate, tokenize), path)


def test_every_sample_gets_every_column_and_the_bars_count_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HYCACHE_CACHE_DIR", str(tmp_path / "cache"))
    samples = _load()
    for seed, sessions in ((1, 5), (2, 7)):
        _tiny_trace(tmp_path / f"seed{seed}_sps2.jsonl", sessions, 2.0)
    out = tmp_path / "out.json"
    samples.main(
        [
            *("--seeds", "1-2", "--rates", "2", "--capacities", "400MB", "--jobs", "1"),
            *("--trace-dir", str(tmp_path), "--variant", "flat:aging_horizon=0"),
            *("--json", str(out)),
        ]
    )
    rows = json.loads(out.read_text())
    assert [(r["seed"], r["rate"], r["capacity"]) for r in rows] == [
        (1, 2.0, 400 * 10**6),
        (2, 2.0, 400 * 10**6),
    ]
    columns = {"vllm", "sglang", "marconi", "marconi-oracle", "hycache", "flat"}
    assert all(set(r["hits"]) == columns for r in rows)
    assert all(0.0 <= h <= 1.0 for r in rows for h in r["hits"].values())
    at_all = sum(
        r["hits"]["hycache"] >= max(r["hits"][p] for p in ("vllm", "sglang", "marconi"))
        for r in rows
    )
    at_orc = sum(r["hits"]["hycache"] >= r["hits"]["marconi-oracle"] for r in rows)
    text = capsys.readouterr().out
    assert f"hycache: >= every preset in {at_all} of 2, >= the oracle in {at_orc} of 2" in text
    mean = 100 * sum(r["hits"]["vllm"] for r in rows) / 2
    assert f"{mean:.2f}" in text.splitlines()[1]


def test_a_missing_trace_is_built_where_it_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tiny_trace(tmp_path / "seed3_sps1.jsonl", 2, 1.0)
    samples = _load()
    trace_mod = load_script("sharegpt_trace")  # the module the script imports to build
    asked: list[list[str]] = []
    monkeypatch.setattr(trace_mod, "main", lambda argv: asked.append(list(argv)))
    found = samples.ensure_traces([3, 4], [1.0], tmp_path, tune=True)
    assert [(s.seed, s.rate, s.path.name) for s in found] == [
        (3, 1.0, "seed3_sps1.jsonl"),
        (4, 1.0, "seed4_sps1.jsonl"),
    ]
    assert asked == [
        [
            *("--sessions-per-s", "1", "--sessions", "100", "--seed", "4"),
            *("--first", "0", "--stop", "5000", "--out", str(tmp_path / "seed4_sps1.jsonl")),
        ]
    ]


def test_seeds_and_variants_are_parsed_or_refused() -> None:
    samples = _load()
    assert samples.parse_seeds("0,3-5,4") == [0, 3, 4, 5]
    for bad in ("5-3", "x", "-1", "1,,2"):
        with pytest.raises(argparse.ArgumentTypeError):
            samples.parse_seeds(bad)
    assert samples.parse_variant("chance:reason_weight=chance") == (
        "chance",
        {"reason_weight": "chance"},
    )
    for bad in ("chance", "chance:", ":reason_weight=chance", "x:no_such_knob=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            samples.parse_variant(bad)


def test_bad_options_stop_before_any_replay(tmp_path: Path) -> None:
    samples = _load()
    base = ["--seeds", "1", "--trace-dir", str(tmp_path)]
    for extra in (
        ["--rates", "0"],
        ["--rates", "a"],
        ["--jobs", "0"],
        ["--variant", "hycache:exponent=1"],
        ["--variant", "a:exponent=1", "--variant", "a:exponent=2"],
    ):
        with pytest.raises(SystemExit):
            samples.main(base + extra)
    assert list(tmp_path.iterdir()) == []  # nothing built
