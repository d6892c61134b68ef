"""`hycache conformance` exit codes and messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hycache.cli.main import main

SHARED = Path(__file__).resolve().parents[2] / "data" / "conformance" / "public"


def _write(path: Path, scenario: dict[str, object]) -> str:
    path.write_text(json.dumps(scenario))
    return str(path)


def test_shared_scenarios_pass(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in SHARED.glob("*.json"))
    assert files, "data/conformance/public is missing"
    assert main(["conformance", *files]) == 0
    out = capsys.readouterr().out
    assert "PASS" in out and f"{len(files)} passed, 0 failed" in out


def test_wrong_expectation_exits_1_with_a_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "name": "wrong on purpose",
        "page_size": 1,
        "groups": [{"kind": "full"}, {"kind": "recurrent"}],
        "steps": [
            {"insert": [1, 2, 3, 4], "states_at": [2]},
            {"match": [1, 2, 3, 4], "hit": 4, "kv_hit": 4},
        ],
    }
    assert main(["conformance", _write(tmp_path / "w.json", scenario)]) == 1
    captured = capsys.readouterr()
    assert "FAIL" in captured.out
    assert "'wrong on purpose'" in captured.err and "step 1" in captured.err
    assert "expected hit=4 kv_hit=4" in captured.err
    assert "actual   hit=2 kv_hit=4" in captured.err


def test_malformed_exits_2_naming_file_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(
        '{"name": "x",\n "page_size": 2,\n "groups": [{"kind": "full"}],\n'
        ' "steps": [{"insert": [1, 2, 3], "states_at": [3]}]}'
    )
    assert main(["conformance", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "states_at[0]" in err and "page_size 2" in err


def test_malformed_file_is_reported_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = sorted(str(p) for p in SHARED.glob("*.json"))[0]
    broken = tmp_path / "broken.json"
    broken.write_text('{\n  "name": "x",\n  oops\n}')
    assert main(["conformance", good, str(broken)]) == 2
    captured = capsys.readouterr()
    assert f"{broken}:3" in captured.err and "PASS" not in captured.out


def test_no_file_runs_the_bundled_scenarios(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(SHARED.parents[2])
    assert main(["conformance"]) == 0
    patterns = ("public/*.json", "own/*.json", "public/tiers/*.json", "own/tiers/*.json")
    bundled = sum(len(list(SHARED.parent.glob(p))) for p in patterns)
    assert f"{bundled} passed, 0 failed" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["conformance"]) == 2
    assert "no FILE given and no scenarios in data/conformance/public/" in capsys.readouterr().err


def test_usage_errors_return_2_and_help_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["nonsense"]) == 2
    assert "invalid choice: 'nonsense'" in capsys.readouterr().err
    assert main(["simulate", "--help"]) == 0
    assert "data/traces/mooncake_conversation.jsonl.gz" in capsys.readouterr().out
