"""Seeded synthetic workloads: named generators of :class:`~hycache.sim.request.Request`.

``generate(name, requests=N, seed=S)`` yields exactly ``N`` requests, the same ones for the same
``(name, N, seed)`` on every machine and Python run (``random.Random`` seeded with a string);
a shorter run is a prefix of a longer one with the same seed, except in ``twice`` whose last
requests close the pairs still open.
Token ids are drawn uniformly from a vocabulary of 32,000. Arrivals are a Poisson process: the
first request arrives at 0 s, then inter-arrival gaps are exponential with mean ``1/rate``.
Requests are yielded in arrival order; ``request_id`` is ``"<name>-<index>"``; the namespace is
always None.

Lengths (tokens) are lognormal with the given mean and sigma (of the underlying normal), rounded
and clamped to ``[low, high]``; "uniform" ranges include both ends. Where several prompts branch
from one point (sessions after a system prompt, questions on a document, branches of a prefix,
the two copies in ``twice``), the branches get distinct first tokens, so they diverge exactly
there (guaranteed for up to 32,000 siblings).

========== ====== ====================================================================
name       rate/s structure
========== ====== ====================================================================
chat       2      8 concurrent sessions, 3-10 turns each (uniform). Every prompt starts
                  with one shared 1,024-token system prompt; turn k+1's prompt is turn
                  k's prompt + its output + a new user message. User message ~ LN(300,
                  0.8) in [16, 2048], output ~ LN(250, 0.7) in [8, 1024]. Session ids
                  ``chat-<k>``. Prompts ~1.3k-8k.
agent      1      4 concurrent SWE-agent-like sessions, 10-40 turns each. Shared 6,000-
                  token system prompt (tool definitions) + repo context ~ LN(4000, 0.5)
                  in [1000, 10000]; each turn appends the model output ~ LN(120, 0.6) in
                  [16, 512] and a tool output ~ LN(900, 1.0) in [32, 6000]. A session
                  ends early rather than exceed 32,768 prompt tokens. ``agent-<k>``.
shared-    4      16 system prompts ~ LN(2000, 0.5) in [256, 8192], picked with Zipf
prefix            popularity P(i) ~ 1/(i+1)^1.2 (the hottest gets ~37%), each followed by
                  a one-off suffix ~ LN(400, 1.0) in [16, 4096]; output ~ LN(200, 0.7)
                  in [8, 1024]. No sessions.
twice      2      Unique prefixes ~ LN(3000, 0.5) in [512, 12000], each sent exactly
                  twice: prefix + suffix ~ LN(64, 0.5) in [8, 256], then again 1-4
                  requests later (uniform; later only when several fall due together)
                  with a different suffix. No prefix is shared by any other request.
                  With an odd N the last request's prefix is seen once. Output ~ LN(150,
                  0.6) in [8, 512]. No sessions.
docqa      4      4 concurrent documents ~ LN(8000, 0.4) in [2000, 16000], 4-16 questions
                  each (uniform); prompt = document + question ~ LN(48, 0.5) in [8, 256];
                  output ~ LN(120, 0.6) in [8, 512]. No sessions.
branching  2      3 concurrent trees: a root prefix ~ LN(4000, 0.5) in [1000, 12000]
                  and 2-6 branches (uniform); a branch's first prompt is root + message
                  ~ LN(300, 0.8) in [16, 2048]; after each answer (output ~ LN(250, 0.7)
                  in [8, 1024]) the branch is continued with probability 0.5, at most 3
                  times, chat-style (prompt + output + message). Session
                  ``branching-<tree>-<branch>``.
========== ====== ====================================================================
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from hycache.errors import ConfigError, IntegrityError
from hycache.sim.request import Request
from hycache.tree.keys import encode_tokens

#: Token ids are drawn from ``range(VOCAB_SIZE)``.
VOCAB_SIZE = 32_000
_VOCAB = range(VOCAB_SIZE)

#: Workload names, in the order the docs list them.
WORKLOADS: tuple[str, ...] = ("chat", "agent", "shared-prefix", "twice", "docqa", "branching")

#: Mean arrival rate (requests per second) of each workload's Poisson process.
RATES: dict[str, float] = {
    "chat": 2.0,
    "agent": 1.0,
    "shared-prefix": 4.0,
    "twice": 2.0,
    "docqa": 4.0,
    "branching": 2.0,
}


@dataclass(frozen=True)
class LengthDist:
    """A lognormal length with mean ``mean`` and log-sigma ``sigma``, clamped to [low, high]."""

    mean: float
    sigma: float
    low: int
    high: int

    def draw(self, rng: random.Random) -> int:
        mu = math.log(self.mean) - self.sigma * self.sigma / 2
        return min(self.high, max(self.low, round(rng.lognormvariate(mu, self.sigma))))

    def __str__(self) -> str:
        return f"LN({self.mean:g}, {self.sigma:g}) in [{self.low}, {self.high}]"


# chat
CHAT_SESSIONS = 8
CHAT_TURNS = (3, 10)
CHAT_SYSTEM = 1024
CHAT_USER = LengthDist(300, 0.8, 16, 2048)
CHAT_OUTPUT = LengthDist(250, 0.7, 8, 1024)
# agent
AGENT_SESSIONS = 4
AGENT_TURNS = (10, 40)
AGENT_SYSTEM = 6000
AGENT_CONTEXT = LengthDist(4000, 0.5, 1000, 10000)
AGENT_TOOL = LengthDist(900, 1.0, 32, 6000)
AGENT_OUTPUT = LengthDist(120, 0.6, 16, 512)
AGENT_MAX_PROMPT = 32768
# shared-prefix
SHARED_PROMPTS = 16
SHARED_ZIPF = 1.2
SHARED_SYSTEM = LengthDist(2000, 0.5, 256, 8192)
SHARED_SUFFIX = LengthDist(400, 1.0, 16, 4096)
SHARED_OUTPUT = LengthDist(200, 0.7, 8, 1024)
# twice
TWICE_PREFIX = LengthDist(3000, 0.5, 512, 12000)
TWICE_SUFFIX = LengthDist(64, 0.5, 8, 256)
TWICE_OUTPUT = LengthDist(150, 0.6, 8, 512)
TWICE_GAP = (1, 4)
# docqa
DOCQA_DOCS = 4
DOCQA_QUESTIONS = (4, 16)
DOCQA_DOCUMENT = LengthDist(8000, 0.4, 2000, 16000)
DOCQA_QUESTION = LengthDist(48, 0.5, 8, 256)
DOCQA_OUTPUT = LengthDist(120, 0.6, 8, 512)
# branching
BRANCH_TREES = 3
BRANCH_FANOUT = (2, 6)
BRANCH_ROOT = LengthDist(4000, 0.5, 1000, 12000)
BRANCH_MESSAGE = LengthDist(300, 0.8, 16, 2048)
BRANCH_OUTPUT = LengthDist(250, 0.7, 8, 1024)
BRANCH_CONTINUE = 0.5
BRANCH_MAX_CONTINUATIONS = 3

#: (prompt, output, session) as a workload body produces them.
_Item = tuple[bytes, bytes, str | None]
_Body = Callable[[random.Random, int], Iterator[_Item]]


class _Tokens:
    """Random token runs; ``first`` pins the first id (see :class:`_Fanout`)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def run(self, length: int, first: int | None = None) -> bytes:
        ids = self._rng.choices(_VOCAB, k=length)
        if first is not None and ids:
            ids[0] = first
        return encode_tokens(ids)


