"""Radix-tree throughput on the Mooncake conversation trace (FULL + RECURRENT, page 16).

For every prompt in order: match it, then insert it up to its last full 512-token block with a
recurrent state there; unlimited capacity. Only the match and insert calls are timed (reading
and expanding the trace is not). Hash id h expands to tokens h*512 .. h*512+511; the last block
holds the remainder of input_length.

    python benchmarks/tree_ops.py [TRACE] [--page-size 16] [--input key|list]

TRACE is Mooncake JSON lines, plain or gzip-compressed (a name ending in ``.gz``).

``--input key`` (default) hands the tree its native int64 key (bytes, as an engine holding
token ids in an array would); ``--input list`` hands it Python lists of ints, so the timed
calls include encoding them.

The last line is machine-readable:
    tree_ops: requests=N tokens=T match_s=X insert_s=Y reused=R kv_hit=K
"""

from __future__ import annotations

import argparse
import json
import time
from array import array
from pathlib import Path

from hycache.components.full import FullComponent
from hycache.components.recurrent import RecurrentComponent
from hycache.memory.unbounded import UnboundedStore
from hycache.sim.trace import open_trace
from hycache.tree.keys import decode_tokens, encode_tokens, key_length
from hycache.tree.radix import RadixTree

BLOCK = 512
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "data/traces/mooncake_conversation.jsonl.gz"


def expand(hash_ids: list[int], input_length: int) -> bytes:
    """The prompt's token ids, encoded as the tree's int64 key (see hycache.tree.keys)."""
    tokens = array("q")
    for i, h in enumerate(hash_ids):
        size = min(BLOCK, input_length - i * BLOCK)
        if size <= 0:
            break
        tokens.extend(range(h * BLOCK, h * BLOCK + size))
    return encode_tokens(tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--input", choices=("key", "list"), default="key")
    args = parser.parse_args()

    store = UnboundedStore()
    full = FullComponent(store)
    recurrent = RecurrentComponent(store)
    tree = RadixTree(args.page_size, [full, recurrent])
    requests = total = reused = kv_hit = 0
    match_s = insert_s = 0.0
    clock = time.perf_counter
    with open_trace(args.trace) as trace:  # plain or gzip (a name ending in .gz)
        for line in trace:
            record = json.loads(line)
            key = expand(record["hash_ids"], record["input_length"])
            n_tokens = key_length(key)
            tokens: bytes | list[int] = key if args.input == "key" else list(decode_tokens(key))
            cached = n_tokens - n_tokens % BLOCK
            t0 = clock()
            result = tree.match(tokens)
            t1 = clock()
            if cached:
                path = tree.insert(result.key, length=cached, after=result)
                recurrent.put(path[-1])
            t2 = clock()
            match_s += t1 - t0
            insert_s += t2 - t1
            requests += 1
            total += n_tokens
            reused += result.hit
            kv_hit += result.kv_hit
    tree.check_integrity()
    print(
        f"tree_ops: requests={requests} tokens={total} match_s={match_s:.3f} "
        f"insert_s={insert_s:.3f} reused={reused / total:.4f} kv_hit={kv_hit / total:.4f}"
    )


if __name__ == "__main__":
    main()
