"""A real tokenizer for the tiny checkpoints, trained locally (``hycache init-model``).

A byte-level BPE built with the ``tokenizers`` library (a dependency of transformers, so the
``[engine]`` extra has it) on English-like text generated here from a fixed word list and a
seeded generator: no download, the same files for the same vocabulary every time. Every string
encodes (byte-level: no unknown token) to ids below the model's vocabulary. Special tokens
come first so they match the tiny configs: ``<pad>`` 0, ``<s>`` 1 (bos), ``</s>`` 2 (eos),
then the chat markers ``<|im_start|>`` 3 and ``<|im_end|>`` 4 of the ChatML template written
into ``tokenizer_config.json`` (transformers' ``AutoTokenizer`` loads the directory as a
``PreTrainedTokenizerFast``; ``hycache serve`` reads ``tokenizer.json`` directly).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

from hycache.errors import ConfigError

PAD, BOS, EOS, IM_START, IM_END = "<pad>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS, IM_START, IM_END)
#: ChatML, as the Jinja template transformers applies; ``hycache.serve.tokenizer`` renders the
#: same format in Python.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"

_WORD_TEXT = """
the a an of to in and or but is are was were be been being have has had do does did will
would can could should may might must shall cache prefix token tokens model models layer
layers state states memory page pages request requests server client session sessions turn
turns user assistant system message messages answer question document documents reuse hit
miss evict eviction policy window attention recurrent hybrid linear full sliding compute
prefill decode batch queue time first last next previous long short fast slow small large
tiny random seed value number one two three four five six seven eight nine ten hundred
thousand please thank you hello world what why how when where who which this that these
those it its we our they their he she his her i my me your yours here there now then again
about above after before between into through during without within along across under over
read write copy store load save keep drop free lock run stop start end begin finish wait
send receive stream chunk block grid path tree node branch root leaf match insert split
price cost budget byte bytes kilobyte megabyte gigabyte rate ratio metric metrics latency
throughput second seconds minute minutes hour hours day days week year good bad better best
new old same other different every each some many few more most less least all none any
weather city river mountain garden kitchen library school music story book letter paper
green blue red yellow black white bright dark warm cold quiet loud happy careful simple
"""
#: the words of the generated text (benchmarks build prompts from them too)
WORDS = tuple(_WORD_TEXT.split())
_PUNCT = (".", ".", ".", "?", "!", ",")


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randrange(4, 16))]
    if rng.random() < 0.2:
        words.insert(rng.randrange(len(words)), str(rng.randrange(0, 10_000)))
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice(_PUNCT)


def corpus(lines: int = 4000, seed: int = 0) -> Iterator[str]:
    """The generated training text: paragraphs of sentences, some in the chat format."""
    rng = random.Random(f"hycache-tokenizer/{seed}")
    for _ in range(lines):
        text = " ".join(_sentence(rng) for _ in range(rng.randrange(1, 5)))
        if rng.random() < 0.3:
            role = rng.choice(("system", "user", "assistant"))
            text = f"{IM_START}{role}\n{text}{IM_END}\n"
        yield text


def train_tokenizer(vocab: int) -> object:
    """A byte-level BPE ``tokenizers.Tokenizer`` with at most ``vocab`` ids. ConfigError when
    ``vocab`` cannot hold the specials and the 256 byte symbols."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab < len(SPECIAL_TOKENS) + len(alphabet):
        raise ConfigError(
            f"a byte-level tokenizer needs a vocabulary of at least "
            f"{len(SPECIAL_TOKENS) + len(alphabet)}, got {vocab}"
        )
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer)
    return tokenizer


def save_tokenizer(directory: Path, vocab: int, *, max_length: int) -> Path:
    """Train a tokenizer for a model with ``vocab`` ids and write ``tokenizer.json`` and
    ``tokenizer_config.json`` into ``directory``. Returns the tokenizer.json path."""
    from tokenizers import Tokenizer

    tokenizer = train_tokenizer(vocab)
    if not isinstance(tokenizer, Tokenizer):  # pragma: no cover - the trainer's own type
        raise ConfigError("tokenizers returned an unexpected object")
    for expected, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected:
            raise ConfigError(f"tokenizer: special token {token!r} is not id {expected}")
    if tokenizer.get_vocab_size() > vocab:
        raise ConfigError(f"tokenizer: {tokenizer.get_vocab_size()} ids exceed the vocab {vocab}")
    path = directory / TOKENIZER_FILE
    tokenizer.save(str(path))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        "additional_special_tokens": [IM_START, IM_END],
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (directory / CONFIG_FILE).write_text(
        json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return path
