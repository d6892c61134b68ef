"""The host tier in the simulator: tiers off leaves the results as they were; with a host
tier the JSON reports hits per tier (summing to the reused tokens), bytes moved, no overrun."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hycache.cache.hycache_preset import THRESHOLD_KNOBS
from hycache.cli.main import main
from hycache.sim.metrics import PolicyResult
from tests.cache.test_presets import PLANNER_KNOBS, VALUE_KNOBS

GOLDEN = Path(__file__).parent / "data" / "tiers_off_chat80.json"
ARGS = [
    "simulate",
    "--workload",
    "chat",
    "--requests",
    "80",
    "--model",
    "qwen3-next-80b-a3b",
    "--capacity",
    "40%",
    "--policy",
    "all",
]
#: defaults changed since the golden run was written: free room, keeping the best kind,
#: proven kinds first, no chunk-ending checkpoint in the first grid step (a no-op in this
#: serial run, set for completeness), the dead-tail weight, the tail rule, the learned clock,
#: the clock candidate and the margin, the window that waits for returns
BEFORE_LATER_RULES = [
    *("--set", "hycache.free_room=false"),
    *("--set", "hycache.keep_best=false"),
    *("--set", "hycache.proven_first=false"),
    *("--set", "hycache.skip_first_step=false"),
    *("--set", "hycache.strict_guess_pins=false"),
    *("--set", "hycache.dead_weight=0.1"),
    *("--set", "hycache.tail_quantile=0.9"),
    *("--set", "hycache.learn_aging=false"),
    *("--set", "hycache.tune_clock=false"),
    *("--set", "hycache.tune_margin=0.1"),
    *("--set", "hycache.bootstrap_returns=false"),
]


#: knobs added with the tiers; they only act with tiers, so the golden run predates them
TIER_KNOBS = {
    "offload_states",
    "hicache_write_policy",
    "hicache_fix_33713",
    "hicache_fix_40680",
    "hicache_fix_39851",
}


#: hycache knobs added after the golden run: their defaults leave the results unchanged
LATER_KNOBS = {
    *PLANNER_KNOBS,
    *VALUE_KNOBS,
    *THRESHOLD_KNOBS,
    "keep_best",
    "proven_first",
    "skip_first_step",
    "strict_guess_pins",
    "tail_quantile",
    "tune_clock",
    "bootstrap_causal",
    "bootstrap_settle",
    "bootstrap_returns",
    "tune_lineage",
    "decode_room",
    "reason_weight",
}


def _strip(value: object) -> None:
    if isinstance(value, dict):
        value.pop("wall_s", None)
        value.pop("checkpoint_reasons", None)  # reported since; the golden predates it
        value.pop("tuned", None)  # likewise
        knobs = value.get("knobs")
        if isinstance(knobs, dict):
            for name in TIER_KNOBS | LATER_KNOBS:
                knobs.pop(name, None)
        for inner in value.values():
            _strip(inner)


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    _strip(data)
    return data


def test_tiers_off_results_identical_to_before(tmp_path: Path) -> None:
    """Golden JSON written by the simulator before host tiers existed (wall time left out)."""
    out = tmp_path / "off.json"
    assert main([*ARGS, *BEFORE_LATER_RULES, "--json", str(out)]) == 0
    assert _load(out) == json.loads(GOLDEN.read_text())


FIXES = [
    *("--set", "vllm.offload_states=true"),
    *("--set", "sglang.hicache_fix_33713=true"),
    *("--set", "sglang.hicache_fix_39851=true"),
]


def test_host_tier_json(tmp_path: Path) -> None:
    out = tmp_path / "host.json"
    assert main([*ARGS, "--host-capacity", "20%", *FIXES, "--json", str(out)]) == 0
    data = _load(out)
    golden = json.loads(GOLDEN.read_text())
    [(capacity, entry)] = data["capacities"].items()
    moved_up = 0
    for name, result in entry["policies"].items():
        off = golden["capacities"][capacity]["policies"][name]
        if name == "marconi":  # single-tier: no tier fields, results as without tiers
            assert "tier_hit_tokens" not in result
            assert result["token_hit_rate"] == off["token_hit_rate"]
            continue
        hits = result["tier_hit_tokens"]
        reused = round(result["token_hit_rate"] * result["prompt_tokens"])
        assert set(hits) == {"device", "host"}
        assert hits["device"] + hits["host"] == reused
        assert result["capacity_overrun_bytes"] == 0
        assert set(result["bytes_moved"]) == {"device->host", "host->device"}
        assert result["tier_bytes_peak"]["host"] <= result["tier_budget_bytes"]["host"]
        assert result["token_hit_rate"] >= off["token_hit_rate"] - 1e-9
        moved_up += result["bytes_moved"]["host->device"]
    assert moved_up > 0


def test_tiers_off_json_has_no_tier_fields() -> None:
    fields = PolicyResult.__dataclass_fields__
    assert "tiers" in fields and fields["tiers"].default is None


def test_storage_tier_under_the_host(tmp_path: Path) -> None:
    """A small host with unlimited storage beneath: storage serves hits the host lost, the
    per-tier hits sum to the reused tokens, and no tier overruns."""
    small = tmp_path / "small.json"
    both = tmp_path / "both.json"
    assert main([*ARGS, *FIXES, "--host-capacity", "2%", "--json", str(small)]) == 0
    tiered = [*ARGS, *FIXES, "--host-capacity", "2%", "--storage-capacity", "unlimited"]
    assert main([*tiered, "--json", str(both)]) == 0
    [(capacity, entry)] = _load(both)["capacities"].items()
    alone = _load(small)["capacities"][capacity]["policies"]
    from_storage = 0
    for name, result in entry["policies"].items():
        if name == "marconi":
            continue
        hits = result["tier_hit_tokens"]
        assert set(hits) == {"device", "host", "storage"}
        assert sum(hits.values()) == round(result["token_hit_rate"] * result["prompt_tokens"])
        assert result["capacity_overrun_bytes"] == 0
        assert result["tier_budget_bytes"]["storage"] is None
        assert result["token_hit_rate"] >= alone[name]["token_hit_rate"] - 1e-9
        from_storage += hits["storage"]
    assert from_storage > 0


def test_storage_without_host_is_refused() -> None:
    assert main([*ARGS, "--storage-capacity", "unlimited"]) == 2


def test_sglang_host_state_pool_overruns_the_promise_unless_fixed(tmp_path: Path) -> None:
    """SGLang #39851/#24561 at the simulator level: the host state pool sized like the KV pool
    holds more than the host bytes promised; the fix keeps the promise."""
    overrun = {}
    for fix in ("false", "true"):
        out = tmp_path / f"{fix}.json"
        knobs = [
            "--set",
            "sglang.hicache_fix_33713=true",
            "--set",
            f"sglang.hicache_fix_39851={fix}",
        ]
        args = [*ARGS[:-1], "sglang", "--host-capacity", "20%", *knobs, "--json", str(out)]
        assert main(args) == 0
        [entry] = _load(out)["capacities"].values()
        overrun[fix] = entry["policies"]["sglang"]["capacity_overrun_bytes"]
    assert overrun["false"] > 0 and overrun["true"] == 0


def test_tier_table_in_output_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.html"
    args = [*ARGS, *FIXES, "--host-capacity", "2%", "--storage-capacity", "unlimited"]
    assert main([*args, "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "hit_host" in out and "hit_storage" in out and "GB_storage_down/up" in out
    assert "Tiers: reused tokens by the tier" in report.read_text()
    assert main(ARGS) == 0
    assert "hit_host" not in capsys.readouterr().out
