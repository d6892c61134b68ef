"""A self-contained HTML report (inline SVG plots, no external files) and the text table."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from hycache.errors import ConfigError
from hycache.sim.metrics import PolicyResult

COLORS = {"vllm": "#d62728", "sglang": "#1f77b4", "marconi": "#2ca02c", "hycache": "#9467bd"}
W, H, PAD = 600, 300, 48
LEGEND = 100  # room on the right for the series names


def table(results: Mapping[str, PolicyResult]) -> str:
    """The side-by-side text table, policies as rows."""
    header = (
        "policy",
        "token_hit",
        "kv_hit",
        "req_hit",
        "recompute",
        "ttft_p50",
        "ttft_p95",
        "peak_GB",
        "overrun",
        "evictions",
        "wall_s",
    )
    rows = [header]
    for name, r in results.items():
        rows.append(
            (
                name,
                f"{r.token_hit_rate:.4f}",
                f"{r.kv_hit_rate:.4f}",
                f"{r.request_hit_rate:.3f}",
                f"{r.recompute_tokens}",
                f"{r.ttft_p50_s:.3f}s",
                f"{r.ttft_p95_s:.3f}s",
                f"{r.peak_bytes / 1e9:.2f}",
                f"{r.capacity_overrun_bytes}",
                f"{r.evictions}",
                f"{r.wall_s:.1f}",
            )
        )
    return _render(rows)


def disagg_table(results: Mapping[str, PolicyResult]) -> str:
    """The ``disagg`` mode's table: prefill hit rate, decode hit tokens, prefill -> decode
    bytes (total and per request), prefills skipped, TTFT (transfer included), peaks and
    overrun of both instances."""
    rows = [
        (
            "policy",
            "P_token_hit",
            "D_hit_tokens",
            "moved_GB",
            "moved_MB/req",
            "P_skipped",
            "ttft_p50",
            "ttft_p95",
            "xfer_p95",
            "P_peak_GB",
            "D_peak_GB",
            "overrun",
            "wall_s",
        )
    ]
    for name, r in results.items():
        d = r.disagg
        if d is None:
            raise ConfigError(f"{name}: not a disagg replay")
        rows.append(
            (
                name,
                f"{r.token_hit_rate:.4f}",
                f"{d.decode_hit_tokens}",
                f"{d.bytes_moved / 1e9:.2f}",
                f"{d.bytes_moved_mean / 1e6:.1f}",
                f"{d.prefill_skipped}",
                f"{r.ttft_p50_s:.3f}s",
                f"{r.ttft_p95_s:.3f}s",
                f"{d.transfer_p95_s * 1e3:.2f}ms",
                f"{r.peak_bytes / 1e9:.2f}",
                f"{d.decode_peak_bytes / 1e9:.2f}",
                f"{r.capacity_overrun_bytes + d.decode_overrun_bytes}",
                f"{r.wall_s:.1f}",
            )
        )
    return _render(rows)


def _render(rows: Sequence[Sequence[str]]) -> str:
    """Rows as aligned columns, the first left-aligned, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _counts(value: object) -> dict[str, int | None]:
    return dict(value) if isinstance(value, dict) else {}


def tier_table(results: Mapping[str, PolicyResult]) -> str | None:
    """Reused tokens by the tier their KV came from, bytes moved per direction, peak bytes
    and overrun per tier (None when no policy ran with tiers)."""
    tiered = {name: r.tiers for name, r in results.items() if r.tiers is not None}
    if not tiered:
        return None
    names = sorted({t for stats in tiered.values() for t in _counts(stats["tier_hit_tokens"])})
    lower = [t for t in names if t != "device"]
    header = ("policy", *(f"hit_{t}" for t in ["device", *lower]))
    header += tuple(f"GB_{t}_down/up" for t in lower) + tuple(f"peak_GB_{t}" for t in lower)
    header += ("tier_overrun",)
    rows = [header]
    for name, stats in tiered.items():
        hits, moved = _counts(stats["tier_hit_tokens"]), _counts(stats["bytes_moved"])
        peak, over = _counts(stats["tier_bytes_peak"]), _counts(stats["tier_overrun_bytes"])
        row = [name, *(str(hits.get(t, 0)) for t in ["device", *lower])]
        for t in lower:
            down, up = moved.get(f"device->{t}") or 0, moved.get(f"{t}->device") or 0
            row.append(f"{down / 1e9:.1f}/{up / 1e9:.1f}")
        row += [f"{(peak.get(t) or 0) / 1e9:.2f}" for t in lower]
        row.append(str(sum(v or 0 for v in over.values())))
        rows.append(tuple(row))
    return _render(rows)


def rejected_notes(results: Mapping[str, PolicyResult]) -> list[str]:
    """One line per policy that served requests uncached because no cache of this capacity
    could ever hold them (``PolicyResult.rejected``); empty when none did."""
    return [
        f"{name}: {r.rejected} of {r.requests} requests never fit this capacity and ran "
        "uncached (counted as misses)"
        for name, r in results.items()
        if r.rejected
    ]


