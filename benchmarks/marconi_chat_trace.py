"""A synthetic multi-turn chat trace in Marconi's format, for timing the simulator.

    python benchmarks/marconi_chat_trace.py OUT.jsonl [--requests 1238] [--sessions-per-s 1]
        [--seed 0]

Not real data: it stands in for a ShareGPT-derived trace of the same size (Marconi's
``utils/generate_trace.py`` format: ``session_id``, ``turn_id``, ``ts``, ``input_tokens`` = the
whole history plus the new user message, ``output_tokens``) so that speed can be measured
without the dataset. Sessions arrive as a Poisson process; each has 1-12 turns (geometric,
mean 4) with log-normal user messages (median 120 tokens) and answers (median 250 tokens),
30 s of think time (exponential) between turns, token ids uniform in a 32k vocabulary. The
same seed writes the same file.
"""

from __future__ import annotations

import argparse
import json
import math
import random


def _length(rng: random.Random, median: float, cap: int) -> int:
    return max(1, min(cap, int(rng.lognormvariate(math.log(median), 0.8))))


def generate(requests: int, sessions_per_s: float, seed: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    start = 0.0
    session = 0
    while len(rows) < requests:
        start += rng.expovariate(sessions_per_s)
        turns = min(12, 1 + int(rng.expovariate(1 / 3)))
        history: list[int] = []
        now = start
        for turn in range(turns):
            if len(rows) >= requests:
                break
            history += [rng.randrange(32000) for _ in range(_length(rng, 120, 2000))]
            output = [rng.randrange(32000) for _ in range(_length(rng, 250, 1500))]
            rows.append(
                {
                    "session_id": session,
                    "turn_id": turn,
                    "ts": round(now, 3),
                    "num_input_tokens": len(history),
                    "num_output_tokens": len(output),
                    "input_tokens": list(history),
                    "output_tokens": output,
                }
            )
            history += output
            now += rng.expovariate(1 / 30)
        session += 1
    rows.sort(key=lambda r: float(r["ts"]))  # type: ignore[arg-type]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--requests", type=int, default=1238)
    parser.add_argument("--sessions-per-s", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rows = generate(args.requests, args.sessions_per_s, args.seed)
    with open(args.out, "w") as handle:
        for row in rows:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
