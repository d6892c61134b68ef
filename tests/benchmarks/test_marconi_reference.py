"""benchmarks/marconi_reference.py on a tiny chat trace: every column, the oracle, the table."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.benchmarks.scripts import load_script


def test_reference_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HYCACHE_CACHE_DIR", str(tmp_path / "cache"))
    trace_mod = load_script("sharegpt_trace")
    ref = load_script("marconi_reference")
    conversations = [
        [trace_mod.Message("human" if m % 2 == 0 else "gpt", f"s{s} m{m} " * 40) for m in range(8)]
        for s in range(6)
    ]

    def tokenize(text: str) -> list[int]:  # a stand-in: one id per character
        return [1, *(ord(c) % 32000 for c in text)]

    rows = trace_mod.build(conversations, 2.0, tokenize)
    path = tmp_path / "trace.jsonl"
    trace_mod.write(rows, path)
    capacity = 400 * 10**6  # a few sessions' states and KV of marconi-7b: evictions happen
    ours = ref.measure("marconi-7b", str(path), capacity)
    assert set(ours) == {*ref.PRESETS, "marconi-oracle", "marconi@overrun"}
    oracle = ours["marconi-oracle"]
    assert oracle["token_hit_rate"] == max(oracle["by_alpha"].values())
    assert all(0.0 <= cell["token_hit_rate"] <= 1.0 for cell in ours.values())
    assert all(cell["peak_bytes"] <= capacity for p, cell in ours.items() if p != "marconi@overrun")
    art = {
        "vllm": {"token_hit_rate": 0.1, "alpha": 0.0},
        "marconi": {"token_hit_rate": 0.2, "alpha": 0.3, "overrun": 0.05},
    }
    row = {"trace": path.name, "capacity": capacity, "ours": ours, "artifact": art}
    text = ref.table([row])
    assert "art-V2 20.00 (0.3)" in text and "art-vLLM+ 10.00 " in text and "+5.0%" in text
    assert "hycache >=all:" in text and ">=orc:" in text
    found = ref._artifact_cell({f"/x/{path.name}": {"4e8": art}}, str(path), capacity)
    assert found == art
