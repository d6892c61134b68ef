"""`hycache simulate` / `compare` / `tune`: outputs, and clean failures with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hycache.cli.main import main

MODEL = "qwen3-next-80b-a3b"
CHAT_1GB = ["simulate", "--workload", "chat", "--capacity", "1GB"]


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
    assert html.startswith("<!doctype html>")
    # serial mode: hit rate (with the infinite-cache bound), bytes held, evictions; no TTFT CDF
    assert html.count('class="plotly-graph-div"') == 3 and 'id="ttft-cdf"' not in html
    assert "infinite cache (bound)" in html


def test_compare_over_capacities(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare", "--workload", "docqa", "--requests", "30", "--model", MODEL]
    args += [
        "--capacities",
        "20%,2GB",
        "--policy",
        "vllm,hycache",
        "--report",
        str(tmp_path / "c.html"),
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "unlimited footprint" in out and out.count("\ncapacity ") == 2
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
    assert main(["simulate", "--workload", "chat", "--model", MODEL, "--capacity", "lots"]) == 2
    small = ["simulate", "--workload", "agent", "--requests", "5", "--model", MODEL]
    assert main([*small, "--capacity", "1GB", "--set", "vllm.bogus=1"]) == 2
    assert "vllm.bogus" in capsys.readouterr().err
    assert main([*small, "--capacity", "1GB", "--jobs", "0"]) == 2
    assert "--jobs" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_a_capacity_that_holds_no_request_exits_2_before_running(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both subcommands refuse it alike, naming the capacity and the smallest request's need."""
    out = tmp_path / "out.json"
    option = "--capacity" if command == "simulate" else "--capacities"
    argv = [command, "--workload", "agent", "--requests", "5", "--model", MODEL]
    assert main([*argv, option, "100MB", "--policy", "vllm", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "capacity 100MB (100000000 B) cannot hold even the smallest request" in err
    assert "agent-0: 9018 + 68 tokens" in err and "vllm needs at least 268.96 MB" in err
    assert list(tmp_path.iterdir()) == []


def test_percentages_work_in_simulate_as_in_compare(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--workload", "chat", "--requests", "20", "--model", MODEL, "--policy", "hycache"]
    assert main(["simulate", *argv, "--capacity", "20%"]) == 0
    simulated = capsys.readouterr().out
    assert "(20% of the 974.59 MB footprint)" in simulated
    assert main(["compare", *argv, "--capacities", "20%"]) == 0
    compared = capsys.readouterr().out
    assert "capacity 0.19 GB (20% of footprint)" in compared
    rows = [line for line in (simulated + compared).splitlines() if line.startswith("hycache ")]
    assert len(rows) == 2 and rows[0].split()[:5] == rows[1].split()[:5]


def test_requests_that_never_fit_are_counted_in_both(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--workload", "chat", "--requests", "20", "--model", MODEL, "--policy", "vllm"]
    assert main(["simulate", *argv, "--capacity", "10%"]) == 0
    assert "note: vllm: 14 of 20 requests never fit this capacity" in capsys.readouterr().out


def test_a_directory_as_output_exits_2_before_simulating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--workload", "chat", "--requests", "5", "--model", MODEL]
    argv += ["--capacity", "1GB"]
    before = sorted(tmp_path.iterdir())
    assert main([*argv, "--json", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"argument --json: {tmp_path}: is a directory" in captured.err
    assert captured.out == "" and sorted(tmp_path.iterdir()) == before
    assert main([*argv, "--report", str(tmp_path / "missing" / "r.html")]) == 2
    assert "does not exist" in capsys.readouterr().err
    same = str(tmp_path / "r")
    assert main([*argv, "--json", same, "--report", same]) == 2
    assert "name the same file" in capsys.readouterr().err
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tune", "--workload", "chat", "--capacity", "1GB"], "unrecognized arguments"),
        (["tune", "--workload", "chat", "--policy", "vllm"], "unrecognized arguments"),
        (["tune", "--workload", "chat", "--json", "x.json"], "unrecognized arguments"),
        (["simulate", "--trace", "t.jsonl", "--seed", "3", "--capacity", "1GB"], "--seed"),
        (["simulate", "--workload", "chat", "--limit", "3", "--capacity", "1GB"], "--limit"),
        (
            [*CHAT_1GB, "--policy", "hycache", "--set", "vllm.block_size=32"],
            "preset 'vllm' is not run",
        ),
        ([*CHAT_1GB, "--policy", "lru"], "'lru'"),
        ([*CHAT_1GB, "--requests", "0"], ">= 1"),
    ],
)
def test_options_a_subcommand_would_ignore_are_refused(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 10, "hash_ids": [1]}\n')
    argv = [a if a != "t.jsonl" else str(tmp_path / a) for a in argv]
    assert main([*argv, "--model", MODEL]) == 2
    assert message in capsys.readouterr().err


def test_trace_requests_replays_the_first_n(capsys: pytest.CaptureFixture[str]) -> None:
    trace = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_synthetic.jsonl.gz"
    argv = ["simulate", "--trace", str(trace), "--requests", "12", "--model", MODEL]
    assert main([*argv, "--capacity", "40GB", "--policy", "marconi"]) == 0
    out = capsys.readouterr().out
    assert "mooncake_synthetic.jsonl.gz" in out and "marconi" in out


def test_dtype_overrides_a_config_and_is_refused_for_a_named_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt-oss's config.json has no dtype (bfloat16 by default, as transformers loads it);
    ``--dtype float32`` doubles its KV bytes, hence its footprint; a built-in spec keeps its own."""
    config = (
        Path(__file__).resolve().parents[2] / "data" / "configs" / "gpt_oss_20b" / "config.json"
    )
    base = ["simulate", "--workload", "chat", "--requests", "10", "--model", str(config)]
    base += ["--capacity", "50%", "--policy", "hycache"]
    footprints = []
    for extra in ([], ["--dtype", "float32"]):
        assert main([*base, *extra]) == 0
        header = capsys.readouterr().out.split("\n")[0]
        footprints.append(header.split(" footprint")[0].split("of the ")[-1])
    assert footprints[0] != footprints[1]
    named = ["simulate", "--workload", "chat", "--model", MODEL, "--capacity", "1GB"]
    assert main([*named, "--dtype", "float32"]) == 2
    assert "keeps its dtype" in capsys.readouterr().err


def test_reasons_prints_checkpoints_by_reason_and_json_always_has_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reasons`` adds a table per capacity: per preset and checkpoint reason, states
    stored, hits and skipped; the JSON carries the same counts with or without it."""
    out = tmp_path / "r.json"
    args = ["simulate", "--workload", "docqa", "--requests", "60", "--model", MODEL]
    args += ["--capacity", "20%", "--mode", "engine", "--json", str(out)]
    args += ["--policy", "vllm,marconi,hycache"]  # 20% holds no docqa request under sglang
    assert main(args) == 0
    assert "checkpoints by reason" not in capsys.readouterr().out
    plain = json.loads(out.read_text())
    assert main([*args, "--reasons"]) == 0
    text = capsys.readouterr().out
    head = text.index("checkpoints by reason")
    header = text[head:].splitlines()[1].split()
    assert header == ["policy", "reason", "stored", "hits", "hits/stored", "skipped"]
    data = json.loads(out.read_text())
    for name, result in data["policies"].items():
        reasons = result["checkpoint_reasons"]
        assert reasons == plain["policies"][name]["checkpoint_reasons"]
        assert sum(r["inserted"] for r in reasons.values()) == result["states_inserted"]
        for reason, counts in reasons.items():
            assert set(counts) == {"inserted", "hits", "skipped"}
            assert f"\n{name} " in text[head:] and f" {reason} " in text[head:]
    hycache = data["policies"]["hycache"]["checkpoint_reasons"]
    assert sum(r["hits"] for r in hycache.values()) > 0


NUMPY_PROBE = """
import sys
from hycache.cli.main import main
rc = main(sys.argv[1:])
print(rc, "numpy" in sys.modules)
"""


def test_a_trace_run_never_imports_numpy(tmp_path: Path) -> None:
    """A trace run, parse cache cold then warm, keeps the trace in standard-library arrays:
    numpy's import (and the OpenBLAS thread it starts) would be a large share of a short
    run."""
    trace = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_synthetic.jsonl.gz"
    argv = ["simulate", "--trace", str(trace), "--requests", "12", "--model", MODEL]
    argv += ["--capacity", "40%", "--policy", "vllm,hycache", "--jobs", "1"]
    argv += ["--trace-cache", str(tmp_path)]
    for run in ("cold", "warm"):
        done = subprocess.run(
            [sys.executable, "-c", NUMPY_PROBE, *argv],
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        assert done.stdout.split()[-2:] == ["0", "False"], run
        assert len(list(tmp_path.glob("*.trace"))) == 1, run
