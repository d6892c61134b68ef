"""Conformance scenarios (DESIGN.md section 4) on the real tree and on the reference model.

Every scenario in ``tests/conformance/`` and in the shared examples must load and pass on
both :class:`TreeTarget` and :class:`ReferenceCache`; a wrong expectation must be reported
as a Mismatch naming the scenario, step, expected and actual; malformed files must raise
ScenarioError naming the file and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hycache.conformance.reference import ReferenceCache
from hycache.conformance.scenario import Mismatch, TargetFactory, load_scenario, run_scenario
from hycache.conformance.tree_target import TreeTarget
from hycache.errors import ScenarioError

OWN_DIR = Path(__file__).resolve().parents[2] / "data" / "conformance" / "own"
SHARED_DIR = Path(__file__).resolve().parents[2] / "data" / "conformance" / "public"

OWN_FILES = sorted(OWN_DIR.glob("*.json"))
SHARED_FILES = sorted(SHARED_DIR.glob("*.json")) if SHARED_DIR.is_dir() else []
OWN_TIER_FILES = sorted((OWN_DIR / "tiers").glob("*.json"))
SHARED_TIER_FILES = sorted((SHARED_DIR / "tiers").glob("*.json"))
ALL_FILES = OWN_FILES + SHARED_FILES + OWN_TIER_FILES + SHARED_TIER_FILES

TARGETS: dict[str, TargetFactory] = {"tree": TreeTarget, "reference": ReferenceCache}


def _file_id(path: Path) -> str:
    origin = "own" if OWN_DIR in (path.parent, path.parent.parent) else "shared"
    tiers = "tiers/" if path.parent.name == "tiers" else ""
    return f"{origin}/{tiers}{path.stem}"


# ---------------------------------------------------------------------- every scenario passes
@pytest.mark.parametrize("target", sorted(TARGETS))
@pytest.mark.parametrize("path", ALL_FILES, ids=[_file_id(p) for p in ALL_FILES])
def test_scenario_passes(path: Path, target: str) -> None:
    scenario = load_scenario(path)
    assert scenario.name, f"{path} has an empty name"
    outcome = run_scenario(scenario, TARGETS[target])
    assert outcome.passed, outcome.mismatch.describe() if outcome.mismatch else ""
    assert outcome.matches_checked > 0, f"{path} checks no match"


def test_enough_own_scenarios() -> None:
    assert len(OWN_FILES) >= 25, f"only {len(OWN_FILES)} scenarios in {OWN_DIR}"


def test_enough_own_tier_scenarios() -> None:
    assert len(OWN_TIER_FILES) >= 15, f"only {len(OWN_TIER_FILES)} tier scenarios"
    assert len(SHARED_TIER_FILES) >= 3


def test_shared_examples_found() -> None:
    assert SHARED_FILES, f"no shared examples found in {SHARED_DIR}"


def test_own_scenario_names_are_unique() -> None:
    names = [load_scenario(p).name for p in OWN_FILES]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------------- mismatches
def _write(tmp_path: Path, obj: Any, name: str = "scenario.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj, indent=1), encoding="utf-8")
    return path


def _scenario(steps: list[dict[str, Any]], **overrides: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": "probe",
        "page_size": 1,
        "groups": [{"kind": "full"}, {"kind": "recurrent"}],
        "steps": steps,
    }
    obj.update(overrides)
    return obj


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_wrong_expectation_is_a_mismatch(tmp_path: Path, target: str) -> None:
    steps = [
        {"insert": [1, 2, 3, 4, 5, 6], "states_at": [3]},
        {"match": [1, 2, 3, 4, 5, 6], "hit": 3, "kv_hit": 6},  # right
        {"match": [1, 2, 3, 4, 5, 6], "hit": 6, "kv_hit": 6},  # wrong: no state at 6
        {"match": [1, 2, 3], "hit": 3, "kv_hit": 3},  # never reached
    ]
    path = _write(tmp_path, _scenario(steps, name="deliberately wrong"))
    outcome = run_scenario(load_scenario(path), TARGETS[target])
    assert not outcome.passed
    mismatch = outcome.mismatch
    assert isinstance(mismatch, Mismatch)
    assert mismatch.scenario == "deliberately wrong"
    assert mismatch.path == str(path)
    assert mismatch.step == 2
    assert mismatch.tokens == (1, 2, 3, 4, 5, 6)
    assert mismatch.expected == (6, 6)
    assert mismatch.actual == (3, 6)
    assert outcome.matches_checked == 2
    text = mismatch.describe()
    assert "deliberately wrong" in text
    assert "step 2" in text
    assert "expected hit=6 kv_hit=6" in text
    assert "actual   hit=3 kv_hit=6" in text


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_wrong_kv_hit_is_a_mismatch(tmp_path: Path, target: str) -> None:
    steps = [
        {"insert": [1, 2, 3, 4, 5, 6, 7, 8]},
        {"drop": "full", "tokens": [1, 2, 3, 4, 5, 6, 7, 8], "from": 4},
        {"match": [1, 2, 3, 4, 5, 6, 7, 8], "hit": 0, "kv_hit": 8},
    ]
    obj = _scenario(steps, name="stale kv", page_size=2, groups=[{"kind": "full"}])
    outcome = run_scenario(load_scenario(_write(tmp_path, obj)), TARGETS[target])
    assert outcome.mismatch is not None
    assert (outcome.mismatch.step, outcome.mismatch.expected) == (2, (0, 8))
    assert outcome.mismatch.actual == (4, 4)


# ---------------------------------------------------------------------- malformed files
def _load_error(path: Path) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    error = info.value
    assert error.path == str(path)
    assert str(path) in str(error)
    assert error.reason
    return error


def test_bad_json_reports_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(
        '{\n "name": "x",\n "page_size": 1,\n "groups": [{"kind": "full"}],\n'
        ' "steps": [\n  {"insert": [1, 2,]}\n ]\n}\n',
        encoding="utf-8",
    )
    error = _load_error(path)
    assert error.line == 6
    assert f"{path}:6" in str(error)
    assert "JSON" in error.reason


def test_unknown_top_level_key(tmp_path: Path) -> None:
    obj = _scenario([{"insert": [1, 2]}], comment="not allowed")
    error = _load_error(_write(tmp_path, obj))
    assert "comment" in error.reason
    assert "unknown" in error.reason


def test_unknown_step_key(tmp_path: Path) -> None:
    steps = [{"insert": [1, 2]}, {"match": [1, 2], "hit": 0, "kv_hit": 2, "hits": 1}]
    error = _load_error(_write(tmp_path, _scenario(steps)))
    assert "steps[1]" in error.reason
    assert "hits" in error.reason
    assert "unknown" in error.reason


def test_unaligned_states_at(tmp_path: Path) -> None:
    steps = [{"insert": [1, 2, 3, 4, 5, 6, 7, 8], "states_at": [4, 6]}]
    error = _load_error(_write(tmp_path, _scenario(steps, page_size=4)))
    assert "steps[0].states_at[1]" in error.reason
    assert "page_size" in error.reason


def test_unaligned_drop_range(tmp_path: Path) -> None:
    tokens = [1, 2, 3, 4, 5, 6, 7, 8]
    steps = [{"insert": tokens}, {"drop": "swa", "tokens": tokens, "range": [4, 6]}]
    obj = _scenario(steps, page_size=4, groups=[{"kind": "full"}, {"kind": "swa", "window": 4}])
    error = _load_error(_write(tmp_path, obj))
    assert "steps[1].range" in error.reason
    assert "page_size" in error.reason


def test_unaligned_drop_from(tmp_path: Path) -> None:
    tokens = [1, 2, 3, 4]
    steps = [{"insert": tokens}, {"drop": "full", "tokens": tokens, "from": 1}]
    error = _load_error(_write(tmp_path, _scenario(steps, page_size=2)))
    assert "steps[1].from" in error.reason


def test_swa_group_without_window(tmp_path: Path) -> None:
    obj = _scenario([{"insert": [1, 2]}], groups=[{"kind": "full"}, {"kind": "swa"}])
    error = _load_error(_write(tmp_path, obj))
    assert "groups[1]" in error.reason
    assert "window" in error.reason


def test_drop_of_kind_not_in_groups(tmp_path: Path) -> None:
    tokens = [1, 2, 3, 4]
    steps = [{"insert": tokens}, {"drop": "swa", "tokens": tokens, "range": [0, 2]}]
    error = _load_error(_write(tmp_path, _scenario(steps)))
    assert "steps[1]" in error.reason
    assert "swa" in error.reason


def test_states_at_without_recurrent_group(tmp_path: Path) -> None:
    steps = [{"insert": [1, 2, 3, 4], "states_at": [2]}]
    obj = _scenario(steps, groups=[{"kind": "full"}, {"kind": "swa", "window": 2}])
    error = _load_error(_write(tmp_path, obj))
    assert "states_at" in error.reason
    assert "recurrent" in error.reason


@pytest.mark.parametrize(
    ("page_size", "tokens", "state"),
    [
        (1, [1, 2, 3, 4], 5),  # beyond the inserted length
        (4, [1, 2, 3, 4, 5, 6], 8),  # beyond the cached length (6 rounds down to 4)
    ],
)
def test_states_at_beyond_cached_length(
    tmp_path: Path, page_size: int, tokens: list[int], state: int
) -> None:
    steps = [{"insert": tokens, "states_at": [state]}]
    error = _load_error(_write(tmp_path, _scenario(steps, page_size=page_size)))
    assert "steps[0].states_at[0]" in error.reason
    assert str(state) in error.reason


def test_states_at_zero_is_rejected(tmp_path: Path) -> None:
    steps = [{"insert": [1, 2, 3, 4], "states_at": [0]}]
    error = _load_error(_write(tmp_path, _scenario(steps)))
    assert "states_at[0]" in error.reason


def test_malformed_files_are_not_run(tmp_path: Path) -> None:
    """A malformed step late in the file is reported at load time, before anything runs."""
    steps = [
        {"insert": [1, 2, 3, 4], "states_at": [4]},
        {"match": [1, 2, 3, 4], "hit": 4, "kv_hit": 4},
        {"drop": "recurrent", "tokens": [1, 2, 3, 4], "at": 4, "extra": True},
    ]
    error = _load_error(_write(tmp_path, _scenario(steps)))
    assert "steps[2]" in error.reason
    assert "extra" in error.reason


@pytest.mark.parametrize(
    ("slide", "where"),
    [
        ({"from": 2}, "steps[0].slide.from"),  # not a multiple of page_size 4
        ({"start": 0}, "steps[0].slide"),  # unknown key
        ("yes", "steps[0].slide"),
    ],
)
def test_malformed_slide(tmp_path: Path, slide: object, where: str) -> None:
    obj = _scenario(
        [{"insert": [1, 2, 3, 4, 5, 6, 7, 8], "slide": slide}],
        page_size=4,
        groups=[{"kind": "full"}, {"kind": "swa", "window": 4}],
    )
    error = _load_error(_write(tmp_path, obj))
    assert where in error.reason
