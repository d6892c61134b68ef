"""The policy matrix as a heat map: one preset's token hit rate as a ratio to the best other
preset's, per row (source and mode) and column (capacity); ``benchmarks/policy_matrix.py
--html`` writes it. Above 1 the preset beats every other one; plotly as in
``hycache.sim.plots``."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from hycache.errors import ConfigError
from hycache.sim.plots import figure_div, page

#: a row's and a column's label, e.g. ("chat / serial", "10%")
Cell = tuple[str, str]


def ratio_to_best_other(hits: Mapping[str, float], preset: str = "hycache") -> float | None:
    """``hits[preset]`` over the largest hit rate of the other presets (None when that is 0:
    no ratio)."""
    others = [v for p, v in hits.items() if p != preset]
    if preset not in hits or not others:
        raise ConfigError(f"a cell needs {preset!r} and at least one other preset: {sorted(hits)}")
    best = max(others)
    return hits[preset] / best if best > 0 else None


def _labels(cells: Sequence[Cell]) -> tuple[list[str], list[str]]:
    rows = list(dict.fromkeys(row for row, _ in cells))
    columns = list(dict.fromkeys(column for _, column in cells))
    return rows, columns


def matrix_figure(
    cells: Mapping[Cell, Mapping[str, float]], preset: str = "hycache", title: str = ""
) -> Any:
    """The heat map of ``cells`` ((row, column) -> {preset: token hit rate}), rows and columns
    in the order they first appear; a missing cell or one without a ratio stays blank. The
    colour scale is centred on 1 (red below, blue above, white level); each cell shows the
    ratio, its hover also the two hit rates and the best other preset."""
    import plotly.graph_objects as go

    rows, columns = _labels(list(cells))
    z: list[list[float | None]] = [[None] * len(columns) for _ in rows]
    text = [[""] * len(columns) for _ in rows]
    hover = [[""] * len(columns) for _ in rows]
    for (row, column), hits in cells.items():
        i, j = rows.index(row), columns.index(column)
        ratio = ratio_to_best_other(hits, preset)
        best = max((p for p in hits if p != preset), key=lambda p: hits[p])
        z[i][j] = ratio
        text[i][j] = "n/a" if ratio is None else f"{ratio:.3f}"
        hover[i][j] = (
            f"{html.escape(row)}, {html.escape(column)}<br>{preset} {hits[preset]:.4f}<br>"
            f"best other: {best} {hits[best]:.4f}"
        )
    values = [v for line in z for v in line if v is not None]
    # symmetric about 1, at least +-0.05 (a flat matrix stays pale), at most +-1 (beyond
    # that the colour saturates; the cell's text still tells)
    spread = min(1.0, max([0.05, *(abs(v - 1.0) for v in values)]))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=rows,
            text=text,
            texttemplate="%{text}",
            textfont={"size": 14},
            customdata=hover,
            hovertemplate="%{customdata}<br>ratio %{z:.3f}<extra></extra>",
            colorscale="RdBu",
            zmin=1.0 - spread,
            zmax=1.0 + spread,
            colorbar={"title": {"text": "ratio"}},
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        title={
            "text": title
            or f"{preset} token hit rate / best other preset's (blue: {preset} ahead)",
            "x": 0.02,
        },
        template="plotly_white",
        height=max(320, 120 + 44 * len(rows)),
        margin={"l": 200, "r": 40, "t": 60, "b": 60},
        font={"size": 13},
    )
    fig.update_xaxes(title_text="capacity (share of the unlimited footprint)", showgrid=False)
    fig.update_yaxes(autorange="reversed", title_text="", showgrid=False)
    return fig


def matrix_heatmap(
    cells: Mapping[Cell, Mapping[str, float]],
    preset: str = "hycache",
    title: str = "Policy matrix",
    notes: Sequence[str] = (),
) -> str:
    """``matrix_figure`` as a self-contained HTML page (plotly.js inline) under ``title``."""
    parts = [f"<p>{html.escape(n)}</p>" for n in notes]
    parts.append(f"<div class='figure'>{figure_div(matrix_figure(cells, preset), 'matrix')}</div>")
    return page(title, parts)
