"""The compiled build (``make fast``: setup.py with HYCACHE_COMPILE=1, in .venv-fast) is the
pure build's behaviour, faster: the same simulator results, the same typed errors on bad input.

``make test`` builds .venv-fast before the suite; run ``make fast`` when calling pytest alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAST_PYTHON = ROOT / ".venv-fast" / "bin" / "python"
TRACE = ROOT / "data" / "traces" / "mooncake_conversation.jsonl.gz"
#: modules that must be compiled (one per compiled folder) and the facade, which must not be
COMPILED = ("hycache.tree.radix", "hycache.cache.admit", "hycache.policy.eviction.value")
INTERPRETED = ("hycache.cache.facade", "hycache.cache.validate")

pytestmark = pytest.mark.slow


def _fast_python() -> Path:
    if not FAST_PYTHON.exists():
        pytest.fail(f"{FAST_PYTHON} is missing: run `make fast` (make test builds it)")
    return FAST_PYTHON


def _run(python: Path | str, code: str) -> str:
    done = subprocess.run(
        [str(python), "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_hot_core_is_compiled_and_the_facade_is_not() -> None:
    code = f"import importlib; print([importlib.import_module(m).__file__ for m in {COMPILED}])"
    code += f"; print([importlib.import_module(m).__file__ for m in {INTERPRETED}])"
    compiled, interpreted = _run(_fast_python(), code).splitlines()
    assert compiled.count(".so'") == len(COMPILED), compiled
    assert interpreted.count(".py'") == len(INTERPRETED), interpreted


def _results(python: Path | str, out: Path, args: list[str]) -> dict[str, Any]:
    argv = [*args, "--json", str(out)]
    code = f"import sys; from hycache.cli.main import main; sys.exit(main({argv!r}))"
    _run(python, code)
    data: dict[str, Any] = json.loads(out.read_text())
    # one capacity: its results also at the top level
    tops = [data["policies"]] if "policies" in data else []
    for policies in [*tops, *(c["policies"] for c in data["capacities"].values())]:
        for result in policies.values():
            result.pop("wall_s")
    return data


@pytest.mark.parametrize(
    "source",
    [
        ["--workload", "agent", "--requests", "150", "--capacities", "25%,60%"],
        ["--workload", "docqa", "--requests", "150", "--seed", "3", "--capacities", "20%"],
        ["--trace", str(TRACE), "--trace-cache", "none", "--requests", "400", "--capacities", "5%"],
    ],
    ids=["agent", "docqa", "mooncake"],
)
@pytest.mark.parametrize("mode", ["serial", "engine"])
def test_compiled_and_pure_builds_give_identical_results(
    tmp_path: Path, source: list[str], mode: str
) -> None:
    args = ["compare", *source, "--model", "qwen3-next-80b-a3b", "--mode", mode]
    fast = _results(_fast_python(), tmp_path / "fast.json", args)
    pure = _results(sys.executable, tmp_path / "pure.json", args)
    assert fast == pure
    assert len(pure["capacities"]) >= 1 and all(
        len(c["policies"]) == 4 for c in pure["capacities"].values()
    )


def test_bad_input_gets_the_typed_error_in_the_compiled_build() -> None:
    code = (
        "from hycache import build_cache\n"
        "from hycache.errors import HycacheError\n"
        "from hycache.spec.model import ModelSpec\n"
        "cache = build_cache(ModelSpec.named('qwen3-next-80b-a3b'), 1 << 34, 'hycache')\n"
        "try:\n"
        "    cache.admit(list(range(64)), max_new_tokens=1.5)  # type: ignore[arg-type]\n"
        "except HycacheError as error:\n"
        "    print(type(error).__name__)\n"
    )
    assert _run(_fast_python(), code) == _run(sys.executable, code) != ""


def test_compiled_classes_keep_abc_caches_of_their_own() -> None:
    """A class mypyc compiles shares its ancestor's ABC caches unless given its own: then an
    isinstance answering False for one class answers False for its siblings' ancestors."""
    code = (
        "from hycache.components.base import Component\n"
        "from hycache.components.full import FullComponent, PagedKVComponent\n"
        "from hycache.components.recurrent import RecurrentComponent\n"
        "from hycache.memory.unbounded import UnboundedStore\n"
        "from hycache.policy.checkpoint.base import CheckpointPolicy\n"
        "full = FullComponent(UnboundedStore())\n"
        "asked = [isinstance(full, RecurrentComponent), isinstance(full, CheckpointPolicy)]\n"
        "asked += [isinstance(full, PagedKVComponent), isinstance(full, Component)]\n"
        "print(asked, all('_abc_impl' in vars(c) for c in FullComponent.__mro__[:3]))\n"
    )
    assert _run(_fast_python(), code).split() == ["[False,", "False,", "True,", "True]", "True"]


def test_a_parsed_trace_switches_its_keys_in_the_compiled_build() -> None:
    """``ParsedTrace.with_run_keys`` (``benchmarks/simulate_speed.py``) on a compiled class."""
    code = (
        "from hycache.sim.trace_cache import load_trace\n"
        f"parsed = load_trace({str(TRACE)!r}, limit=30)\n"
        "runs, ids = parsed.with_run_keys(True), parsed.with_run_keys(False)\n"
        "print(runs.run_keys, ids.run_keys, len(ids), sum(r.prompt_len for r in ids()))\n"
        "print(len(list(runs())), sum(r.prompt_len for r in runs()))\n"
    )
    fast = _run(_fast_python(), code)
    assert fast == _run(sys.executable, code)
    assert fast.split()[:3] == ["True", "False", "30"]
