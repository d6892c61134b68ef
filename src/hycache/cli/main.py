"""The ``hycache`` command line: conformance, simulate, compare, tune, init-model, verify,
serve.

Exit codes: 0 success, 1 a check failed (mismatch), 2 bad input (argparse: the option and the
reason; a HycacheError: ``hycache: error: ...`` with file, line and reason where there are),
3 ``verify --inject``: the injected fault never fired. ``main`` returns the code (argparse's
exits included) instead of exiting. docs/errors.md lists the messages.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hycache.errors import ConfigError, HycacheError

if TYPE_CHECKING:
    from hycache.conformance.scenario import Outcome


def _table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)), line]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


#: Scenarios ``hycache conformance`` runs when given no FILE (relative to the working directory).
BUNDLED_SCENARIOS = (
    Path("data/conformance/public"),
    Path("data/conformance/own"),
    Path("data/conformance/public/tiers"),
    Path("data/conformance/own/tiers"),
)


def scenario_files(files: Sequence[str]) -> list[str]:
    """``files``, or every bundled scenario under ./data/conformance when none is given."""
    if files:
        return list(files)
    found = [str(p) for d in BUNDLED_SCENARIOS if d.is_dir() for p in sorted(d.glob("*.json"))]
    if not found:
        dirs = " and ".join(f"{d}/" for d in BUNDLED_SCENARIOS)
        raise ConfigError(f"no FILE given and no scenarios in {dirs} (run from the repository)")
    return found


def cmd_conformance(args: argparse.Namespace) -> int:
    """Load every file first (exit 2 on a malformed one), then run; exit 1 on a mismatch."""
    # imported here: the other commands (``simulate`` first) start without them
    from hycache.conformance.scenario import load_scenario, run_scenario
    from hycache.conformance.tree_target import TreeTarget

    scenarios = [load_scenario(path) for path in scenario_files(args.files)]
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
    mismatches = [o.mismatch for o in outcomes if o.mismatch is not None]
    if mismatches:
        print("\n" + mismatches[0].describe(), file=sys.stderr)
        return 1
    print(f"\n{len(outcomes)} passed, 0 failed")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hycache", description="Prefix cache for hybrid LLMs: library, simulator, engine."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    conf = sub.add_parser(
        "conformance",
        help="run JSON conformance scenarios against the radix tree",
        description="Run conformance scenarios (format: docs/conformance.md). Exit 1 on a "
        "mismatch, 2 on a malformed file.",
    )
    conf.add_argument(
        "files",
        nargs="*",
        metavar="FILE",
        help="scenario files (default: data/conformance/public/*.json and "
        "data/conformance/own/*.json under the working directory)",
    )
    conf.set_defaults(func=cmd_conformance)
    from hycache.cli.sim import register as register_sim

    register_sim(sub)
    from hycache.cli.engine import register as register_engine

    register_engine(sub)
    from hycache.cli.serve import register as register_serve

    register_serve(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        code: int = args.func(args)
    except HycacheError as exc:
        print(f"hycache: error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
