"""Sliding windows in the cache: what a request's insert keeps of its SWA KV, and what a
running request's working set charges for it.

Inserts (``finish`` and ``publish``) slide windows (:func:`hycache.tree.window.plan_slide`, the
rule in :mod:`hycache.components.swa`) with, for a request:

* ``start`` = its hit: it computed its KV from there on; before it, the tree's KV is what it
  read, and a tombstone there stays one. An engine that loaded the prompt beyond the hit
  from storage of its own holds the SWA KV only from the window before where it resumed
  (``Lease.window_from``): the start is that, and the SWA KV between the hit and it stays
  absent (a tombstone), since no one wrote it to the pages the insert would file it under;
* anchors = where the same prompt sent again resumes (``prompt_len - 1`` rounded down to a
  page: its last token is always recomputed) and the positions of the states it hands over;
* ``prefix`` = its prompt when the model has no recurrent layers: a later request may then
  resume at any page boundary of a prompt (it shares a prefix of it: a document, a system
  prompt), so the prompt's SWA KV stays and only the output beyond the window is dropped, as
  SGLang drops a decoding request's out-of-window SWA KV (``ScheduleBatch._evict_swa``) while
  its prompt chunks went into the tree whole. With recurrent layers a request resumes only at
  a stored state, so the anchors say everything: SWA KV that no state, branch, prompt end or
  insert end reads is not kept.

Working sets: a running request frees the SWA KV that falls out of its window and that no
insert of its will keep (vLLM's ``SlidingWindowManager.remove_skipped_blocks``, SGLang's
``_evict_swa``), so its reservation per SWA group is

* with recurrent layers: the window before its current chunk plus the chunk,
  ``ceil((W - 1 + chunk) / page) + 1`` pages at most (no chunk size: every page); what its
  inserts keep beyond that (the windows before its states) is allocated when they run;
* without: its whole prompt (the inserts keep it) plus, for its output, one window and a
  page at most, ``ceil(W / page) + 1`` pages (SGLang's decoding request keeps no more).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hycache.cache.lease import Lease


@dataclass(frozen=True)
class SlideArgs:
    """The request-side arguments of ``plan_slide`` for one insert."""

    start: int
    anchors: tuple[int, ...]
    prefix: int


def slide_args(
    lease: Lease, page: int, *, has_states: bool, states: Iterable[int] = ()
) -> SlideArgs:
    """What an insert by ``lease`` passes to ``plan_slide`` (module docstring); ``states``:
    positions of the states it hands over."""
    resend = lease.prompt_len - 1
    resend -= resend % page
    anchors = tuple(sorted({*states, resend} - {0}))
    start = max(lease.hit, lease.window_from)
    return SlideArgs(start, anchors, 0 if has_states else lease.prompt_len)


def window_pages(
    window: int, tokens: int, output: int, chunk: int | None, page: int, *, keeps_prompt: bool
) -> int:
    """Pages of one SWA group a running request reserves for ``tokens`` new tokens, the last
    ``output`` of them decoded, prefilled in chunks of ``chunk`` (None: one); ``keeps_prompt``:
    its inserts keep the prompt's SWA KV (no recurrent layers). Module docstring."""
    pages = -(-tokens // page)
    if keeps_prompt:
        prompt = -(-(tokens - output) // page)
        return min(pages, prompt + -(-window // page) + 1)
    if chunk is None:
        return pages
    return min(pages, -(-(window - 1 + chunk) // page) + 1)
