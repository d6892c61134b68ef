"""Short request streams for the engine: the sharing structure of real loads at tiny scale.

Prompts are 50-600 tokens (not aligned to pages or chunks) so a tiny model on a CPU runs dozens
of them in seconds. Each workload is a list of :class:`Turn`; a turn either starts from scratch
or continues its session, whose history is the previous turn's prompt plus the tokens the
model generated for it (so multi-turn reuse covers decoded tokens too). :class:`SessionSource`
hands turns to the engine in order, a session's turn only once its previous turn finished.

========== ===================================================================================
chat       sessions of 2-6 turns after one of two shared system prompts; each turn appends the
           model's answer and a new user message; every third follow-up turn of the workload
           is a "retry": the user re-asks the session's previous message verbatim (regenerate,
           or a repeated question), so the context holds the question, the earlier answer and
           the question again, which prompt-lookup drafting profits from; a quarter of the
           sessions run in their own namespace (tenant), which must never hit another
           tenant's entries.
branching  three root prefixes; requests branch off a root or off an earlier request at a
           random (unaligned) point, some continue chat-style, some are exact retries.
docqa      documents of 150-450 tokens behind a shared instruction; several questions per
           document, sometimes two documents in one prompt, some questions repeated.
sim:NAME   a workload of :mod:`hycache.sim.workloads` scaled down: every 16th token of each
           prompt (which keeps who shares a prefix with whom), ids modulo the vocabulary,
           at most 600 tokens.
========== ===================================================================================
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from hycache.engine.engine import EngineRequest, RequestResult
from hycache.errors import ConfigError

WORKLOADS = ("chat", "branching", "docqa")
MAX_PROMPT = 600
MIN_PROMPT = 50
SIM_STRIDE = 16


@dataclass(frozen=True)
class Turn:
    """One request of a workload. ``continues``: the prompt is the session's history (last
    prompt + generated output) followed by ``tokens``; else ``tokens`` alone."""

    rid: str
    tokens: tuple[int, ...]
    max_new_tokens: int
    session: str | None = None
    continues: bool = False
    namespace: str | None = None


class SessionSource:
    """Feeds turns to :meth:`Engine.run` in order; a session's next turn waits for the
    previous one. ``prompts`` records the prompt each turn actually ran with."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._pending = deque(turns)
        self._busy: set[str] = set()
        self._history: dict[str, tuple[int, ...]] = {}
        self._by_rid: dict[str, Turn] = {}
        self.prompts: dict[str, tuple[int, ...]] = {}

    def next_ready(self) -> EngineRequest | None:
        for turn in self._pending:
            if turn.session is not None and turn.session in self._busy:
                continue
            self._pending.remove(turn)
            prompt = turn.tokens
            if turn.continues and turn.session is not None:
                prompt = self._history.get(turn.session, ()) + turn.tokens
            if turn.session is not None:
                self._busy.add(turn.session)
            self._by_rid[turn.rid] = turn
            self.prompts[turn.rid] = prompt
            return EngineRequest(
                prompt, turn.max_new_tokens, turn.namespace, turn.session, turn.rid
            )
        return None

    def done(self, result: RequestResult) -> None:
        turn = self._by_rid[result.request.rid]
        if turn.session is not None:
            self._busy.discard(turn.session)
            self._history[turn.session] = result.request.prompt + tuple(result.output)

    @property
    def exhausted(self) -> bool:
        return not self._pending


def _tokens(rng: random.Random, vocab: int, count: int) -> tuple[int, ...]:
    # ids 0-2 are pad/bos/eos in the tiny configs: keep them out of prompts
    return tuple(rng.randrange(3, vocab) for _ in range(count))


@dataclass
class _Chat:
    name: str
    turns_left: int
    length: int
    namespace: str | None
    turns: int = 0
    #: the user message of the session's last turn (without the system prompt)
    asked: tuple[int, ...] = ()


def _chat(rng: random.Random, vocab: int, requests: int) -> list[Turn]:
    systems = [_tokens(rng, vocab, rng.randrange(24, 60)) for _ in range(2)]
    sessions: list[_Chat] = []
    turns: list[Turn] = []
    active: list[int] = []
    follow_ups = 0
    while len(turns) < requests:
        if len(active) < 3 or rng.random() < 0.15:
            k = len(sessions)
            tenant = "tenant-b" if k % 4 == 3 else None
            sessions.append(_Chat(f"chat-{k}", rng.randrange(2, 7), 0, tenant))
            active.append(k)
        k = rng.choice(active)
        s = sessions[k]
        output = rng.randrange(2, 9)
        if s.turns == 0:
            system = systems[k % 2]
            user = _tokens(rng, vocab, rng.randrange(20, 110))
            turns.append(Turn(f"{s.name}.0", system + user, output, s.name, False, s.namespace))
            s.length = len(system) + len(user) + output
        else:
            follow_ups += 1
            retry = follow_ups % 3 == 0  # the previous question again, verbatim
            user = s.asked if retry else _tokens(rng, vocab, rng.randrange(8, 70))
            turns.append(Turn(f"{s.name}.{s.turns}", user, output, s.name, True, s.namespace))
            s.length += len(user) + output
        s.asked = user
        s.turns += 1
        s.turns_left -= 1
        if s.turns_left <= 0 or s.length + 80 > MAX_PROMPT:
            active.remove(k)
    return turns


