"""Sweep cells (one preset at one capacity each): serial, and on Ray with the same tables."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from hycache.cli.main import main
from hycache.errors import ConfigError
from hycache.sim.cells import Cell, Parallel, run_cells
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig, simulate
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

TRACE = Path(__file__).resolve().parents[2] / "data" / "traces" / "mooncake_conversation.jsonl.gz"
POLICIES = ["vllm", "sglang", "marconi", "hycache"]


def _config() -> SimulationConfig:
    spec = load_spec("qwen3-next-80b-a3b")
    return SimulationConfig(spec, CostModel(spec, hardware("h200")), reject_oversized=True)


def test_serial_cells_are_simulate_per_capacity() -> None:
    config = _config()

    def source():  # type: ignore[no-untyped-def]
        return generate("chat", requests=40, seed=0)

    capacities = [2 * 10**9, 4 * 10**9]
    cells = [Cell(c, p) for c in capacities for p in POLICIES]
    got = run_cells(config, source, cells)
    assert list(got) == cells
    for capacity in capacities:
        expected = simulate(config, source, capacity, POLICIES)
        for policy in POLICIES:
            assert dataclasses.replace(got[Cell(capacity, policy)], wall_s=0.0) == (
                dataclasses.replace(expected[policy], wall_s=0.0)
            )
    with pytest.raises(ConfigError, match="same cell twice"):
        run_cells(config, source, [cells[0], cells[0]])


def test_parallel_without_ray_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ConfigError, match=r"needs Ray: pip install 'hycache\[ray\]'"):
        run_cells(_config(), lambda: [], [Cell(1, "vllm")], parallel=Parallel())


def _masked(text: str) -> str:
    """The printed tables without the wall-time column (the only one that may differ)."""
    return re.sub(r" +[0-9.]+$", "", text, flags=re.MULTILINE).replace("  wall_s", "")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the 'ray' extra")
def test_parallel_and_serial_runs_print_identical_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "--trace", str(TRACE), "--requests", "200"]
    args += ["--model", "qwen3-next-80b-a3b", "--capacities", "5%,20%"]
    outputs = {}
    try:
        for run, extra in (("serial", []), ("ray", ["--parallel"])):
            out = tmp_path / f"{run}.json"
            assert main([*args, *extra, "--json", str(out)]) == 0
            outputs[run] = (capsys.readouterr().out, json.loads(out.read_text()))
    finally:
        import ray

        ray.shutdown()
    (serial_text, serial_json), (ray_text, ray_json) = outputs["serial"], outputs["ray"]
    assert _masked(serial_text) == _masked(ray_text)
    assert _masked(serial_text).count("\nhycache ") == 2  # a table per capacity
    for data in (serial_json, ray_json):
        for capacity in data["capacities"].values():
            for result in capacity["policies"].values():
                result.pop("wall_s")
    assert serial_json == ray_json
