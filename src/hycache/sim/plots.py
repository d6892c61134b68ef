"""The report's figures (plotly, the ``sim`` extra), and the page that holds them.

plotly is imported inside the functions, so that the core library never needs it. Every
figure becomes a ``<div>`` (``figure_div``); ``page`` puts plotly.js inline once, so the file
works offline. Each preset keeps its colour in every figure."""

from __future__ import annotations

import html
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hycache.sim.metrics import PolicyResult

COLORS = {"vllm": "#d62728", "sglang": "#1f77b4", "marconi": "#2ca02c", "hycache": "#9467bd"}
#: presets beyond ``COLORS`` (``hycache+tiers``, ``lmcache``, ...) in order of appearance
SPARE_COLORS = ("#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f")
HEIGHT = 440
BOUND_NAME = "infinite cache (bound)"


def color(policy: str, order: Sequence[str]) -> str:
    """``policy``'s colour: its own, else a spare one by its place in ``order``."""
    if policy in COLORS:
        return COLORS[policy]
    spare = [p for p in order if p not in COLORS]
    return SPARE_COLORS[spare.index(policy) % len(SPARE_COLORS)] if policy in spare else "#555"


def _layout(fig: Any, title: str, xtitle: str, ytitle: str, **more: Any) -> Any:
    fig.update_layout(
        title={"text": title, "x": 0.02},
        template="plotly_white",
        height=HEIGHT,
        margin={"l": 80, "r": 30, "t": 60, "b": 60},
        font={"size": 13},
        legend={"orientation": "h", "y": -0.2, "x": 0},
        hovermode="closest",
        **more,
    )
    fig.update_xaxes(title_text=xtitle, showline=True, linecolor="#444", ticks="outside")
    fig.update_yaxes(title_text=ytitle, showline=True, linecolor="#444", ticks="outside")
    return fig


def _capacity_axis(fig: Any, capacities_gb: Sequence[float]) -> None:
    """Logarithmic when the capacities span 4x or more; ticks at the capacities measured when
    they are far enough apart to be read."""
    if len(capacities_gb) < 2 or capacities_gb[0] <= 0:
        return
    if capacities_gb[-1] / capacities_gb[0] < 4:
        return
    fig.update_xaxes(type="log")
    gaps = [b / a for a, b in itertools.pairwise(capacities_gb)]
    if min(gaps) >= 1.3:
        fig.update_xaxes(tickvals=list(capacities_gb), ticktext=[f"{c:.3g}" for c in capacities_gb])


def _per_capacity(
    by_capacity: Mapping[int, Mapping[str, PolicyResult]],
    value: Callable[[PolicyResult], float],
    shown: str,
) -> tuple[Any, list[float]]:
    """A figure with one line per preset of ``value`` at each capacity (hover: ``shown``),
    and the capacities in GB."""
    import plotly.graph_objects as go

    capacities = sorted(by_capacity)
    gb = [c / 1e9 for c in capacities]
    policies = _policies(by_capacity)
    fig = go.Figure()
    for p in policies:
        fig.add_trace(
            go.Scatter(
                x=gb,
                y=[value(by_capacity[c][p]) for c in capacities],
                name=p,
                mode="lines+markers",
                line={"color": color(p, policies), "width": 2.5},
                hovertemplate="%{x:.3g} GB: " + shown + "<extra>" + p + "</extra>",
            )
        )
    return fig, gb


def hit_rate_figure(
    by_capacity: Mapping[int, Mapping[str, PolicyResult]], bound: float | None = None
) -> Any:
    """Token hit rate vs capacity, one line per preset; ``bound`` (the infinite-cache hit
    rate) a dashed line across."""
    import plotly.graph_objects as go

    fig, gb = _per_capacity(by_capacity, lambda r: r.token_hit_rate, "%{y:.2%}")
    if bound is not None and gb:
        low, high = (gb[0], gb[-1]) if gb[-1] > gb[0] else (gb[0] / 1.25, gb[0] * 1.25)
        fig.add_trace(
            go.Scatter(
                x=[low, high],
                y=[bound, bound],
                name=f"{BOUND_NAME}: {bound:.1%}",
                mode="lines",
                line={"color": "#222", "dash": "dash", "width": 1.5},
                hovertemplate="%{y:.2%}<extra>" + BOUND_NAME + "</extra>",
            )
        )
    _layout(fig, "Token hit rate vs capacity", "capacity (GB)", "token hit rate")
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    _capacity_axis(fig, gb)
    return fig


