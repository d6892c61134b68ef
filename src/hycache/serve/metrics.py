"""``/metrics``: Prometheus metrics in the vLLM style, with KV and state hits kept apart.

The cache's own totals are read at scrape time from a ``CacheSnapshot`` (taken on the
scheduler thread, so it is consistent); per-request observations are prometheus_client
objects updated as requests end. Each server has its own registry.

==================================================== ========================================
``hycache:prefix_cache_queries_total``               prompt tokens looked up
``hycache:prefix_cache_hits_total{kind}``            ``kv``: tokens attention matched;
                                                     ``state``: tokens actually reused
                                                     (restored from a state)
``hycache:recomputed_tokens_total``                  KV-matched tokens recomputed (no usable
                                                     state there): the hybrid-cache tax
``hycache:cache_usage_bytes{kind,tier}``             bytes held now (``tier`` is ``device``)
``hycache:cache_budget_bytes{tier}``                 the cache's byte budget
``hycache:evictions_total{kind}``                    entries evicted per cache component
``hycache:checkpoints_total{reason}``                states stored, by the plan's reason
``hycache:checkpoints_skipped_total{reason}``        planned states skipped: no state slot
                                                     could be had, even after eviction
``hycache:state_hits_total{reason}``                 requests resumed from a state, by the
                                                     reason it was stored for
``hycache:num_requests_running`` / ``_waiting``      admitted / queued or waiting for memory
``hycache:sessions_active``, ``sessions_ended_total`` sessions tracked / ended after idling
``hycache:time_to_first_token_seconds``              histogram, submission to first token
``hycache:request_prefill_tokens``                   histogram, prompt tokens computed
``hycache:e2e_request_latency_seconds``              histogram, submission to end
``hycache:request_success_total{finished_reason}``   requests ended with ``stop`` / ``length``
``hycache:requests_rejected_total{reason}``          refused: ``invalid``, ``queue_full``,
                                                     ``draining``, ``failed``
``hycache:requests_aborted_total``                   aborted (client went away)
``hycache:engine_errors_total``                      engine steps that raised (a bug)
``hycache:prompt_tokens_total``,                     tokens in, tokens out
``hycache:generation_tokens_total``
==================================================== ========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hycache.cache.stats import CacheStats

TIER = "device"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_TTFT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 10, 20)
_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)


@dataclass(frozen=True)
class CacheSnapshot:
    """The cache and the scheduler at one instant (taken on the scheduler thread)."""

    stats: CacheStats
    #: the cache's unit kinds (``full``, ``swa``, ``recurrent``): evictions of each are
    #: exported from the start, at 0
    kinds: tuple[str, ...] = ()
    running: int = 0
    waiting: int = 0
    sessions_active: int = 0
    sessions_ended: int = 0
    engine_errors: int = 0


class _CacheCollector(Collector):
    def __init__(self, snapshot: Callable[[], CacheSnapshot]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot()
        s = snap.stats
        yield CounterMetricFamily(
            "hycache:prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache.",
            value=s.prompt_tokens,
        )
        hits = CounterMetricFamily(
            "hycache:prefix_cache_hits",
            "Prompt tokens hit: kv = matched by attention, state = actually reused.",
            labels=["kind"],
        )
        hits.add_metric(["kv"], s.kv_matched_tokens)
        hits.add_metric(["state"], s.reused_tokens)
        yield hits
        yield CounterMetricFamily(
            "hycache:recomputed_tokens",
            "KV-matched prompt tokens recomputed because no state was cached there.",
            value=s.recompute_tokens,
        )
        usage = GaugeMetricFamily(
            "hycache:cache_usage_bytes", "Bytes held by the cache now.", labels=["kind", "tier"]
        )
        usage.add_metric(["kv", TIER], s.kv_bytes)
        usage.add_metric(["state", TIER], s.state_bytes)
        yield usage
        budget = GaugeMetricFamily(
            "hycache:cache_budget_bytes", "The cache's byte budget.", labels=["tier"]
        )
        budget.add_metric([TIER], s.budget_bytes)
        yield budget
        evictions = CounterMetricFamily(
            "hycache:evictions", "Cache entries evicted, per component.", labels=["kind"]
        )
        counts = dict.fromkeys(snap.kinds, 0) | s.evictions
        for kind, count in sorted(counts.items()):
            evictions.add_metric([kind], count)
        yield evictions
        by_reason = {
            name: CounterMetricFamily(f"hycache:{name}", text, labels=["reason"])
            for name, text in (
                ("checkpoints", "States stored in the cache, by checkpoint reason."),
                (
                    "checkpoints_skipped",
                    "Planned states skipped for lack of a state slot, by checkpoint reason.",
                ),
                (
                    "state_hits",
                    "Requests resumed from a cached state, by the reason it was stored for.",
                ),
            )
        }
        for reason, tally in s.reasons.items():
            by_reason["checkpoints"].add_metric([reason], tally.inserted)
            by_reason["checkpoints_skipped"].add_metric([reason], tally.skipped)
            by_reason["state_hits"].add_metric([reason], tally.hits)
        yield from by_reason.values()
        yield GaugeMetricFamily(
            "hycache:num_requests_running", "Requests admitted and running.", value=snap.running
        )
        yield GaugeMetricFamily(
            "hycache:num_requests_waiting",
            "Requests queued or waiting for cache memory.",
            value=snap.waiting,
        )
        yield GaugeMetricFamily(
            "hycache:sessions_active", "Sessions tracked now.", value=snap.sessions_active
        )
        yield CounterMetricFamily(
            "hycache:sessions_ended",
            "Sessions ended after an idle gap.",
            value=snap.sessions_ended,
        )
        yield CounterMetricFamily(
            "hycache:engine_errors",
            "Engine steps that raised (the requests in flight failed); 0 when healthy.",
            value=snap.engine_errors,
        )


class ServeMetrics:
    """The registry of one server: the cache collector plus per-request observations."""

    def __init__(self, snapshot: Callable[[], CacheSnapshot]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_CacheCollector(snapshot))
        r = self.registry
        self.ttft = Histogram(
            "hycache:time_to_first_token_seconds",
            "Seconds from a request's arrival to its first token.",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.prefill_tokens = Histogram(
            "hycache:request_prefill_tokens",
            "Prompt tokens a request had to compute (prompt minus reused).",
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "hycache:e2e_request_latency_seconds",
            "Seconds from a request's arrival to its end.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.success = Counter(
            "hycache:request_success", "Requests finished.", ["finished_reason"], registry=r
        )
        self.rejected = Counter(
            "hycache:requests_rejected", "Requests refused.", ["reason"], registry=r
        )
        self.aborted = Counter("hycache:requests_aborted", "Requests aborted.", registry=r)
        self.prompt_tokens = Counter(
            "hycache:prompt_tokens", "Prompt tokens of finished requests.", registry=r
        )
        self.generation_tokens = Counter(
            "hycache:generation_tokens", "Tokens generated by finished requests.", registry=r
        )

    def finished(
        self,
        *,
        reason: str,
        prompt: int,
        reused: int,
        generated: int,
        ttft: float | None,
        latency: float,
    ) -> None:
        """Record a request that ended normally."""
        self.success.labels(reason).inc()
        self.prompt_tokens.inc(prompt)
        self.generation_tokens.inc(generated)
        self.prefill_tokens.observe(prompt - reused)
        if ttft is not None:
            self.ttft.observe(ttft)
        self.latency.observe(latency)

    def render(self) -> bytes:
        """The text exposition (blocks while the snapshot is taken)."""
        return generate_latest(self.registry)
