"""SWA: sliding-window KV. Position p is reusable when the window before it is still live.

With window W the model attends W keys including the query, so resuming at prefix length p
needs KV of positions ``[max(0, p - W + 1), p)``. Dropped (tombstoned) ranges are nodes whose
SWA data is ``None``; the tree splits nodes so a node is either wholly live or wholly dropped.

Windows slide (an insert with a :class:`hycache.tree.window.SlidePlan`, what a finishing or
publishing request does): SWA KV that no later request can read is inserted as a tombstone.
The points a later request can resume at on an inserted path ``[0, L)`` (the *anchors*) are L
(the next turn of a conversation extends the path), the points the caller names (the cache:
where the same prompt sent again resumes, and the states it stores), every recurrent state on
the path and every branch point (a node boundary where another cached path leaves this one);
besides, every page boundary below ``prefix`` (the cache: the prompt, when the model has no
recurrent layers and so a later request may resume at any prefix of it). The insert fills SWA
pages only

* for positions below ``prefix`` or less than ``max(W - 1, 1)`` before an anchor, in whole
  pages (at least the page before each anchor: a leaf is never a tombstone), and
* for positions the inserting request computed itself (from ``start``, its hit, rounded up to
  a page): KV before it came from the tree, and a tombstone there has nothing to revive it.

Everything else on the path stays or becomes a tombstone; live SWA KV already in the tree is
never dropped by an insert, and a tombstone within the kept ranges is revived.

Upstream facts this follows. SGLang (``python/sglang/srt/mem_cache/swa_radix_cache.py``):
``insert(..., swa_evicted_seqlen)`` adds the part of a request below ``swa_evicted_seqlen``
that the tree lacks as a tombstone node (full KV kept, SWA freed), never leaves a tombstone
leaf, and revives a tombstone it passes with the request's SWA KV where the request still
holds it (past the prefix it got from the tree and past ``swa_evicted_seqlen``);
``ScheduleBatch._evict_swa`` (``managers/schedule_batch.py``) advances ``swa_evicted_seqlen``
while a request runs: positions more than window + page behind it, never below what the tree
already holds. vLLM's ``SlidingWindowManager`` (``vllm/v1/core/single_type_kv_cache_manager.py``)
skips ``max(0, n - window + 1)`` tokens and ``remove_skipped_blocks`` frees those whole blocks
of a running request (a freed block that was cached keeps its hash until reused). Both accept a
prefix only when the window before it is cached. Where hycache differs: SGLang inserts prompt
chunks with their SWA and tombstones them later under SWA memory pressure (LRU, root side
first); hycache keeps at insert only what an anchor needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from hycache.components.full import PagedKVComponent
from hycache.errors import ConfigError
from hycache.memory.base import PageStore
from hycache.tree.node import Node


class SlidingWindowComponent(PagedKVComponent):
    kind: ClassVar[str] = "swa"
    bounds_kv: ClassVar[bool] = False

    def __init__(
        self,
        store: PageStore,
        window: int,
        *,
        bytes_per_page: int = 0,
        name: str | None = None,
    ) -> None:
        super().__init__(store, bytes_per_page=bytes_per_page, name=name)
        if window < 1:
            raise ConfigError(f"a sliding window must be >= 1 token, got {window}")
        self.window = window

    def fill_ranges(
        self, anchors: Sequence[int], start: int, end: int, prefix: int = 0
    ) -> list[tuple[int, int]]:
        """The window rule (module docstring): ``[0, prefix)`` and, per anchor a,
        ``[a - max(W - 1, 1), a)``, rounded out to pages, clipped to ``[start rounded up to a
        page, end)``, merged."""
        page = self.page_size
        reach = max(self.window - 1, 1)
        first = -(-start // page) * page
        raw = [(max(0, a - reach), a) for a in set(anchors)]
        if prefix > 0:
            raw.append((0, prefix))
        spans: list[tuple[int, int]] = []
        for lo, hi in sorted(raw):
            lo = max(lo - lo % page, first)
            hi = min(hi, end)
            if lo >= hi:
                continue
            if spans and lo <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
            else:
                spans.append((lo, hi))
        return spans

    def deepest_accepted(self, path: Sequence[Node], bound: int) -> int:
        """Deepest page-aligned p <= bound whose last ``window - 1`` positions are all live."""
        need = self.window - 1
        page = self.page_size
        if need == 0:
            return bound
        slot = self.slot
        best = 0
        run_start = 0  # start of the live run we are in (0 = connected to the root)
        for node in path:
            if node.start >= bound:
                break
            if node.data[slot] is None:
                run_start = node.end
                continue
            top = min(node.end, bound)
            candidate = top - top % page
            if candidate - run_start >= need or run_start == 0:
                best = candidate
        return best

    def deepest_accepted_in(self, path: Sequence[Node], bound: int, slots: Sequence[int]) -> int:
        """``deepest_accepted`` where a node is live when any of ``slots`` holds its pages."""
        need = self.window - 1
        page = self.page_size
        if need == 0:
            return bound
        best = 0
        run_start = 0
        for node in path:
            if node.start >= bound:
                break
            if all(node.data[s] is None for s in slots):
                run_start = node.end
                continue
            top = min(node.end, bound)
            candidate = top - top % page
            if candidate - run_start >= need or run_start == 0:
                best = candidate
        return best

    def __repr__(self) -> str:
        return f"SlidingWindowComponent(window={self.window})"
