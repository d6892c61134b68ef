"""The policy matrix heat map: each cell is hycache's hit rate over the best other preset's."""

from __future__ import annotations

import pytest

from hycache.errors import ConfigError
from hycache.sim.heatmap import matrix_figure, matrix_heatmap, ratio_to_best_other

CELLS = {
    ("chat / serial", "5%"): {"vllm": 0.2, "sglang": 0.1, "marconi": 0.25, "hycache": 0.3},
    ("chat / serial", "10%"): {"vllm": 0.4, "sglang": 0.5, "marconi": 0.45, "hycache": 0.45},
    ("docqa / engine", "5%"): {"vllm": 0.0, "sglang": 0.0, "marconi": 0.0, "hycache": 0.0},
}


def test_ratio_to_best_other() -> None:
    assert ratio_to_best_other(CELLS[("chat / serial", "5%")]) == pytest.approx(1.2)
    assert ratio_to_best_other(CELLS[("chat / serial", "10%")]) == pytest.approx(0.9)
    assert ratio_to_best_other(CELLS[("docqa / engine", "5%")]) is None
    with pytest.raises(ConfigError, match="at least one other preset"):
        ratio_to_best_other({"hycache": 0.5})


def test_heatmap_values_are_the_ratios() -> None:
    fig = matrix_figure(CELLS)
    [heat] = fig.data
    assert list(heat.y) == ["chat / serial", "docqa / engine"]
    assert list(heat.x) == ["5%", "10%"]
    z = [list(row) for row in heat.z]
    assert z[0] == pytest.approx([1.2, 0.9])
    assert z[1] == [None, None]  # no ratio, and a cell never measured
    assert [list(row) for row in heat.text] == [["1.200", "0.900"], ["n/a", ""]]
    assert "best other: sglang 0.5000" in heat.customdata[0][1]
    # the colours are symmetric about 1: as far below as the farthest ratio is from it
    assert (heat.zmin, heat.zmax) == pytest.approx((0.8, 1.2))


def test_heatmap_page_is_self_contained() -> None:
    page = matrix_heatmap(CELLS, notes=["qwen3"])
    assert page.startswith("<!doctype html>") and "qwen3" in page
    assert page.count('class="plotly-graph-div"') == 1