class _Fanout:
    """First tokens for the children of one branch point, all different (up to the vocab)."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._used: set[int] = set()

    def first(self) -> int:
        if len(self._used) >= VOCAB_SIZE:
            self._used.clear()
        while True:
            token = self._rng.randrange(VOCAB_SIZE)
            if token not in self._used:
                self._used.add(token)
                return token


@dataclass
class _Session:
    name: str
    history: bytes
    turns_left: int
    turn: int = 0


def _chat(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    system = tokens.run(CHAT_SYSTEM)
    starts = _Fanout(rng)
    active: list[_Session] = []
    opened = 0
    while True:
        while len(active) < CHAT_SESSIONS:
            active.append(_Session(f"chat-{opened}", system, rng.randint(*CHAT_TURNS)))
            opened += 1
        index = rng.randrange(len(active))
        session = active[index]
        first = starts.first() if session.turn == 0 else None
        prompt = session.history + tokens.run(CHAT_USER.draw(rng), first)
        output = tokens.run(CHAT_OUTPUT.draw(rng))
        yield prompt, output, session.name
        session.history = prompt + output
        session.turn += 1
        session.turns_left -= 1
        if session.turns_left == 0:
            active.pop(index)


def _agent(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    system = tokens.run(AGENT_SYSTEM)
    starts = _Fanout(rng)
    active: list[_Session] = []
    opened = 0
    while True:
        while len(active) < AGENT_SESSIONS:
            context = tokens.run(AGENT_CONTEXT.draw(rng), starts.first())
            turns = rng.randint(*AGENT_TURNS)
            active.append(_Session(f"agent-{opened}", system + context, turns))
            opened += 1
        index = rng.randrange(len(active))
        session = active[index]
        prompt = session.history
        output = tokens.run(AGENT_OUTPUT.draw(rng))
        yield prompt, output, session.name
        session.turns_left -= 1
        tool = tokens.run(AGENT_TOOL.draw(rng))
        session.history = prompt + output + tool
        if session.turns_left == 0 or len(session.history) // 8 > AGENT_MAX_PROMPT:
            active.pop(index)


def _shared_prefix(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    starts = _Fanout(rng)
    prompts = [tokens.run(SHARED_SYSTEM.draw(rng), starts.first()) for _ in range(SHARED_PROMPTS)]
    fanouts = [_Fanout(rng) for _ in prompts]
    weights = [1.0 / (rank + 1) ** SHARED_ZIPF for rank in range(SHARED_PROMPTS)]
    while True:
        pick = rng.choices(range(SHARED_PROMPTS), weights)[0]
        suffix = tokens.run(SHARED_SUFFIX.draw(rng), fanouts[pick].first())
        yield prompts[pick] + suffix, tokens.run(SHARED_OUTPUT.draw(rng)), None


@dataclass(order=True)
class _Due:
    due: int
    seq: int
    prefix: bytes = field(compare=False)
    fanout: _Fanout = field(compare=False)


def _twice(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    starts = _Fanout(rng)
    pending: list[_Due] = []
    for index in range(n):
        remaining = n - index
        if pending and (pending[0].due <= index or len(pending) >= remaining - 1):
            item = heapq.heappop(pending)
            prefix, fanout = item.prefix, item.fanout
        else:
            prefix = tokens.run(TWICE_PREFIX.draw(rng), starts.first())
            fanout = _Fanout(rng)
            heapq.heappush(pending, _Due(index + rng.randint(*TWICE_GAP), index, prefix, fanout))
        suffix = tokens.run(TWICE_SUFFIX.draw(rng), fanout.first())
        yield prefix + suffix, tokens.run(TWICE_OUTPUT.draw(rng)), None


@dataclass
class _Document:
    text: bytes
    questions_left: int
    fanout: _Fanout


def _docqa(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    starts = _Fanout(rng)
    active: list[_Document] = []
    while True:
        while len(active) < DOCQA_DOCS:
            text = tokens.run(DOCQA_DOCUMENT.draw(rng), starts.first())
            active.append(_Document(text, rng.randint(*DOCQA_QUESTIONS), _Fanout(rng)))
        index = rng.randrange(len(active))
        doc = active[index]
        question = tokens.run(DOCQA_QUESTION.draw(rng), doc.fanout.first())
        yield doc.text + question, tokens.run(DOCQA_OUTPUT.draw(rng)), None
        doc.questions_left -= 1
        if doc.questions_left == 0:
            active.pop(index)


@dataclass
class _Tree:
    root: bytes
    fanout: _Fanout
    queue: list[_Session]


def _branching(rng: random.Random, n: int) -> Iterator[_Item]:
    tokens = _Tokens(rng)
    starts = _Fanout(rng)
    active: list[_Tree] = []
    opened = 0
    while True:
        while len(active) < BRANCH_TREES:
            root = tokens.run(BRANCH_ROOT.draw(rng), starts.first())
            branches = rng.randint(*BRANCH_FANOUT)
            queue = [
                _Session(f"branching-{opened}-{b}", root, BRANCH_MAX_CONTINUATIONS)
                for b in range(branches)
            ]
            active.append(_Tree(root, _Fanout(rng), queue))
            opened += 1
        index = rng.randrange(len(active))
        tree = active[index]
        branch = tree.queue.pop(0)
        first = tree.fanout.first() if branch.turn == 0 else None
        prompt = branch.history + tokens.run(BRANCH_MESSAGE.draw(rng), first)
        output = tokens.run(BRANCH_OUTPUT.draw(rng))
        yield prompt, output, branch.name
        branch.history = prompt + output
        branch.turn += 1
        if branch.turns_left > 0 and rng.random() < BRANCH_CONTINUE:
            branch.turns_left -= 1
            tree.queue.append(branch)
        if not tree.queue:
            active.pop(index)


_BODIES: dict[str, _Body] = {
    "chat": _chat,
    "agent": _agent,
    "shared-prefix": _shared_prefix,
    "twice": _twice,
    "docqa": _docqa,
    "branching": _branching,
}
if not (tuple(_BODIES) == WORKLOADS == tuple(RATES)):
    raise IntegrityError("every workload needs a body and a rate")


def generate(name: str, *, requests: int = 200, seed: int = 0) -> Iterator[Request]:
    """The ``requests`` requests of workload ``name`` for ``seed``, in arrival order.

    Checks its arguments at once (ConfigError: unknown name, listing :data:`WORKLOADS`;
    negative count; non-integer seed), then generates lazily.
    """
    if name not in _BODIES:
        raise ConfigError(f"unknown workload {name!r}; known workloads: {', '.join(WORKLOADS)}")
    if type(requests) is not int or requests < 0:
        raise ConfigError(f"requests must be a non-negative integer, got {requests!r}")
    if type(seed) is not int:
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return _generate(name, requests, seed)


def _generate(name: str, requests: int, seed: int) -> Iterator[Request]:
    rng = random.Random(f"hycache-workload/{name}/{seed}")
    arrivals = random.Random(f"hycache-arrivals/{name}/{seed}")
    rate = RATES[name]
    clock = 0.0
    body = _BODIES[name](rng, requests)
    for index in range(requests):
        prompt, output, session = next(body)
        yield Request(f"{name}-{index}", clock, prompt, output, session=session)
        clock += arrivals.expovariate(rate)