def _svg_lines(
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    xlabel: str,
    ylabel: str,
    *,
    ymin: float | None = None,
    ymax: float | None = None,
) -> str:
    points = [p for s in series.values() for p in s]
    if not points:
        return f"<p>{html.escape(title)}: no data</p>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0 = min(p[1] for p in points) if ymin is None else ymin
    y1 = max(p[1] for p in points) if ymax is None else ymax
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1

    def sx(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD - LEGEND)

    def sy(y: float) -> float:
        return H - PAD - (y - y0) / (y1 - y0) * (H - 2 * PAD)

    parts = [
        f'<svg width="{W}" height="{H}" xmlns="http://www.w3.org/2000/svg" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13">{html.escape(title)}</text>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD - LEGEND}" y2="{H - PAD}" stroke="#333"/>',
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>',
    ]
    for i in range(5):
        fy = y0 + (y1 - y0) * i / 4
        fx = x0 + (x1 - x0) * i / 4
        parts.append(f'<text x="{PAD - 4}" y="{sy(fy) + 4}" text-anchor="end">{fy:.3g}</text>')
        parts.append(f'<text x="{sx(fx)}" y="{H - PAD + 14}" text-anchor="middle">{fx:.3g}</text>')
    parts.append(f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">{html.escape(xlabel)}</text>')
    parts.append(
        f'<text x="12" y="{H / 2}" transform="rotate(-90 12 {H / 2})" '
        f'text-anchor="middle">{html.escape(ylabel)}</text>'
    )
    for i, (name, data) in enumerate(series.items()):
        color = COLORS.get(name.split()[0], "#555")
        dash = ' stroke-dasharray="5,3"' if "state" in name else ""
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in data)
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{path}"/>'
        )
        legend_x = W - PAD - LEGEND + 8
        parts.append(
            f'<text x="{legend_x}" y="{PAD + 14 * i}" fill="{color}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _cdf(samples: Sequence[float]) -> list[tuple[float, float]]:
    ordered = sorted(samples)
    n = len(ordered)
    step = max(1, n // 200)
    return [(ordered[i], (i + 1) / n) for i in range(0, n, step)] + (
        [(ordered[-1], 1.0)] if n else []
    )


def render_html(
    title: str,
    by_capacity: Mapping[int, Mapping[str, PolicyResult]],
    notes: Sequence[str] = (),
) -> str:
    """The report: hit rate vs capacity, TTFT CDF, KV/state occupancy, evictions, tables."""
    capacities = sorted(by_capacity)
    policies = list(next(iter(by_capacity.values())).keys()) if by_capacity else []
    hit = {p: [(c / 1e9, by_capacity[c][p].token_hit_rate) for c in capacities] for p in policies}
    smallest = by_capacity[capacities[0]] if capacities else {}
    ttft = {p: _cdf(r.ttft_samples) for p, r in smallest.items()}
    occupancy: dict[str, list[tuple[float, float]]] = {}
    for p, r in smallest.items():
        occupancy[f"{p} KV"] = [(t, kv / 1e9) for t, kv, _s in r.timeline]
        occupancy[f"{p} state"] = [(t, st / 1e9) for t, _k, st in r.timeline]
    evictions = {
        p: [(c / 1e9, float(by_capacity[c][p].evictions)) for c in capacities] for p in policies
    }
    body = [f"<h1>{html.escape(title)}</h1>"]
    body += [f"<p>{html.escape(n)}</p>" for n in notes]
    body.append(
        _svg_lines("Token hit rate vs capacity", hit, "capacity (GB)", "token hit rate", ymin=0.0)
    )
    body.append(
        _svg_lines(
            f"TTFT CDF at {capacities[0] / 1e9:.1f} GB" if capacities else "TTFT CDF",
            ttft,
            "TTFT (s)",
            "fraction of requests",
            ymin=0.0,
            ymax=1.0,
        )
    )
    body.append(
        _svg_lines(
            "KV (solid) and state (dashed) bytes held over time, smallest capacity",
            occupancy,
            "time (s or request index)",
            "GB",
            ymin=0.0,
        )
    )
    body.append(
        _svg_lines("Evictions vs capacity", evictions, "capacity (GB)", "evictions", ymin=0.0)
    )
    for c in capacities:
        body.append(
            f"<h2>capacity {c / 1e9:.2f} GB</h2><pre>{html.escape(table(by_capacity[c]))}</pre>"
        )
        tiers = tier_table(by_capacity[c])
        if tiers is not None:
            body.append(
                "<h3>Tiers: reused tokens by the tier their KV came from, bytes moved</h3>"
                f"<pre>{html.escape(tiers)}</pre>"
            )
        body += [f"<p>{html.escape(n)}</p>" for n in rejected_notes(by_capacity[c])]
    style = "body{font-family:sans-serif;max-width:1320px;margin:2em auto}svg{margin:0.5em}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{style}</style></head><body>{''.join(body)}</body></html>"
    )
