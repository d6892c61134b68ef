"""`hycache simulate` / `compare` / `tune`: outputs, and clean failures with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hycache.cli.main import main

MODEL = "qwen3-next-80b-a3b"


def test_simulate_writes_json_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, report = tmp_path / "r.json", tmp_path / "r.html"
    args = ["simulate", "--workload", "chat", "--requests", "40", "--model", MODEL]
    args += ["--capacity", "2GB", "--json", str(out), "--report", str(report)]
    args += ["--set", "marconi.alpha=1.0"]
    assert main(args) == 0
    table = capsys.readouterr().out
    for policy in ("vllm", "sglang", "marconi", "hycache"):
        assert f"\n{policy} " in table
    data = json.loads(out.read_text())
    keys = {
        "token_hit_rate",
        "kv_hit_rate",
        "request_hit_rate",
        "recompute_tokens",
        "prefill_flops_saved",
        "ttft_p50_s",
        "ttft_p95_s",
        "peak_bytes",
        "capacity_overrun_bytes",
        "kv_bytes_peak",
        "state_bytes_peak",
        "evictions",
        "wall_s",
    }
    for result in data["policies"].values():
        assert keys <= set(result)
        assert result["capacity_overrun_bytes"] == 0
        assert 0.0 <= result["token_hit_rate"] <= result["kv_hit_rate"] <= 1.0
    html = report.read_text()
    assert html.startswith("<!doctype html>") and html.count("<svg") == 4


def test_compare_over_capacities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--workload", "docqa", "--requests", "30", "--model", MODEL]
    args += [
        "--capacities",
        "10%,2GB",
        "--policy",
        "vllm,hycache",
        "--report",
        str(tmp_path / "c.html"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unlimited footprint" in out and out.count("capacity ") == 2
    assert (tmp_path / "c.html").is_file()


def test_tune_prints_a_recommendation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tune", "--workload", "chat", "--requests", "50", "--model", MODEL]) == 0
    assert "Recommended:" in capsys.readouterr().out


def test_bad_inputs_exit_2_without_partial_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}\n'
        '{"timestamp": 1, "input_length": "x"}\n'
    )
    out = tmp_path / "out.json"
    base = ["simulate", "--model", MODEL, "--capacity", "10GB", "--json", str(out)]
    assert main([*base, "--trace", str(trace)]) == 2
    assert f"{trace}:2" in capsys.readouterr().err and not out.exists()
    assert main(["simulate", "--workload", "chat", "--model", "nope", "--capacity", "1GB"]) == 2
    assert "nope" in capsys.readouterr().err
    small = ["simulate", "--workload", "agent", "--requests", "5", "--model", MODEL]
    assert main([*small, "--capacity", "100MB", "--json", str(out)]) == 2
    assert "can never hold it" in capsys.readouterr().err and not out.exists()
    assert main(["simulate", "--workload", "chat", "--model", MODEL, "--capacity", "lots"]) == 2
    assert main([*small, "--capacity", "1GB", "--set", "vllm.bogus=1"]) == 2
    assert "vllm.bogus" in capsys.readouterr().err
