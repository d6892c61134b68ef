"""Capacities checked against the smallest request before a simulation runs."""

from __future__ import annotations

import pytest

from hycache.cli.fit import check_capacities, holds, resolve, smallest_capacity, smallest_request
from hycache.cli.sizes import parse_size_or_percent
from hycache.errors import CapacityError, ConfigError
from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.simulate import SimulationConfig
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec


@pytest.fixture(scope="module")
def config() -> SimulationConfig:
    spec = load_spec("qwen3-next-80b-a3b")
    return SimulationConfig(spec, CostModel(spec, hardware("h200")))


def test_the_smallest_capacity_is_exact(config: SimulationConfig) -> None:
    requests = list(generate("agent", requests=5, seed=0))
    small = smallest_request(requests)
    assert small is not None
    assert all(small.prompt_len + small.output_len <= r.prompt_len + r.output_len for r in requests)
    for policy in ("vllm", "sglang", "marconi", "hycache"):
        need = smallest_capacity(config, policy, small, 1)
        assert need is not None
        assert holds(config, policy, need, small) and not holds(config, policy, need - 1, small)


def test_check_names_each_refused_capacity(config: SimulationConfig) -> None:
    sizes = [parse_size_or_percent(t) for t in ("1%", "100GB", "50MB")]
    capacities = resolve(sizes, 10**9)
    requests = list(generate("agent", requests=5, seed=0))
    with pytest.raises(CapacityError) as caught:
        check_capacities(config, requests, capacities, ["marconi"], "agent")
    lines = str(caught.value).splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("capacity 1% (10.00 MB of the 1.00 GB footprint) cannot hold")
    assert lines[1].startswith("capacity 50MB (50000000 B) cannot hold")
    assert all("marconi needs at least 262.82 MB" in line for line in lines)
    check_capacities(config, requests, capacities[1:2], ["marconi"], "agent")
    with pytest.raises(ConfigError, match="no requests"):
        check_capacities(config, [], capacities, ["marconi"], "empty")
