"""Policy contracts: where to checkpoint, what to admit, what to evict.

Positions are prefix lengths in tokens. A *checkpoint* at p is a copy of the recurrent state
after consuming p tokens, taken before the next chunk overwrites it.

    prompt   [0 ........................................ n)   decode [n ...... n + out)
    reused   [0 ...... start)  (the hit; start <= n - 1: the last prompt token is recomputed)
    prefill              [start ... c1)[c1 ... c2) ... [ck ... n)     chunk ends c1 < c2 < ... < n
    checkpoints                     ^c1    ^k   ^c2                    chunk ends, or in-kernel
    in-kernel point k: c1 < k < c2 with (k - c1) % kernel_chunk == 0; the chunked prefill kernel
    computes the state there anyway (its intermediate states), so it is copied out of the
    forward pass of [c1, c2) without cutting it (SGLang's extra_buffer). Every other checkpoint
    must be a chunk end: one more chunk, one more forward pass.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

from hycache.compiled import mypyc_attr, own_abc_caches

#: what ``CheckpointPolicy.offgrid`` may say
OFFGRID_MODES = ("drop", "misplace")


#: the reason of a state planned only because free memory held it (it displaced nothing): a
#: runtime may drop it rather than pay a forward pass for it
ROOM = "room"


@dataclass(frozen=True)
class Checkpoint:
    """A planned state copy at ``position``; ``reason`` says which rule asked for it:
    "chunk", "prompt_end", "branch", "interval", "decode", "final", ``ROOM``, ..."""

    position: int
    reason: str


@dataclass(frozen=True)
class PlanInput:
    """What a checkpoint policy sees when a request is admitted."""

    prompt_len: int
    start: int  # reused prefix length: prefill starts here
    kv_hit: int  # attention-only match (page-aligned, capped at prompt_len - 1)
    page_size: int
    token_budget: int | None  # max tokens per prefill chunk; None = one chunk
    max_new_tokens: int
    #: per checkpoint reason, (states stored so far, of which reused): what adaptive planners
    #: learn from
    reason_record: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: the recurrent kernels' chunk (``RecurrentGroup.kernel_chunk``): a state that far apart
    #: from a chunk's start can be copied without ending the chunk; None: only at chunk ends
    kernel_chunk: int | None = None
    #: states that fit into the cache's free memory now, after this request's working set:
    #: that many checkpoints displace nothing (None: unknown)
    free_states: int | None = None
    #: tokens of attention KV that weigh as much as one state (``ModelSpec.state_bytes`` over
    #: ``kv_bytes_per_token``; None: unknown)
    state_kv_tokens: int | None = None
    #: requests in flight when this one is admitted: in an engine step each one decoding
    #: takes a token of the step's ``token_budget``
    in_flight: int = 0


@dataclass(frozen=True)
class PrefillPlan:
    """Chunk ends (increasing, the last is ``prompt_len``) and the checkpoints to take: prefill
    checkpoints are chunk ends or in-kernel points (module docstring); decode checkpoints are
    positions past the prompt."""

    chunk_ends: tuple[int, ...]
    checkpoints: tuple[Checkpoint, ...]
    keep_final_state: bool  # donate the running state at the end of the request


@mypyc_attr(allow_interpreted_subclasses=True)
class CheckpointPolicy(ABC):
    """Decides where states are copied. Pure: no cache mutation."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own_abc_caches(cls)

    #: grid the recurrent group's states must land on to be publishable (None: any page)
    state_grid: int | None = None
    #: whether recurrent states are cached at all (vLLM ``--mamba-cache-mode none``: no)
    caches_states: bool = True
    #: the tree keeps a request's KV only up to its deepest stored state (SGLang's
    #: ``extra_buffer`` inserts up to the tracked state, unified_radix_cache.py)
    kv_to_last_state: bool = False
    #: a checkpoint off ``state_grid``: ``"drop"`` it, or ``"misplace"`` it at the grid
    #: position below (vLLM #54076, kept to test checkers: silently wrong)
    offgrid: str = "drop"

    @abstractmethod
    def plan(self, request: PlanInput) -> PrefillPlan: ...


own_abc_caches(CheckpointPolicy)