def evictions_figure(by_capacity: Mapping[int, Mapping[str, PolicyResult]]) -> Any:
    """Evictions vs capacity, one line per preset."""
    fig, gb = _per_capacity(by_capacity, lambda r: r.evictions, "%{y:,}")
    _layout(fig, "Evictions vs capacity", "capacity (GB)", "evictions")
    fig.update_yaxes(rangemode="tozero", tickformat="~s")
    _capacity_axis(fig, gb)
    return fig


def ttft_cdf_figure(results: Mapping[str, PolicyResult], capacity: int) -> Any:
    """The TTFT distribution of every preset at ``capacity``, every request a step."""
    import plotly.graph_objects as go

    fig = go.Figure()
    policies = list(results)
    low = high = 0.0
    for p, r in results.items():
        ordered = sorted(r.ttft_samples)
        n = len(ordered)
        if not n:
            continue
        low = ordered[0] if not low else min(low, ordered[0])
        high = max(high, ordered[-1])
        fig.add_trace(
            go.Scatter(
                x=ordered,
                y=[(i + 1) / n for i in range(n)],
                name=p,
                mode="lines",
                line={"color": color(p, policies), "width": 2, "shape": "hv"},
                hovertemplate="%{x:.3f} s: %{y:.1%}<extra>" + p + "</extra>",
            )
        )
    title = f"TTFT CDF at {capacity / 1e9:.3g} GB"
    _layout(fig, title, "time to first token (s)", "share of requests")
    fig.update_yaxes(tickformat=".0%", range=[0, 1.02])
    if low > 0 and high / low >= 100:
        fig.update_xaxes(type="log", dtick=1)  # a tick per power of ten
    return fig


def occupancy_figure(results: Mapping[str, PolicyResult], capacity: int) -> Any:
    """KV and state bytes held over the replay at ``capacity``, every recorded change: KV in
    the upper panel, recurrent state in the lower one."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=("KV bytes held", "state bytes held"),
    )
    policies = list(results)
    serial = all(r.mode != "engine" for r in results.values())
    for p, r in results.items():
        t = [point[0] for point in r.timeline]
        for row, column in ((1, 1), (2, 2)):
            fig.add_scatter(
                x=t,
                y=[point[column] / 1e9 for point in r.timeline],
                name=p,
                legendgroup=p,
                showlegend=row == 1,
                mode="lines",
                line={"color": color(p, policies), "width": 1.8, "shape": "hv"},
                hovertemplate="%{x:.4g}: %{y:.3g} GB<extra>" + p + "</extra>",
                row=row,
                col=1,
            )
    title = f"Bytes held over the replay at {capacity / 1e9:.3g} GB"
    xtitle = "request index" if serial else "simulated time (s)"
    _layout(fig, title, "", "GB")
    fig.update_layout(height=HEIGHT + 220)
    fig.update_xaxes(title_text=xtitle, row=2, col=1)
    fig.update_yaxes(rangemode="tozero")
    return fig


def _policies(by_capacity: Mapping[int, Mapping[str, PolicyResult]]) -> list[str]:
    return list(next(iter(by_capacity.values())).keys()) if by_capacity else []


def figure_div(fig: Any, div_id: str) -> str:
    """``fig`` as a ``<div>`` (plotly.js not included: ``page`` carries it)."""
    return str(
        fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    )


STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:1320px;margin:2em auto;padding:0 1em;"
    "color:#222}h1{font-size:1.6em}h2{margin-top:1.6em;font-size:1.25em}"
    "pre{background:#f6f6f6;padding:0.8em;overflow-x:auto;font-size:13px}"
    ".figure{margin:1em 0;border:1px solid #e4e4e4;border-radius:4px}"
)


def page(title: str, parts: Sequence[str]) -> str:
    """A self-contained HTML page: ``parts`` (HTML) under ``title``, plotly.js inline."""
    from plotly.offline import get_plotlyjs

    script = str(get_plotlyjs())
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style><script type='text/javascript'>{script}</script></head>"
        f"<body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>"
    )
