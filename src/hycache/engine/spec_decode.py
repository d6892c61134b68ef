"""Speculative decoding in the reference engine: draft, verify in one forward, accept, copy
back, roll back.

Each decode step (one scheduler step) of a greedy request with ``Engine(spec_decode=...)``:

1. the prompt-lookup drafter (``hycache.engine.drafter``) proposes up to ``k`` tokens
   ``d1..dk`` continuing prompt + output (never more than the request may still emit);
2. one verification forward feeds ``[x0, d1..dk]`` (``x0``: the last emitted token, not fed
   yet) and returns the logits after each, with the recurrent state after each
   (``hycache.engine.draft_states``);
3. greedy acceptance: ``e_i = argmax(logits_i)`` is emitted; ``d(i+1)`` is accepted while it
   equals ``e_i``. The first mismatch emits the correction ``e_a`` and stops; if every draft
   token matches, ``e_k`` is the bonus token. A stop token (or ``on_token`` asking to stop)
   ends the step right after it. The emitted tokens are exactly what plain greedy decoding
   emits, one per fed token kept;
4. copy-back: the recurrent state after the last kept fed token (step ``a``) is copied into
   the running cache, and the attention KV of the rejected fed tokens is dropped, so the model's
   cache holds exactly prompt + kept tokens. Planned decode-time checkpoints inside the kept
   range are copied from their own recorded steps; none lies past the kept range.

Nothing of a rejected token can reach the hycache cache: the lease is extended only with
emitted tokens (``Engine`` feeds ``output[:-1]``), KV is scattered from the rolled-back model
cache (whose length ``Transfer.scatter`` checks), and every state copied into a slot is a
recorded state of a kept position. A draft of zero tokens is a plain one-token decode step.
Requests that sample (``Sampling`` with a temperature) decode plainly: acceptance by
rejection sampling is not implemented.

Fault ``wrong-accept-step``: copy back the step *after* the accepted one (the state has seen a
rejected token) whenever there is one; the request's next forward computes on it, so its
logits leave the plain greedy run's and ``hycache verify`` must fail.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hycache.engine.draft_states import StepRecorder
from hycache.engine.drafter import Drafter, SpecDecode, propose
from hycache.engine.sampling import greedy_pick
from hycache.engine.store import PrefixTags
from hycache.errors import ConfigError
from hycache.tree.keys import encode_tokens

if TYPE_CHECKING:
    from hycache.cache.lease import Lease
    from hycache.engine.checkpoints import Checkpointer, Deferred
    from hycache.engine.faults import FaultLog
    from hycache.engine.model import LoadedModel
    from hycache.engine.request import EngineRequest, RequestResult

WRONG_STEP = "wrong-accept-step"


def check_spec_inject(inject: str | None, spec: SpecDecode | None) -> None:
    """ConfigError when ``wrong-accept-step`` is asked for without speculative decoding."""
    if inject == WRONG_STEP and spec is None:
        raise ConfigError(f"--inject {WRONG_STEP} needs speculative decoding (--spec-decode)")


@dataclass
class SpecStats:
    """Counts over every request an engine decoded speculatively."""

    verifications: int = 0  # forwards that verified a non-empty draft
    plain_steps: int = 0  # decode steps without a draft
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0  # tokens emitted by decode steps (not the prefill's first token)


@dataclass(frozen=True)
class Decoded:
    """Where speculative decoding left a request: next position, whether it stopped."""

    pos: int
    stopped: bool


class SpecDecoder:
    """The speculative decode loop of one engine (see the module docstring)."""

    def __init__(
        self,
        model: LoadedModel,
        spec: SpecDecode,
        checkpoints: Checkpointer,
        faults: FaultLog,
        *,
        inject: str | None,
    ) -> None:
        check_spec_inject(inject, spec)
        self.model = model
        self.spec = spec
        self.checkpoints = checkpoints
        self.faults = faults
        self.wrong_step = inject == WRONG_STEP
        self.recorder = StepRecorder(model)
        self.stats = SpecStats()
        #: the draft source: prompt lookup, or (``oracle``) reference drafts the caller sets
        self.drafter: Drafter = self._prompt_lookup if spec.drafter == "ngram" else _unset

    def _prompt_lookup(
        self, request: EngineRequest, context: Sequence[int], limit: int
    ) -> list[int]:
        return propose(context, self.spec, limit)

    def decode(
        self,
        lease: Lease,
        request: EngineRequest,
        result: RequestResult,
        dc: Any,
        tokens: list[int],
        pos: int,
        planned: dict[int, str],
        deferred: list[Deferred],
        stop: Callable[[int], bool],
    ) -> Generator[None, None, Decoded]:
        """Decode until ``max_new_tokens`` or a stop, one verification per step; ``tokens``
        (prompt + fed tokens) and ``result.output`` grow in place."""
        output = result.output
        stopped = False
        corrupted = False
        stats = self.stats
        while len(output) < request.max_new_tokens and not stopped:
            last = output[-1]
            room = request.max_new_tokens - len(output)
            limit = min(self.spec.k, room - 1)
            draft = self.drafter(request, [*tokens, last], limit)[:limit]
            fed = [last, *draft]
            start = pos
            if corrupted:
                self.faults.own_state_read(lease.request_id)
            steps = None
            if draft:
                verification = self.recorder.verify(dc, fed, start)
                logits, steps = verification.logits, verification.steps
                stats.verifications += 1
                stats.drafted += len(draft)
            else:
                logits = self.model.forward_all(dc, fed, start, keep=1)
                stats.plain_steps += 1
            kept = 0
            for i in range(len(fed)):
                token = greedy_pick(logits[i])
                result.logits.append(logits[i])
                output.append(token)
                kept = i + 1
                stopped = stop(token)
                matched = i < len(draft) and token == draft[i]
                stats.accepted += matched
                if stopped or not matched:
                    break
            stats.emitted += kept
            tokens.extend(fed[:kept])
            pos = start + kept
            tags = PrefixTags(request.namespace, encode_tokens(tokens))
            for q in sorted(p for p in planned if start < p <= pos):
                if steps is not None:
                    self.recorder.copy_back(dc, steps[q - start - 1])
                self.checkpoints.checkpoint(lease, dc, tags, q, planned[q], deferred, result)
            if steps is not None:
                step = kept - 1
                if self.wrong_step and kept < len(fed):
                    step = kept  # the bug: the state has seen the first rejected token
                    corrupted = True
                    self.faults.own_state_corrupted()
                self.recorder.copy_back(dc, steps[step])
                self.recorder.rollback_kv(dc, len(fed) - kept)
            self.checkpoints.flush(lease, dc, tags, deferred, pos, result, after_forward=True)
            yield
        self.faults.end_request(lease.request_id)
        return Decoded(pos, stopped)


def _unset(request: EngineRequest, context: Sequence[int], limit: int) -> list[int]:
    raise ConfigError("oracle drafts need a reference run: set SpecDecoder.drafter")
