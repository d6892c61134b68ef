"""Tier scenarios (DESIGN.md section 4b): loading rules, mismatches on ``from`` and
``state_from``, the CLI's exit codes, and the tree's tier bookkeeping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hycache.cli.main import main
from hycache.conformance.reference import ReferenceCache
from hycache.conformance.scenario import TargetFactory, load_scenario, run_scenario
from hycache.conformance.tree_target import TreeTarget
from hycache.errors import CacheUsageError, ScenarioError
from hycache.tree.tiers import holders

TARGETS: dict[str, TargetFactory] = {"tree": TreeTarget, "reference": ReferenceCache}
TOKENS = list(range(1, 9))


def _write(tmp_path: Path, steps: list[dict[str, Any]], **overrides: Any) -> Path:
    obj: dict[str, Any] = {
        "name": "tier probe",
        "page_size": 1,
        "groups": [{"kind": "full"}, {"kind": "recurrent"}],
        "tiers": ["device", "host"],
        "steps": steps,
    }
    obj.update(overrides)
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_wrong_from_is_a_mismatch(tmp_path: Path, target: str) -> None:
    steps: list[dict[str, Any]] = [
        {"insert": TOKENS, "states_at": [8], "tier": "host"},
        {"match": TOKENS, "hit": 8, "kv_hit": 8, "from": {"device": 8}, "state_from": "host"},
    ]
    outcome = run_scenario(load_scenario(_write(tmp_path, steps)), TARGETS[target])
    assert outcome.mismatch is not None
    text = outcome.mismatch.describe()
    assert "expected hit=8 kv_hit=8 from={'device': 8} state_from=host" in text
    assert "actual   hit=8 kv_hit=8 from={'host': 8} state_from=host" in text


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_wrong_state_from_is_a_mismatch(tmp_path: Path, target: str) -> None:
    steps: list[dict[str, Any]] = [
        {"insert": TOKENS, "states_at": [8], "tier": "host"},
        {"match": TOKENS, "hit": 8, "kv_hit": 8, "state_from": None},
    ]
    outcome = run_scenario(load_scenario(_write(tmp_path, steps)), TARGETS[target])
    assert outcome.mismatch is not None
    assert "state_from=host" in outcome.mismatch.describe()


@pytest.mark.parametrize(
    ("steps", "needle"),
    [
        ([{"insert": TOKENS, "tier": "gpu"}], "unknown tier 'gpu'"),
        ([{"drop": "full", "tokens": TOKENS, "from": 0, "tier": "l3"}], "unknown tier 'l3'"),
        ([{"copy": "disk", "from_tier": "device", "tokens": TOKENS}], "unknown tier 'disk'"),
        ([{"copy": "host", "from_tier": "host", "tokens": TOKENS}], "copy onto the tier"),
        (
            [{"copy": "host", "from_tier": "device", "tokens": TOKENS, "components": ["swa"]}],
            "'swa' is not a group",
        ),
        ([{"match": TOKENS, "hit": 0, "kv_hit": 0, "from": {"ssd": 1}}], "unknown tier 'ssd'"),
        ([{"match": TOKENS, "hit": 0, "kv_hit": 0, "state_from": "ssd"}], "unknown tier"),
        ([{"match": TOKENS, "hit": 0, "kv_hit": 0, "tier": "host"}], "unknown key 'tier'"),
        ([{"insert": TOKENS, "slide": True}], "not supported in a scenario with tiers"),
    ],
)
def test_malformed_tier_steps(tmp_path: Path, steps: list[dict[str, Any]], needle: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(_write(tmp_path, steps))
    assert needle in info.value.reason


@pytest.mark.parametrize("tiers", [[], ["device", "device"], "device", [""], [1]])
def test_malformed_tier_list(tmp_path: Path, tiers: object) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(_write(tmp_path, [], tiers=tiers))
    assert "tiers" in info.value.reason


def test_tier_key_without_tiers_names_the_default(tmp_path: Path) -> None:
    path = _write(tmp_path, [{"insert": TOKENS, "tier": "device"}])
    obj = json.loads(path.read_text())
    del obj["tiers"]
    path.write_text(json.dumps(obj))
    assert load_scenario(path).tiers == ("device",)
    obj["steps"] = [{"insert": TOKENS, "tier": "host"}]
    path.write_text(json.dumps(obj))
    with pytest.raises(ScenarioError):
        load_scenario(path)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, [{"insert": TOKENS, "tier": "nvme"}])
    assert main(["conformance", str(bad)]) == 2
    assert "unknown tier 'nvme'" in capsys.readouterr().err
    good: list[dict[str, Any]] = [
        {"insert": TOKENS, "states_at": [4], "tier": "host"},
        {"match": TOKENS, "hit": 4, "kv_hit": 8, "from": {"host": 4}, "state_from": "host"},
    ]
    assert main(["conformance", str(_write(tmp_path, good))]) == 0
    wrong = [good[0], {**good[1], "state_from": "device"}]
    assert main(["conformance", str(_write(tmp_path, wrong))]) == 1


def test_bundled_run_includes_tier_scenarios(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    assert main(["conformance"]) == 0
    out = capsys.readouterr().out
    assert "tiers: the deeper reusable prefix wins across tiers" in out
    assert "tiers: tier names are free strings" in out


def test_tree_tracks_holders_per_component() -> None:
    target = TreeTarget(1, load_scenario_groups(), ("device", "host", "storage"))
    target.insert(TOKENS, [8], tier=2)
    target.copy(TOKENS, 1, 2, ["full"])
    node = target.tree.nodes_on(TOKENS)[-1]
    assert holders(target.tree.tiers, 0, node) == [1, 2]
    assert holders(target.tree.tiers, 1, node) == [2]
    target.drop_full(TOKENS, 0, tier=1)
    assert holders(target.tree.tiers, 0, node) == [2]
    with pytest.raises(CacheUsageError):
        target.insert(TOKENS, tier=3)
    with pytest.raises(CacheUsageError):
        target.copy(TOKENS, 0, 0)


def load_scenario_groups() -> list[Any]:
    from hycache.conformance.reference import GroupConfig

    return [GroupConfig("full"), GroupConfig("recurrent")]
