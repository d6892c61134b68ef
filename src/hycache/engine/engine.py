"""The reference engine: runs requests through a real model with a ``HybridPrefixCache``.

Per request (see ``hycache.cache`` for the lease lifecycle):

1. ``admit`` the prompt. On a hit, gather the KV pages of the path nodes up to ``lease.hit``
   (SWA layers: only the window before the hit), copy the cached state ``lease.source_state``
   into a private one (copy-on-write: a clone; the cached slot is never written by a reader),
   and build the model's own cache object (``DynamicCache`` with its per-layer classes) from
   them.
2. Prefill the chunks the cache planned (``plan.chunk_ends``, split further at every planned
   checkpoint), always with explicit ``position_ids``. Right after the chunk that ends at a
   planned checkpoint, and before anything extends the state again, ask
   ``record_checkpoint`` for a slot and copy the state into it.
3. Decode greedily (decode-time checkpoints likewise), ``extend`` the lease with the tokens fed
   back, copy the running state into the lease's last state slot (``finish`` keeps it as the
   end-of-request state when the plan says so), ``finish``.
4. Scatter: walk the nodes the tree now holds for the request's path and write every KV page
   whose owner tag is not this prefix (new pages, and reused ids that still hold an earlier
   owner's data) from the request's KV.

Requests are interleaved (``max_running``): each step advances one request by one chunk or one
decode token, so several leases are in flight at once; a request the cache answers with
``Wait`` waits until others finish. After every request the pool is checked against its
budget.

Fault injection (``inject``), to prove the verifier catches what it must:

* ``late-snapshot``: a checkpoint is copied after the next chunk (or decode step) has already
  extended the state, and published at the planned position;
* ``off-grid``: a state is taken at a position other than the one it is published at (vLLM:
  the cache's own #54076 reproduction, ``offgrid="misplace"`` with a finer scheduler grid; other
  presets: the engine snapshots a few tokens past the planned position);
* ``stale-tail``: the engine extends the lease by the last generated token too, whose KV it
  never computed, and caches that last page as if full: its unwritten tail keeps whatever the
  page id's previous owner left there, and later hits read it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from hycache.cache import HybridPrefixCache
from hycache.components.full import PagedKVComponent
from hycache.engine.model import LoadedModel
from hycache.engine.store import PrefixTags, TensorStore
from hycache.errors import CapacityError, ConfigError
from hycache.lease import Lease, Wait
from hycache.tree.keys import encode_tokens

if TYPE_CHECKING:
    import torch

INJECTS = ("late-snapshot", "off-grid", "stale-tail")


@dataclass(frozen=True)
class EngineRequest:
    """A prompt to run: ``max_new_tokens`` greedy tokens are generated (at least 1)."""

    prompt: tuple[int, ...]
    max_new_tokens: int = 1
    namespace: str | None = None
    session: str | None = None
    rid: str = ""


@dataclass
class RequestResult:
    """What a request did. ``logits[0]``: the last prompt token's logits; ``logits[i]``: the
    logits after feeding ``output[i - 1]``. ``status``: "done" or "failed" (``error`` says
    why; nothing of it was cached)."""

    request: EngineRequest
    status: str
    hit: int = 0
    kv_hit: int = 0
    output: list[int] = field(default_factory=list)
    logits: list[torch.Tensor] = field(default_factory=list)
    error: str | None = None
    checkpoints: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    prefill_s: float = 0.0
    waits: int = 0


@runtime_checkable
class RequestSource(Protocol):
    """Where the scheduler pulls requests from (sessions make some wait for others)."""

    def next_ready(self) -> EngineRequest | None:
        """The next request that may start now (None: none right now)."""

    def done(self, result: RequestResult) -> None:
        """A request pulled from here finished (or failed)."""

    @property
    def exhausted(self) -> bool:
        """No request is left to hand out."""


class ListSource:
    """All requests ready at once, in order."""

    def __init__(self, requests: Iterable[EngineRequest]) -> None:
        self._queue = deque(requests)

    def next_ready(self) -> EngineRequest | None:
        return self._queue.popleft() if self._queue else None

    def done(self, result: RequestResult) -> None:
        pass

    @property
    def exhausted(self) -> bool:
        return not self._queue


@dataclass
class _Deferred:
    """A checkpoint the injected bugs copy later than they should."""

    position: int
    reason: str
    due: int  # copy once this many tokens have been consumed (-1: after the next forward)


@dataclass
class _Flight:
    """A request in flight: its result so far, its step generator and its lease."""

    result: RequestResult
    steps: Generator[None, None, None]
    lease: Lease


class Engine:
    """Runs requests on ``model`` with ``cache``; the tensors behind the cache's ids live in
    ``self.store``."""

    def __init__(
        self,
        model: LoadedModel,
        cache: HybridPrefixCache,
        *,
        max_running: int = 1,
        inject: str | None = None,
        check_owners: bool = True,
        check_tree: bool = False,
    ) -> None:
        if inject is not None and inject not in INJECTS:
            raise ConfigError(f"unknown inject {inject!r}; known: {', '.join(INJECTS)}")
        if max_running < 1:
            raise ConfigError(f"max_running must be >= 1, got {max_running}")
        if not getattr(cache.pool, "track_ids", True):
            raise ConfigError("the engine needs a cache that hands out real ids (track_ids=True)")
        self.model = model
        self.cache = cache
        self.max_running = max_running
        self.inject = inject
        self.check_owners = check_owners
        self.check_tree = check_tree
        self.page_size = cache.page_size
        pool = cache.pool
        limits = {
            kind: pool.budgets[pool.resource_of(kind)] // pool.unit_bytes(kind)
            for kind in pool.costs
        }
        self.store = TensorStore(model.layout, cache.page_size, model.dtype, limits)
        self.kv_components: dict[str, PagedKVComponent] = {c.kind: c for c in cache.kv_components}
        self._check_accounting()
        self.window = model.layout.window
        self.unfilled_pages = 0
        self.requests_done = 0
        self.cache_clears = 0

    # ------------------------------------------------------------------ setup checks
    def _check_accounting(self) -> None:
        """The cache's unit kinds are the model's, and every unit's tensors are exactly the
        bytes the pool charges it for (or fewer: vLLM's padding)."""
        pool = self.cache.pool
        kinds = set(self.store.pages) | ({"recurrent"} if self.store.slots else set())
        if kinds != set(pool.costs):
            raise ConfigError(
                f"cache unit kinds {sorted(pool.costs)} do not match the model's {sorted(kinds)}"
            )
        for kind, pages in self.store.pages.items():
            data = pool.costs[kind].data
            if pages.bytes_per_page != data:
                raise ConfigError(
                    f"{kind} page: the model's tensors are {pages.bytes_per_page} B, the pool "
                    f"accounts {data} B"
                )
        if self.store.slots is not None:
            data = pool.costs["recurrent"].data
            if self.store.slots.bytes_per_slot != data:
                raise ConfigError(
                    f"state slot: the model's tensors are {self.store.slots.bytes_per_slot} B, "
                    f"the pool accounts {data} B"
                )

    def live_tensor_bytes(self) -> int:
        """Bytes of tensor data behind the ids the pool has handed out right now."""
        pool = self.cache.pool
        total = sum(pool.units[k] * p.bytes_per_page for k, p in self.store.pages.items())
        if self.store.slots is not None:
            total += pool.units["recurrent"] * self.store.slots.bytes_per_slot
        return total

    def check_memory(self) -> None:
        """Assert the pool's invariants and that nothing exceeds the budget."""
        pool = self.cache.pool
        pool.check_integrity()
        for resource, used in pool.used.items():
            assert used <= pool.budgets[resource], f"{resource}: {used} > {pool.budgets[resource]}"
        assert self.live_tensor_bytes() <= pool.used_bytes <= pool.budget_bytes
        if self.check_tree:
            self.cache.check_integrity()

    # ------------------------------------------------------------------ scheduling
    def run(self, requests: Iterable[EngineRequest] | RequestSource) -> list[RequestResult]:
        """Run every request (interleaving up to ``max_running``); results in finish order."""
        source = requests if isinstance(requests, RequestSource) else ListSource(requests)
        running: list[_Flight] = []
        try:
            return self._schedule(source, running)
        finally:
            for flight in running:  # an error stopped the run: abort what is still in flight
                flight.steps.close()
                if flight.lease.active:
                    self.cache.abort(flight.lease)

    def _schedule(self, source: RequestSource, running: list[_Flight]) -> list[RequestResult]:
        results: list[RequestResult] = []
        waiting: deque[EngineRequest] = deque()
        waits: dict[int, int] = {}
        while True:
            while len(running) < self.max_running:
                request = waiting[0] if waiting else source.next_ready()
                if request is None:
                    break
                outcome = self._admit(request, idle=not running)
                if isinstance(outcome, Wait):
                    waits[id(request)] = waits.get(id(request), 0) + 1
                    if not waiting:
                        waiting.append(request)
                    break
                if waiting and waiting[0] is request:
                    waiting.popleft()
                if isinstance(outcome, RequestResult):  # failed cleanly
                    outcome.waits = waits.pop(id(request), 0)
                    results.append(outcome)
                    source.done(outcome)
                    continue
                result = RequestResult(request, "running", outcome.hit, outcome.kv_hit)
                result.waits = waits.pop(id(request), 0)
                running.append(_Flight(result, self._process(request, outcome, result), outcome))
            if not running:
                if waiting or not source.exhausted:
                    if waiting:
                        continue  # idle now: the next admit runs with idle=True
                    raise RuntimeError("request source has nothing ready and nothing is running")
                break
            for flight in list(running):
                try:
                    next(flight.steps)
                except StopIteration:
                    running.remove(flight)
                    results.append(flight.result)
                    self.requests_done += 1
                    self.check_memory()
                    source.done(flight.result)
        return results

    def _admit(self, request: EngineRequest, *, idle: bool) -> Lease | Wait | RequestResult:
        if request.max_new_tokens < 1:
            raise ConfigError("a request must generate at least one token")
        if not request.prompt:
            raise ConfigError("a request needs at least one prompt token")
        vocab = self.model.vocab_size
        if any(not 0 <= t < vocab for t in request.prompt):
            raise ConfigError(f"request {request.rid!r}: token ids must be in [0, {vocab})")
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

    def _admit_once(self, request: EngineRequest) -> Lease | Wait:
        return self.cache.admit(
            request.prompt,
            max_new_tokens=request.max_new_tokens,
            namespace=request.namespace,
            session=request.session,
        )

    # ------------------------------------------------------------------ one request
    def _process(
        self, request: EngineRequest, lease: Lease, result: RequestResult
    ) -> Generator[None, None, None]:
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
        import torch

        started = time.perf_counter()
        prompt = list(request.prompt)
        n = len(prompt)
        ns = request.namespace
        tags = PrefixTags(ns, encode_tokens(prompt))
        dc = self.model.new_cache()
        kv_start = self._restore(lease, dc, tags, result.violations)
        planned = {cp.position: cp.reason for cp in lease.plan.checkpoints}
        ends = set(lease.plan.chunk_ends) | {p for p in planned if lease.hit < p < n}
        deferred: list[_Deferred] = []
        if self.inject == "off-grid" and not self._cache_misplaces():
            # snapshot a few tokens late: the chunk is cut there so the state exists
            shift = max(1, self.page_size // 2)
            ends |= {p + shift for p in planned if lease.hit < p and p + shift < n}
        tokens = list(prompt)
        pos = lease.hit
        logits: torch.Tensor | None = None
        for end in sorted(ends):
            logits = self.model.forward(dc, tokens[pos:end], pos)
            pos = end
            self._flush(lease, dc, tags, deferred, pos, result, after_forward=True)
            if end in planned:
                self._checkpoint(lease, dc, tags, end, planned[end], deferred, result)
            yield
        assert logits is not None and pos == n
        result.prefill_s = time.perf_counter() - started
        result.logits.append(logits)
        output = [int(torch.argmax(logits))]
        while len(output) < request.max_new_tokens:
            token = output[-1]
            tokens.append(token)
            logits = self.model.forward(dc, [token], pos)
            pos += 1
            tags = PrefixTags(ns, encode_tokens(tokens))
            self._flush(lease, dc, tags, deferred, pos, result, after_forward=True)
            if pos in planned:
                self._checkpoint(lease, dc, tags, pos, planned[pos], deferred, result)
            result.logits.append(logits)
            output.append(int(torch.argmax(logits)))
            yield
        result.output = output
        fed = output[:-1]
        if self.inject == "stale-tail":
            fed = output  # the bug: the last token's KV was never computed
        if fed:
            self.cache.extend(lease, fed)
        full_key = lease.full_key
        tags = PrefixTags(ns, full_key)
        self._flush(lease, dc, tags, deferred, pos, result, after_forward=False, force=True)
        running = lease.working.get("recurrent", ())
        if self.store.slots is not None and running and lease.plan.keep_final_state:
            # finish() keeps the last running slot as the end-of-request state (when the
            # request ends on a page boundary): it must hold the state after every fed token
            self._write_state(dc, running[-1], tags.tag(lease.length))
        self.cache.finish(lease)
        self._scatter(full_key, ns, dc, kv_start, pos)

    def _cache_misplaces(self) -> bool:
        return self.cache.offgrid == "misplace"

    # ------------------------------------------------------------------ restore
    def _restore(
        self, lease: Lease, dc: Any, tags: PrefixTags, violations: list[str]
    ) -> dict[str, int]:
        """Load the reused prefix into ``dc``; per KV kind the first position loaded."""
        hit = lease.hit
        kv_start = dict.fromkeys(self.store.pages, 0)
        if hit == 0:
            return kv_start
        page = self.page_size
        nodes = self.cache.tree.nodes_on(lease.key, lease.namespace, length=hit)
        assert nodes and nodes[-1].end == hit, f"no node boundary at the hit {hit}"
        for kind, pages in self.store.pages.items():
            component = self.kv_components[kind]
            lo = 0
            if kind == "swa":
                assert self.window is not None
                lo = max(0, hit - self.window + 1)
                lo -= lo % page
            ids: list[int] = []
            starts: list[int] = []
            for node in nodes:
                if node.end <= lo:
                    continue
                data: Sequence[int] | None = node.data[component.slot]
                assert data is not None, f"{kind} KV missing on {node} below the hit {hit}"
                for j, page_id in enumerate(data):
                    start = node.start + j * page
                    if start + page > lo:
                        ids.append(page_id)
                        starts.append(start)
            pages.ensure(max(ids))
            for page_id, start in zip(ids, starts, strict=True):
                if self.check_owners and pages.owner[page_id] != tags.tag(start + page):
                    violations.append(
                        f"{kind} page {page_id} read for positions [{start}, {start + page})"
                        " holds another prefix's KV"
                    )
            keys, values = pages.read(ids)
            for i, layer in enumerate(pages.layers):
                cache_layer = dc.layers[layer.index]
                cache_layer.update(
                    keys[i].transpose(0, 1).unsqueeze(0), values[i].transpose(0, 1).unsqueeze(0)
                )
                if kind == "swa":
                    cache_layer.cumulative_length = hit
            kv_start[kind] = lo
        slots = self.store.slots
        if slots is not None:
            source = lease.source_state
            assert source is not None, f"hit {hit} without a state to resume from"
            slots.ensure(source)
            if self.check_owners and slots.owner[source] != tags.tag(hit):
                violations.append(
                    f"state slot {source} restored at position {hit} was not taken there"
                )
            conv, rec = slots.read(source)
            self._load_state(dc, conv, rec)
        return kv_start

    def _load_state(
        self, dc: Any, conv: list[torch.Tensor | None], rec: list[torch.Tensor | None]
    ) -> None:
        import torch

        for i, s in enumerate(self.model.layout.states):
            layer = dc.layers[s.layer]
            window = conv[i]
            if window is not None:
                full = torch.zeros((*window.shape[:-1], s.kernel), dtype=window.dtype)
                full[..., 1:] = window  # the oldest column is never read again
                layer.update_conv_state(full.unsqueeze(0), s.state_idx, conv_kernel_size=s.kernel)
            state = rec[i]
            if state is not None:
                layer.update_recurrent_state(state.unsqueeze(0), s.state_idx)

    # ------------------------------------------------------------------ checkpoints
    def _read_state(self, dc: Any) -> tuple[list[torch.Tensor | None], list[torch.Tensor | None]]:
        conv: list[torch.Tensor | None] = []
        rec: list[torch.Tensor | None] = []
        for s in self.model.layout.states:
            layer = dc.layers[s.layer]
            window = layer.conv_states[s.state_idx] if s.conv_shape is not None else None
            conv.append(None if window is None else window[0, ..., 1:])
            state = layer.recurrent_states[s.state_idx] if s.rec_shape is not None else None
            rec.append(None if state is None else state[0])
        return conv, rec

    def _write_state(self, dc: Any, slot: int, tag: bytes) -> None:
        assert self.store.slots is not None
        conv, rec = self._read_state(dc)
        self.store.slots.write(slot, conv, rec, tag)

    def _checkpoint(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        deferred: list[_Deferred],
        result: RequestResult,
    ) -> None:
        """The state is at ``position`` now: copy it before anything extends it."""
        if self.store.slots is None:
            return
        if self.inject == "late-snapshot":
            deferred.append(_Deferred(position, reason, -1))
            return
        if self.inject == "off-grid" and not self._cache_misplaces():
            deferred.append(_Deferred(position, reason, position + max(1, self.page_size // 2)))
            return
        self._record(lease, dc, tags, position, reason, result)

    def _record(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        position: int,
        reason: str,
        result: RequestResult,
    ) -> None:
        """Copy the current state into a slot for ``position`` (which is where the engine
        believes it is; the injected faults call this when the state has moved on)."""
        slot = self.cache.record_checkpoint(lease, position, reason)
        if slot is not None:
            self._write_state(dc, slot, tags.tag(position))
            result.checkpoints.append(position)

    def _flush(
        self,
        lease: Lease,
        dc: Any,
        tags: PrefixTags,
        deferred: list[_Deferred],
        pos: int,
        result: RequestResult,
        *,
        after_forward: bool,
        force: bool = False,
    ) -> None:
        """Copy the deferred (faulty) checkpoints that are due."""
        for d in list(deferred):
            due = force or (d.due == -1 and after_forward) or (d.due != -1 and pos >= d.due)
            if due:
                deferred.remove(d)
                self._record(lease, dc, tags, d.position, d.reason, result)

    # ------------------------------------------------------------------ scatter
    def _scatter(
        self, full_key: bytes, ns: str | None, dc: Any, kv_start: dict[str, int], kv_len: int
    ) -> None:
        """Write the request's KV into every page of its cached path whose owner tag is not
        this prefix (new pages; reused ids still holding an earlier owner's data)."""
        import torch

        page = self.page_size
        tags = PrefixTags(ns, full_key)
        nodes = self.cache.tree.nodes_on(full_key, ns)
        for kind, pages in self.store.pages.items():
            component = self.kv_components[kind]
            lo = kv_start[kind]
            ids: list[int] = []
            starts: list[int] = []
            partial: list[tuple[int, int]] = []
            for node in nodes:
                data: Sequence[int] | None = node.data[component.slot]
                if data is None:
                    continue
                for j, page_id in enumerate(data):
                    start = node.start + j * page
                    tag = tags.tag(start + page)
                    pages.ensure(page_id)
                    if pages.owner[page_id] == tag:
                        continue
                    if start < lo:
                        # revived SWA KV this request never had: leave it unclaimed, a read
                        # of it is then reported as a violation
                        pages.owner[page_id] = None
                        self.unfilled_pages += 1
                    elif start + page > kv_len:
                        partial.append((page_id, start))  # only with the stale-tail fault
                    else:
                        ids.append(page_id)
                        starts.append(start)
            if not ids and not partial:
                continue
            sources_k = []
            sources_v = []
            for layer in pages.layers:
                cache_layer = dc.layers[layer.index]
                sources_k.append(cache_layer.keys[0].transpose(0, 1))  # [T, *k_shape]
                sources_v.append(cache_layer.values[0].transpose(0, 1))
                assert sources_k[-1].shape[0] == kv_len - lo, (kind, sources_k[-1].shape, kv_len)
            if ids:
                offsets = torch.tensor(starts, dtype=torch.long)[:, None] - lo
                index = (offsets + torch.arange(page)[None]).flatten()
                pages.write(
                    ids,
                    [s[index] for s in sources_k],
                    [s[index] for s in sources_v],
                    [tags.tag(s + page) for s in starts],
                )
            for page_id, start in partial:
                valid = kv_len - start
                pages.write_partial(
                    page_id,
                    valid,
                    [s[start - lo : kv_len - lo] for s in sources_k],
                    [s[start - lo : kv_len - lo] for s in sources_v],
                    tags.tag(start + page),
                )

    # ------------------------------------------------------------------ reference
    def run_cold(self, prompt: Sequence[int], max_new_tokens: int) -> RequestResult:
        """The same request without any cache: one prefill of the whole prompt, then greedy
        decode. Touches neither the cache nor the store."""
        import torch

        request = EngineRequest(tuple(prompt), max_new_tokens)
        result = RequestResult(request, "done")
        dc = self.model.new_cache()
        started = time.perf_counter()
        logits = self.model.forward(dc, list(prompt), 0)
        result.prefill_s = time.perf_counter() - started
        pos = len(prompt)
        result.logits.append(logits)
        output = [int(torch.argmax(logits))]
        while len(output) < max_new_tokens:
            logits = self.model.forward(dc, [output[-1]], pos)
            pos += 1
            result.logits.append(logits)
            output.append(int(torch.argmax(logits)))
        result.output = output
        return result
