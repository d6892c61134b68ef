"""The checkpoint's tokenizer as the server uses it: text <-> ids, the chat template, and
incremental detokenizing with stop strings.

``TextCodec.load(dir)`` reads ``tokenizer.json`` (written by ``hycache init-model``, or any
``tokenizers`` file whose ids fit the model's vocabulary). The chat template is ChatML, the
same format as the Jinja template ``init-model`` writes into ``tokenizer_config.json``:
``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then ``<|im_start|>assistant\\n``.
``Detokenizer`` turns a stream of ids into text deltas that never split a UTF-8 character and
never show the start of a stop string before it is known not to be one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hycache.engine.tokenizer import EOS, IM_END, IM_START, TOKENIZER_FILE
from hycache.errors import ConfigError

_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


class TextCodec:
    """Encode and decode with one ``tokenizers.Tokenizer``; ids are checked against ``vocab``."""

    def __init__(self, tokenizer: Any, vocab: int) -> None:
        self._tok = tokenizer
        self.vocab = vocab
        if tokenizer.get_vocab_size(with_added_tokens=True) > vocab:
            raise ConfigError(
                f"the tokenizer has {tokenizer.get_vocab_size(with_added_tokens=True)} ids, "
                f"more than the model's vocabulary {vocab}"
            )
        self.eos_id: int | None = tokenizer.token_to_id(EOS)
        self.im_end_id: int | None = tokenizer.token_to_id(IM_END)
        self.has_chat_markers = (
            tokenizer.token_to_id(IM_START) is not None and self.im_end_id is not None
        )

    @classmethod
    def load(cls, directory: Path, vocab: int) -> TextCodec:
        """The tokenizer of the checkpoint in ``directory``; ConfigError when it has none."""
        from tokenizers import Tokenizer

        path = directory / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigError(
                f"{directory}: no {TOKENIZER_FILE} (write the checkpoint again with "
                "hycache init-model, which saves one)"
            )
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # tokenizers raises its own exception type
            raise ConfigError(f"{path}: cannot load the tokenizer: {exc}") from exc
        return cls(tokenizer, vocab)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tok.encode(text, add_special_tokens=False).ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self._tok.decode(list(ids), skip_special_tokens=True)
        return text

    def chat_prompt(self, messages: Sequence[ChatMessage]) -> str:
        """ChatML text of ``messages`` ending with the assistant's turn opened."""
        if not self.has_chat_markers:
            raise ConfigError("the tokenizer has no chat markers (<|im_start|>, <|im_end|>)")
        parts = [f"{IM_START}{m.role}\n{m.content}{IM_END}\n" for m in messages]
        return "".join(parts) + f"{IM_START}assistant\n"

    def stop_ids(self, *, chat: bool) -> tuple[int, ...]:
        """Token ids that end a generation: eos, and for chat the end-of-message marker."""
        ids = [self.eos_id] + ([self.im_end_id] if chat else [])
        return tuple(i for i in ids if i is not None)


class Detokenizer:
    """Text deltas of a growing id sequence, with stop strings. Not thread-safe: one owner."""

    def __init__(self, codec: TextCodec, stops: Sequence[str] = ()) -> None:
        self.codec = codec
        self.stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self.stops), default=1) - 1
        self.ids: list[int] = []
        self.text = ""  # the whole text so far (cut at a stop string once one is found)
        self.sent = 0  # characters of ``text`` handed out
        self.stopped = False

    def feed(self, token: int) -> bool:
        """Add a token; True when a stop string now appears (the text is cut before it)."""
        if self.stopped:
            return True
        self.ids.append(token)
        text = self.codec.decode(self.ids)
        if text.endswith(_REPLACEMENT):
            return False  # an incomplete UTF-8 character: wait for its next bytes
        found = [at for at in (text.find(stop) for stop in self.stops) if at >= 0]
        self.text = text[: min(found)] if found else text
        self.stopped = bool(found)
        return self.stopped

    def delta(self, *, final: bool = False) -> str:
        """Text not handed out yet; while the request runs, the tail that could still become
        a stop string is held back."""
        end = len(self.text)
        if not final and not self.stopped and self.stops:
            end = max(self.sent, end - self._hold)
        out = self.text[self.sent : end]
        self.sent = max(self.sent, end)
        return out
