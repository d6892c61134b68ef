"""The ``hycache`` command line: conformance, simulate, compare, tune, init-model, verify.

Exit codes: 0 success, 1 a check failed (mismatch), 2 bad input (file, line, reason printed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from hycache.conformance.scenario import Outcome, load_scenario, run_scenario
from hycache.conformance.tree_target import TreeTarget
from hycache.errors import HycacheError


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def cmd_conformance(args: argparse.Namespace) -> int:
    """Load every file first (exit 2 on a malformed one), then run; exit 1 on a mismatch."""
    scenarios = [load_scenario(path) for path in args.files]
    outcomes: list[Outcome] = []
    for scenario in scenarios:
        outcome = run_scenario(scenario, TreeTarget)
        outcomes.append(outcome)
        if not outcome.passed:
            break
    rows = [
        (
            o.scenario.name[:60],
            str(len(o.scenario.steps)),
            str(o.matches_checked),
            "PASS" if o.passed else "FAIL",
        )
        for o in outcomes
    ]
    print(_table(rows, ("scenario", "steps", "matches", "result")))
    failed = [o for o in outcomes if o.mismatch is not None]
    if failed:
        assert failed[0].mismatch is not None
        print("\n" + failed[0].mismatch.describe(), file=sys.stderr)
        return 1
    print(f"\n{len(outcomes)} passed, 0 failed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hycache", description="Prefix cache for hybrid LLMs: library, simulator, engine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    conf = sub.add_parser(
        "conformance", help="run JSON conformance scenarios against the radix tree"
    )
    conf.add_argument("files", nargs="+", metavar="FILE")
    conf.set_defaults(func=cmd_conformance)
    from hycache.cli.sim import register as register_sim

    register_sim(sub)
    from hycache.cli.engine import register as register_engine

    register_engine(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except HycacheError as exc:
        print(f"hycache: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
