"""The text tables and the self-contained HTML report (figures from ``hycache.sim.plots``:
plotly, the ``sim`` extra, imported only when a report is rendered)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from hycache.errors import ConfigError
from hycache.sim.metrics import PolicyResult
from hycache.sim.plots import (
    evictions_figure,
    figure_div,
    hit_rate_figure,
    occupancy_figure,
    page,
    ttft_cdf_figure,
)


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


def reasons_table(results: Mapping[str, PolicyResult]) -> str | None:
    """Per policy and checkpoint reason: states stored, resumed from (hits), hits per stored
    state, and checkpoints skipped because no state slot could be had (None when no policy
    stored or planned a state)."""
    rows: list[tuple[str, ...]] = [("policy", "reason", "stored", "hits", "hits/stored", "skipped")]
    for name, r in results.items():
        for reason, c in r.reasons.items():
            per = f"{c.hits / c.inserted:.2f}" if c.inserted else "-"
            rows.append((name, reason, str(c.inserted), str(c.hits), per, str(c.skipped)))
    return _render(rows) if len(rows) > 1 else None


def rejected_notes(results: Mapping[str, PolicyResult]) -> list[str]:
    """One line per policy that served requests uncached because no cache of this capacity
    could ever hold them (``PolicyResult.rejected``); empty when none did."""
    return [
        f"{name}: {r.rejected} of {r.requests} requests never fit this capacity and ran "
        "uncached (counted as misses)"
        for name, r in results.items()
        if r.rejected
    ]


def tuned_notes(results: Mapping[str, PolicyResult]) -> list[str]:
    """One line per policy whose bootstrap chose something (``PolicyResult.tuned``): what, and
    on how many of the requests; it says so when the window held them all (the choice saw the
    whole trace, and the winner's replay of it is the result). Empty when nothing was tuned."""
    notes = []
    for name, r in results.items():
        chosen = {k: v for k, v in r.tuned.items() if k != "window_requests"}
        if not chosen:
            continue
        shown = ", ".join(f"{k}={_knob_text(v)}" for k, v in chosen.items())
        if chosen.get("aging_horizon") == 0:
            shown += " (GreedyDual's flat clock)"
        window = r.tuned["window_requests"]
        if isinstance(window, int) and window >= r.requests:
            seen = f"all {r.requests} requests: a choice in hindsight"
        else:
            seen = f"{window} of {r.requests} requests"
        notes.append(f"{name}: chose {shown} on a bootstrap window of {seen}")
    return notes


def _knob_text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def render_html(
    title: str,
    by_capacity: Mapping[int, Mapping[str, PolicyResult]],
    notes: Sequence[str] = (),
    *,
    bound: float | None = None,
) -> str:
    """The report, one self-contained page: hit rate vs capacity (with ``bound``, the
    infinite-cache hit rate, when given), the TTFT CDF (engine mode only: a serial replay has
    no queueing), KV and state bytes held over time, evictions vs capacity, then the tables.
    The smallest capacity's replay stands for the TTFT and the bytes held."""
    capacities = sorted(by_capacity)
    body = [f"<p>{html.escape(n)}</p>" for n in notes]
    figures: list[tuple[str, object]] = []
    if capacities:
        smallest, results = capacities[0], by_capacity[capacities[0]]
        figures.append(("hit-rate", hit_rate_figure(by_capacity, bound)))
        if any(r.mode == "engine" for r in results.values()):
            figures.append(("ttft-cdf", ttft_cdf_figure(results, smallest)))
        figures.append(("bytes-held", occupancy_figure(results, smallest)))
        figures.append(("evictions", evictions_figure(by_capacity)))
    body += [f"<div class='figure'>{figure_div(fig, name)}</div>" for name, fig in figures]
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
        for note in (*tuned_notes(by_capacity[c]), *rejected_notes(by_capacity[c])):
            body.append(f"<p>{html.escape(note)}</p>")
    return page(title, body)
