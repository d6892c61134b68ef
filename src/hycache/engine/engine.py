"""The reference engine: runs requests through a real model with a ``HybridPrefixCache``.

Per request (see ``hycache.cache.facade`` for the lease lifecycle):

1. ``admit`` the prompt. On a hit, gather the KV pages of the path nodes up to ``lease.hit``
   (SWA layers: only the window before the hit), copy the cached state ``lease.source_state``
   into a private one (copy-on-write: a clone; the cached slot is never written by a reader),
   and build the model's own cache object (``DynamicCache`` with its per-layer classes) from
   them.
2. Prefill the chunks the cache planned (``plan.chunk_ends``, split further at every planned
   checkpoint), always with explicit ``position_ids``. Right after the chunk that ends at a
   planned checkpoint, and before anything extends the state again, ask
   ``record_checkpoint`` for a slot and copy the state into it.
3. Decode (greedy, or seeded sampling: ``hycache.engine.sampling``; decode-time checkpoints
   likewise; a stop token or ``on_token`` returning True ends it early), ``extend`` the lease
   with the tokens fed back, copy the running state into ``lease.final_state_slot``
   (``finish`` keeps it as the end-of-request state when the plan says so), ``finish``.
4. Publish and scatter: when the prefill ends, ``publish`` makes the prompt part of the cache
   and the engine writes its KV into the pages ``PublishResult.pages`` names; at ``finish`` it
   writes the rest into ``FinishResult.pages``: every page whose owner tag is not this prefix
   (new pages, and reused ids that still hold an earlier owner's data). The engine never
   walks the tree: it uses what the lease, ``publish`` and ``finish`` return.

Tiers (``tiers``, ``hycache.engine.tiers``): after the device admission the engine asks the
tiers how far they extend the hit (``plan_extension``), loads that prefix's KV and state into
the model's cache and prefills from there; the pages it then scatters and the exact states it
copies are written through to every tier. Of the sliding-window KV the extension loads only
the window before its end, so the engine tells the cache where the request's SWA KV starts
(``window_loaded_from``): the cache keeps none below it rather than filing pages for positions
the request never held.

Requests are interleaved (``max_running``) by a ``Scheduler`` (``hycache.engine.scheduler``):
each step advances one request by one chunk or one decode token, so several leases are in
flight at once; a request the cache answers with ``Wait`` waits until others finish. After
every request the pool is checked against its budget. ``run`` steps until its source is
exhausted; a server steps forever instead (``hycache.engine.online``), streaming tokens
through the optional ``on_token`` callback.

Fault injection (``inject``), to prove the verifier catches what it must:

* ``late-snapshot``: a checkpoint is copied after the next chunk (or decode step) has already
  extended the state, and published at the planned position;
* ``off-grid``: a state is taken at a position other than the one it is published at (vLLM:
  the cache's own #54076 reproduction, ``offgrid="misplace"`` with a finer scheduler grid; other
  presets: the engine snapshots a few tokens past the planned position);
* ``stale-tail``: the engine extends the lease by the last generated token too, whose KV it
  never computed, and caches that last page as if full: its unwritten tail keeps whatever the
  page id's previous owner left there, and later hits read it;
* ``unwritten-publish``: the engine publishes the prompt when its prefill ends but writes the
  pages only at finish: a request reusing them in between reads another prefix's data;
* ``wrong-accept-step`` (with ``spec_decode``): speculative decoding copies back the recurrent
  state of the draft step after the accepted one (``hycache.engine.spec_decode``).

``spec_decode`` (a ``SpecDecode``): greedy requests decode speculatively, a prompt-lookup draft
verified in one forward per step (``hycache.engine.spec_decode``); ``self.spec`` counts.

The parts live in their own modules: the request and result types in ``request``, the KV
gather/scatter and state copies against the store in ``transfer``, checkpoints and the faults
injected into them in ``checkpoints``, the memory checks in ``accounting``, the schedule in
``scheduler``, token picking in ``sampling``; this module holds ``Engine``'s per-request run
loop (and re-exports the request types).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterable, Sequence
from typing import TYPE_CHECKING

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import Lease, Wait
from hycache.engine.accounting import MemoryCheck
from hycache.engine.checkpoints import Checkpointer, Deferred
from hycache.engine.drafter import SpecDecode
from hycache.engine.faults import INJECTS, FaultLog
from hycache.engine.model import LoadedModel
from hycache.engine.request import (
    EngineRequest,
    ListSource,
    RequestResult,
    RequestSource,
    TokenCallback,
)
from hycache.engine.sampling import greedy_pick, make_picker
from hycache.engine.scheduler import Scheduler, Step
from hycache.engine.spec_decode import SpecDecoder, check_spec_inject
from hycache.engine.store import PrefixTags, TensorStore
from hycache.engine.tiers.chain import TierChain
from hycache.engine.tiers.extend import Extension, plan_extension
from hycache.engine.transfer import Transfer
from hycache.errors import CapacityError, ConfigError, IntegrityError
from hycache.tree.keys import encode_tokens

if TYPE_CHECKING:
    import torch

    from hycache.engine.disagg.base import PrefillSink, PrefillSource

__all__ = [
    "INJECTS",
    "Engine",
    "EngineRequest",
    "ListSource",
    "RequestResult",
    "RequestSource",
]


class Engine:
    """Runs requests on ``model`` with ``cache``; the tensors behind the cache's ids live in
    ``self.store``. Composed of a ``Transfer`` (tensors in and out of the store), a
    ``Checkpointer`` (state copies, injected checkpoint faults), a ``MemoryCheck`` and a
    ``FaultLog`` (what an injected fault stored and how often a request read it).
    ``on_token``: called with every generated token (see ``TokenCallback``)."""

    def __init__(
        self,
        model: LoadedModel,
        cache: HybridPrefixCache,
        *,
        max_running: int = 1,
        inject: str | None = None,
        check_owners: bool = True,
        check_tree: bool = False,
        publish: bool = True,
        on_token: TokenCallback | None = None,
        spec_decode: SpecDecode | None = None,
        tiers: TierChain | None = None,
    ) -> None:
        if inject is not None and inject not in INJECTS:
            raise ConfigError(f"unknown inject {inject!r}; known: {', '.join(INJECTS)}")
        check_spec_inject(inject, spec_decode)
        if inject is not None and tiers is not None:
            raise ConfigError(f"inject {inject!r} breaks the device path: run it without tiers")
        if max_running < 1:
            raise ConfigError(f"max_running must be >= 1, got {max_running}")
        if not getattr(cache.pool, "track_ids", True):
            raise ConfigError("the engine needs a cache that hands out real ids (track_ids=True)")
        self.model = model
        self.cache = cache
        self.max_running = max_running
        self.inject = inject
        self.publish = publish
        self.page_size = cache.page_size
        pool = cache.pool
        limits = {
            kind: pool.budgets[pool.resource_of(kind)] // pool.unit_bytes(kind)
            for kind in pool.costs
        }
        self.store = TensorStore(model.layout, cache.page_size, model.dtype, limits)
        self.memory = MemoryCheck(cache, self.store, check_tree=check_tree)
        self.memory.check_setup()
        self.faults = FaultLog()
        self.transfer = Transfer(model, self.store, self.faults, check_owners=check_owners)
        if tiers is not None and tiers.page != cache.page_size:
            raise ConfigError(
                f"tiers of {tiers.page}-token pages under a cache of {cache.page_size}"
            )
        self.tiers = tiers
        self.transfer.tiers = tiers
        self.checkpoints = Checkpointer(cache, self.transfer, self.faults, inject=inject)
        self.spec = (
            None
            if spec_decode is None
            else SpecDecoder(model, spec_decode, self.checkpoints, self.faults, inject=inject)
        )
        self.on_token = on_token
        #: disaggregated prefill/decode (``hycache.engine.disagg``): the prefill side hands
        #: its prefilled prompt to a sink, the decode side loads it from a source
        self.prefill_sink: PrefillSink | None = None
        self.prefill_source: PrefillSource | None = None
        self.requests_done = 0
        self.cache_clears = 0

    # ------------------------------------------------------------------ scheduling
    def run(self, requests: Iterable[EngineRequest] | RequestSource) -> list[RequestResult]:
        """Run every request (interleaving up to ``max_running``); results in finish order."""
        source = requests if isinstance(requests, RequestSource) else ListSource(requests)
        scheduler = Scheduler(self, source)
        try:
            while True:
                step = scheduler.step()
                if step is Step.DONE:
                    return scheduler.results
                if step is Step.IDLE:
                    raise RuntimeError("request source has nothing ready and nothing is running")
        finally:
            scheduler.close()  # an error stopped the run: abort what is still in flight

    def request_ended(self, result: RequestResult) -> None:
        """A request admitted earlier ended (done or aborted): count it, check the memory."""
        if result.status == "done":
            self.requests_done += 1
        self.memory.check()

    def admit_request(self, request: EngineRequest, *, idle: bool) -> Lease | Wait | RequestResult:
        """Admit ``request``: its lease, a ``Wait``, or a failed result (it cannot fit).
        ``idle``: nothing else is in flight, so a ``Wait`` clears the cache and retries."""
        self.check_request(request)
        try:
            outcome = self._admit_once(request)
            if isinstance(outcome, Wait) and idle:
                # Nothing else is in flight, yet the request's own locked hit path keeps the
                # working set from fitting: every entry is evictable, so drop them and retry.
                self.cache.clear()
                self.cache_clears += 1
                outcome = self._admit_once(request)
                if isinstance(outcome, Wait):
                    raise CapacityError(f"request {request.rid!r} does not fit an empty cache")
        except CapacityError as exc:
            return RequestResult(request, "failed", error=str(exc))
        return outcome

    def check_request(self, request: EngineRequest) -> None:
        """ConfigError unless ``request`` can run on this model (tokens, ids, lengths)."""
        if request.max_new_tokens < 1:
            raise ConfigError("a request must generate at least one token")
        if not request.prompt:
            raise ConfigError("a request needs at least one prompt token")
        vocab = self.model.vocab_size
        if any(not 0 <= t < vocab for t in request.prompt):
            raise ConfigError(f"request {request.rid!r}: token ids must be in [0, {vocab})")

    def _admit_once(self, request: EngineRequest) -> Lease | Wait:
        return self.cache.admit(
            request.prompt,
            max_new_tokens=request.max_new_tokens,
            namespace=request.namespace,
            session=request.session,
        )

    def end_session(self, session: str) -> None:
        """The session will send no more requests soon: its cached entries lose the protection
        of session-aware eviction (``HybridPrefixCache.end_session``). A later request of the
        session opens it again."""
        self.cache.end_session(session)

    # ------------------------------------------------------------------ one request
    def process(
        self, request: EngineRequest, lease: Lease, result: RequestResult
    ) -> Generator[None, None, None]:
        """Run an admitted request, one chunk or token per ``next``; closing the generator
        early aborts the lease."""
        try:
            yield from self._steps(request, lease, result)
        except BaseException:
            if lease.active:
                self.cache.abort(lease)
            raise
        result.status = "done"

    def _steps(
        self, request: EngineRequest, lease: Lease, result: RequestResult
    ) -> Generator[None, None, None]:
        started = time.perf_counter()
        prompt = list(request.prompt)
        n = len(prompt)
        ns = request.namespace
        tags = PrefixTags(ns, encode_tokens(prompt))
        dc = self.model.new_cache()
        extension = self._extend(lease, ns, result)
        kv_start = self.transfer.restore(lease, dc, tags, result.violations, extension)
        if extension is not None and kv_start.get("swa", 0) > lease.hit:
            # the window before the extension's end is all the SWA KV this request holds
            # beyond the device's hit: the cache must not file pages for the rest
            self.cache.window_loaded_from(lease, kv_start["swa"])
        start = lease.hit if extension is None else extension.end
        planned = {cp.position: cp.reason for cp in lease.plan.checkpoints}
        ends = {e for e in lease.plan.chunk_ends if e > start} | {n}
        ends |= {p for p in planned if start < p < n}
        deferred: list[Deferred] = []
        checkpoints = self.checkpoints
        if start in planned and start > lease.hit:
            # the tiers' state is the state at this planned checkpoint
            checkpoints.checkpoint(lease, dc, tags, start, planned[start], deferred, result)
        if self.inject == "off-grid" and not checkpoints.cache_misplaces():
            # snapshot a few tokens late: the chunk is cut there so the state exists
            shift = max(1, self.page_size // 2)
            ends |= {p + shift for p in planned if lease.hit < p and p + shift < n}
        tokens = list(prompt)
        pos = start
        if self.prefill_source is not None:
            if extension is not None:
                raise ConfigError("a disaggregated decode side runs without tiers")
            pos = self.prefill_source.receive(lease, dc, result)
            ends = {e for e in ends if e > pos} | {n}
        logits: torch.Tensor | None = None
        in_place = lease.kv_read_end > start
        for end in sorted(ends):
            logits = self.model.forward(dc, tokens[pos:end], pos)
            pos = end
            if in_place and pos >= lease.kv_read_end:
                # from here on the prompt attends to the cached KV the lease reads in place
                self.transfer.read_in_place(lease, dc, kv_start, tags, result.violations)
                result.in_place_tokens = lease.kv_read_end - lease.hit
                in_place = False
            checkpoints.flush(lease, dc, tags, deferred, pos, result, after_forward=True)
            if end in planned:
                checkpoints.checkpoint(lease, dc, tags, end, planned[end], deferred, result)
            yield
        if logits is None or pos != n:
            raise IntegrityError(f"prefill stopped at {pos} of {n} tokens")
        result.prefill_s = time.perf_counter() - started
        self.faults.end_request(lease.request_id)
        self.transfer.kv_to_tiers(dc, bytes(lease.key), ns, kv_start, start, n)
        if self.publish:
            published = self.cache.publish(lease)
            if published.cached_tokens and self.inject == "unwritten-publish":
                # the bug: the prompt's pages are cached now but written only at finish
                for kind, refs in published.pages.items():
                    pages = self.store.pages[kind]
                    stale = []
                    for ref in refs:
                        pages.ensure(ref.page)
                        if pages.owner[ref.page] != tags.tag(ref.start + self.page_size):
                            stale.append(ref.page)
                    self.faults.pages_corrupted(kind, stale)
            elif published.cached_tokens:
                self.transfer.scatter(bytes(lease.key), ns, dc, kv_start, pos, published.pages)
        if self.prefill_sink is not None:
            self.prefill_sink.send(lease, dc)
        result.logits.append(logits)
        pick = make_picker(request.sampling)
        output = [pick(logits)]
        result.output = output
        stopped = self._stop_after(request, result, output[-1])
        if self.spec is not None and (request.sampling is None or request.sampling.greedy):
            decoded = yield from self.spec.decode(
                lease,
                request,
                result,
                dc,
                tokens,
                pos,
                planned,
                deferred,
                lambda token: self._stop_after(request, result, token),
            )
            pos, stopped = decoded.pos, decoded.stopped
        while len(output) < request.max_new_tokens and not stopped:  # plain decoding
            token = output[-1]
            tokens.append(token)
            logits = self.model.forward(dc, [token], pos)
            pos += 1
            tags = PrefixTags(ns, encode_tokens(tokens))
            checkpoints.flush(lease, dc, tags, deferred, pos, result, after_forward=True)
            if pos in planned:
                checkpoints.checkpoint(lease, dc, tags, pos, planned[pos], deferred, result)
            result.logits.append(logits)
            output.append(pick(logits))
            stopped = self._stop_after(request, result, output[-1])
            yield
        result.output = output
        result.finish_reason = "stop" if stopped else "length"
        fed = output[:-1]
        if self.inject == "stale-tail":
            fed = output  # the bug: the last token's KV was never computed
        if fed:
            self.cache.extend(lease, fed)
        full_key = bytes(lease.full_key)  # the engine's keys are encoded ids
        tags = PrefixTags(ns, full_key)
        checkpoints.flush(lease, dc, tags, deferred, pos, result, after_forward=False, force=True)
        final = lease.final_state_slot
        if final is not None or (self.tiers is not None and self.store.slots is not None):
            # finish() keeps this slot as the end-of-request state (when the request ends on
            # a page boundary): it must hold the state after every fed token
            self.transfer.write_state(dc, final, tags, lease.length)
        self.transfer.kv_to_tiers(dc, full_key, ns, kv_start, n - n % self.page_size, pos)
        finished = self.cache.finish(lease)
        self.transfer.scatter(full_key, ns, dc, kv_start, pos, finished.pages)

    def _extend(self, lease: Lease, ns: str | None, result: RequestResult) -> Extension | None:
        """What the tiers add to the device's hit (None without tiers or when they add
        nothing); counted on the result and the chain."""
        tiers = self.tiers
        if tiers is None:
            return None
        extension = plan_extension(
            tiers,
            bytes(lease.key),
            ns,
            hit=lease.hit,
            prompt_len=lease.prompt_len,
            window=self.model.layout.window,
        )
        if extension is None:
            return None
        for tier, count in extension.tokens.items():
            tiers.hit_tokens[tier] += count
        tiers.foreign_tokens += extension.foreign
        result.tier_tokens = extension.end - extension.hit
        return extension

    def _stop_after(self, request: EngineRequest, result: RequestResult, token: int) -> bool:
        """Tell ``on_token`` about ``token``; whether the request ends after it."""
        stop = self.on_token is not None and self.on_token(result, token)
        return stop or token in request.stop_token_ids

    # ------------------------------------------------------------------ reference
    def run_cold(self, prompt: Sequence[int], max_new_tokens: int) -> RequestResult:
        """The same request without any cache: one prefill of the whole prompt, then greedy
        decode. Touches neither the cache nor the store."""
        request = EngineRequest(tuple(prompt), max_new_tokens)
        result = RequestResult(request, "done")
        dc = self.model.new_cache()
        started = time.perf_counter()
        logits = self.model.forward(dc, list(prompt), 0)
        result.prefill_s = time.perf_counter() - started
        pos = len(prompt)
        result.logits.append(logits)
        output = [greedy_pick(logits)]
        while len(output) < max_new_tokens:
            logits = self.model.forward(dc, [output[-1]], pos)
            pos += 1
            result.logits.append(logits)
            output.append(greedy_pick(logits))
        result.output = output
        return result
