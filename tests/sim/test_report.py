"""The HTML report: one plotly figure per plot, the TTFT CDF in engine mode only, the
infinite-cache bound drawn; the bound itself bounds every preset."""

from __future__ import annotations

import re
from functools import cache

import pytest

from hycache.sim.cost import CostModel
from hycache.sim.hardware import hardware
from hycache.sim.metrics import PolicyResult
from hycache.sim.report import render_html
from hycache.sim.simulate import SimulationConfig, footprint_bytes, infinite_hit_rate, simulate
from hycache.sim.workloads import generate
from hycache.spec.model import load_spec

POLICIES = ["vllm", "sglang", "marconi", "hycache"]


def _config(mode: str = "serial") -> SimulationConfig:
    spec = load_spec("qwen3-next-80b-a3b")
    return SimulationConfig(
        spec, CostModel(spec, hardware("h200")), mode=mode, reject_oversized=True, progress=False
    )


def _source():  # type: ignore[no-untyped-def]
    return generate("chat", requests=40, seed=0)


@cache
def _sweep(mode: str) -> dict[int, dict[str, PolicyResult]]:
    footprint = footprint_bytes(_config(), _source)
    return {
        int(footprint * share): simulate(_config(mode), _source, int(footprint * share), POLICIES)
        for share in (0.1, 0.4)
    }


def _figure_ids(page: str) -> list[str]:
    return re.findall(r'<div id="([\w-]+)" class="plotly-graph-div"', page)


def test_serial_report_has_three_figures_and_no_ttft_cdf() -> None:
    page = render_html("t", _sweep("serial"), ["a note"], bound=0.5)
    assert page.startswith("<!doctype html>") and "a note" in page
    assert _figure_ids(page) == ["hit-rate", "bytes-held", "evictions"]
    assert "infinite cache (bound): 50.0%" in page
    assert page.count("<pre>") == 2  # one table per capacity
    # plotly.js inline once: the page works offline
    assert page.count("<script type='text/javascript'>") == 1 and "https://cdn" not in page[:300]


def test_engine_report_adds_the_ttft_cdf() -> None:
    page = render_html("t", _sweep("engine"))
    assert _figure_ids(page) == ["hit-rate", "ttft-cdf", "bytes-held", "evictions"]
    assert "infinite cache (bound)" not in page  # no bound given, none drawn


def test_infinite_hit_rate_bounds_every_preset() -> None:
    bound = infinite_hit_rate(_config(), _source)
    assert 0.0 < bound < 1.0
    for results in _sweep("serial").values():
        for r in results.values():
            assert r.token_hit_rate <= r.kv_hit_rate <= bound + 1e-12
    # with the whole footprint the best preset reaches the bound's neighbourhood
    footprint = footprint_bytes(_config(), _source)
    best = max(r.token_hit_rate for r in simulate(_config(), _source, footprint, POLICIES).values())
    assert best == pytest.approx(bound, abs=0.01)
