"""Sweep cells (one preset at one capacity each): serial, in local processes and on Ray, with
the same results."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import pickle
import re
import sys
import time
from pathlib import Path

import pytest

from hycache.cli.main import main
from hycache.errors import CapacityError, ConfigError
from hycache.sim.cells import Cell, Parallel, Processes, run_cells
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


def _without_wall(results: dict[Cell, object]) -> dict[Cell, object]:
    return {cell: dataclasses.replace(r, wall_s=0.0) for cell, r in results.items()}  # type: ignore[type-var]


def test_cells_in_processes_give_the_serial_results_in_order() -> None:
    config = _config()

    def source():  # type: ignore[no-untyped-def]
        return generate("agent", requests=30, seed=1)

    cells = [Cell(c, p) for c in (2 * 10**9, 6 * 10**9) for p in POLICIES]
    serial = run_cells(config, source, cells)
    forked = run_cells(config, source, cells, parallel=Processes(2))
    assert list(forked) == cells
    assert _without_wall(forked) == _without_wall(serial)  # type: ignore[arg-type]
    assert len({r.token_hit_rate for r in serial.values()}) > 1  # the cells differ


def test_a_failing_cell_raises_its_typed_error_in_the_parent() -> None:
    spec = load_spec("qwen3-next-80b-a3b")
    config = SimulationConfig(spec, CostModel(spec, hardware("h200")))  # oversized: an error

    def source():  # type: ignore[no-untyped-def]
        return generate("chat", requests=5, seed=0)

    cells = [Cell(10**6, "vllm"), Cell(10**6, "hycache")]
    with pytest.raises(CapacityError) as serial:
        run_cells(config, source, cells)
    with pytest.raises(CapacityError) as forked:
        run_cells(config, source, cells, parallel=Processes(2))
    assert str(forked.value) == str(serial.value)
    with pytest.raises(ConfigError, match="jobs must be >= 1"):
        Processes(0)


def test_the_first_failing_cell_in_order_raises_whichever_fails_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The serial run stops at the first failing cell: so does the error of a parallel one,
    even when a later cell fails sooner."""
    from hycache.sim import cells as cells_module

    def failing(config, source, cell, total):  # type: ignore[no-untyped-def]
        if cell.policy == "vllm":
            time.sleep(0.5)
        raise CapacityError(f"{cell.policy} failed")

    monkeypatch.setattr(cells_module, "_run_cell", failing)  # inherited by the forked workers
    cells = [Cell(10**9, "vllm"), Cell(10**9, "sglang"), Cell(10**9, "lru")]
    with pytest.raises(CapacityError, match="vllm failed"):
        run_cells(_config(), lambda: iter(()), cells, parallel=Processes(2))


def test_parallel_without_ray_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ConfigError, match=r"needs Ray: pip install 'hycache\[ray\]'"):
        run_cells(_config(), lambda: [], [Cell(1, "vllm")], parallel=Parallel())


def _masked(text: str) -> str:
    """The printed tables without the wall-time column (the only one that may differ)."""
    return re.sub(r" +[0-9.]+$", "", text, flags=re.MULTILINE).replace("  wall_s", "")


def _compare(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run: str, extra: list[str]
) -> tuple[str, object]:
    """``hycache compare`` on the first 200 Mooncake requests: the text and the JSON (wall
    times dropped)."""
    args = ["compare", "--trace", str(TRACE), "--requests", "200"]
    args += ["--model", "qwen3-next-80b-a3b", "--capacities", "5%,20%"]
    out = tmp_path / f"{run}.json"
    assert main([*args, *extra, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    for capacity in data["capacities"].values():
        for result in capacity["policies"].values():
            result.pop("wall_s")
    text = capsys.readouterr().out
    assert _masked(text).count("\nhycache ") == 2  # a table per capacity
    return _masked(text), data


@pytest.mark.slow
def test_local_processes_and_serial_runs_print_identical_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    serial = _compare(tmp_path, capsys, "serial", ["--jobs", "1"])
    assert _compare(tmp_path, capsys, "forked", ["--jobs", "2"]) == serial


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the 'ray' extra")
def test_ray_and_serial_runs_print_identical_tables(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        serial = _compare(tmp_path, capsys, "serial", ["--jobs", "1"])
        assert _compare(tmp_path, capsys, "ray", ["--parallel"]) == serial
    finally:
        import ray

        ray.shutdown()


def test_one_cell_gives_its_bootstrap_the_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep of one cell runs here; its bootstrap replays run in forked workers and the
    result is the serial one."""
    from hycache.sim import simulate as simulate_module

    config = _config()

    def source():  # type: ignore[no-untyped-def]
        return generate("agent", requests=30, seed=1)

    seen: list[str] = []
    real = simulate_module._run_policy

    def recorded(config, preset, capacity, source, total, contest):  # type: ignore[no-untyped-def]
        seen.append(getattr(contest, "__qualname__", ""))
        return real(config, preset, capacity, source, total, contest)

    monkeypatch.setattr(simulate_module, "_run_policy", recorded)
    for policy in ("marconi", "hycache"):
        cell = [Cell(2 * 10**9, policy)]
        serial = run_cells(config, source, cell)
        forked = run_cells(config, source, cell, parallel=Processes(2))
        assert _without_wall(forked) == _without_wall(serial)  # type: ignore[arg-type]
    assert seen == ["in_order", "forked_contest.<locals>.contest"] * 2


def test_a_result_with_checkpoint_reasons_survives_pickling() -> None:
    """Results cross processes with ``--jobs``; their per-reason counts must too (the compiled
    build's frozen dataclasses refuse the default unpickling: ``tests/test_compiled.py``)."""

    def source():  # type: ignore[no-untyped-def]
        return generate("docqa", requests=30, seed=1)

    [result] = run_cells(_config(), source, [Cell(2 * 10**9, "hycache")]).values()
    assert result.reasons and pickle.loads(pickle.dumps(result)) == result