def _branching(rng: random.Random, vocab: int, requests: int) -> list[Turn]:
    roots = [_tokens(rng, vocab, rng.randrange(80, 260)) for _ in range(3)]
    seen: list[tuple[int, ...]] = []
    turns: list[Turn] = []
    continuing: list[str] = []
    for i in range(requests):
        draw = rng.random()
        output = rng.randrange(2, 8)
        if seen and draw < 0.15:  # exact retry of an earlier prompt
            turns.append(Turn(f"branch-{i}", rng.choice(seen), output))
            continue
        if continuing and draw < 0.35:  # continue a branch chat-style
            resumed = rng.choice(continuing)
            tail = _tokens(rng, vocab, rng.randrange(8, 60))
            turns.append(Turn(f"branch-{i}", tail, output, resumed, True))
            continuing.remove(resumed)
            continue
        base = rng.choice(roots) if not seen or draw < 0.65 else rng.choice(seen)
        cut = rng.randrange(max(1, len(base) // 3), len(base) + 1)
        tail = _tokens(rng, vocab, rng.randrange(5, 120))
        prompt = (base[:cut] + tail)[:MAX_PROMPT]
        if len(prompt) < MIN_PROMPT:
            prompt += _tokens(rng, vocab, MIN_PROMPT - len(prompt))
        seen.append(prompt)
        session: str | None = None
        if len(prompt) < MAX_PROMPT - 80 and rng.random() < 0.4:
            session = f"branch-s{i}"
            continuing.append(session)
        turns.append(Turn(f"branch-{i}", prompt, output, session))
    return turns


def _docqa(rng: random.Random, vocab: int, requests: int) -> list[Turn]:
    instruction = _tokens(rng, vocab, rng.randrange(12, 30))
    docs = [_tokens(rng, vocab, rng.randrange(150, 450)) for _ in range(4)]
    asked: list[tuple[int, ...]] = []
    turns: list[Turn] = []
    for i in range(requests):
        output = rng.randrange(2, 7)
        if asked and rng.random() < 0.15:
            turns.append(Turn(f"docqa-{i}", rng.choice(asked), output))
            continue
        doc = docs[min(int(rng.expovariate(0.8)), len(docs) - 1)]
        if rng.random() < 0.2:
            doc = (doc + rng.choice(docs))[: MAX_PROMPT - 80]
        question = _tokens(rng, vocab, rng.randrange(6, 60))
        prompt = (instruction + doc + question)[:MAX_PROMPT]
        asked.append(prompt)
        turns.append(Turn(f"docqa-{i}", prompt, output))
    return turns


def _sim(name: str, vocab: int, requests: int, seed: int) -> list[Turn]:
    from hycache.sim.workloads import generate
    from hycache.tree.keys import decode_tokens

    turns = []
    for request in generate(name, requests=requests, seed=seed):
        ids = decode_tokens(request.prompt)[::SIM_STRIDE][:MAX_PROMPT]
        prompt = tuple(3 + t % (vocab - 3) for t in ids) or (3,)
        output = max(1, min(6, request.output_len))
        turns.append(Turn(request.request_id, prompt, output, namespace=request.namespace))
    return turns


def generate_turns(name: str, *, requests: int, seed: int, vocab: int) -> list[Turn]:
    """The ``requests`` turns of workload ``name`` (see the module docstring)."""
    if requests < 1:
        raise ConfigError(f"--requests must be >= 1, got {requests}")
    if vocab < 16:
        raise ConfigError(f"the model's vocabulary ({vocab}) is too small for the workloads")
    if name.startswith("sim:"):
        return _sim(name[4:], vocab, requests, seed)
    builders = {"chat": _chat, "branching": _branching, "docqa": _docqa}
    builder = builders.get(name)
    if builder is None:
        raise ConfigError(
            f"unknown engine workload {name!r}; known: {', '.join(WORKLOADS)}, sim:<name>"
        )
    rng = random.Random(f"hycache-engine/{name}/{seed}")
    return builder(rng, vocab, requests)[:requests]
