"""Export the first N requests of any trace the simulator reads as plain token runs for the
engine harnesses (which run in their own virtual environments, without hycache).

One JSON object per line: ``{"id", "arrival_s", "prompt_len", "runs": [[first_id, length],
...]}``: the prompt is the concatenation of the runs of consecutive token ids. Ids are
relabelled 512 at a time (``id >> 9`` to a dense index) so they stay small, which keeps equal
prefixes equal and distinct tokens distinct. Outputs are not exported: the harnesses replay
prompts only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hycache.sim.trace import read_trace
from hycache.tree.keys import decode_tokens


def runs_of(tokens: list[int]) -> list[list[int]]:
    runs: list[list[int]] = []
    for t in tokens:
        if runs and runs[-1][0] + runs[-1][1] == t:
            runs[-1][1] += 1
        else:
            runs.append([t, 1])
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", required=True)
    p.add_argument("--requests", type=int, default=None)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    chunks: dict[int, int] = {}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w") as f:
        for req in read_trace(args.trace, limit=args.requests):
            tokens = [
                (chunks.setdefault(t >> 9, len(chunks)) << 9) | (t & 511)
                for t in decode_tokens(req.prompt)
            ]
            line = {
                "id": req.request_id,
                "arrival_s": req.arrival_s,
                "prompt_len": len(tokens),
                "runs": runs_of(tokens),
            }
            f.write(json.dumps(line, separators=(",", ":")) + "\n")
            n += 1
    print(f"exported {n} requests to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
