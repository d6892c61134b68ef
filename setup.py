"""Optional compiled build: ``HYCACHE_COMPILE=1`` compiles the cache's hot core with mypyc.

Metadata lives in pyproject.toml; this file only adds the extension modules. The compiled
build is the same source, type-checked (mypy strict) and compiled to C; it gives the same
results as the pure-Python one (``tests/test_compiled.py``). ``make fast`` builds it into
``.venv-fast``. A plain ``pip install`` (what ``make run`` and ``make test`` do) compiles
nothing and needs no compiler.

Not compiled: the public facade and the code that builds a cache from user input (presets,
knobs, configs), whose typed errors on bad input must come before any argument reaches
compiled code (which would raise a bare TypeError for a value of the wrong type); the model
spec (its dataclasses check what users give them; its FLOP formulas, ``spec/flops.py``, are
compiled); and everything that drives the cache (the simulator's loops aside: ``sim.replay``,
``sim.serial``, ``sim.sessions``), engine, server and CLI.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

#: folders and modules of ``src/hycache`` compiled when HYCACHE_COMPILE=1
COMPILED = (
    "tree",
    "memory",
    "components",
    "policy",
    "cache",
    "sim/replay.py",
    "sim/serial.py",
    "sim/sessions.py",
    "sim/outcome.py",
    "sim/cost.py",
    "sim/decode_terms.py",
    "sim/request.py",
    "sim/hardware.py",
    "sim/parsed.py",
    "spec/flops.py",
)
#: kept interpreted inside those folders: the checked public entry points, the
#: construction-time code that checks user input (cache presets, knobs, configs) and what
#: mypyc cannot compile
INTERPRETED = (
    "cache/facade.py",
    "cache/validate.py",
    "cache/presets.py",
    "cache/hycache_preset.py",
    "cache/tierpresets.py",
    "cache/knobs.py",
    "cache/config.py",
    "cache/tierconfig.py",
    # generic frozen dataclasses (a bootstrap's outcome), which mypyc does not compile; once
    # per bootstrap, not hot
    "policy/bootstrap.py",
)


def compiled_sources() -> list[str]:
    root = Path(__file__).parent / "src" / "hycache"
    found: list[str] = []
    for entry in COMPILED:
        path = root / entry
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
        for file in files:
            relative = file.relative_to(root).as_posix()
            kept = any(relative.startswith(prefix) for prefix in INTERPRETED)
            if file.name != "__init__.py" and not kept:
                found.append(str(file.relative_to(Path(__file__).parent)))
    return found


def extensions() -> list[object]:
    if os.environ.get("HYCACHE_COMPILE") != "1":
        return []
    from mypyc.build import mypycify  # only the compiled build needs mypy installed

    return list(mypycify(compiled_sources(), opt_level="3"))


setup(ext_modules=extensions())
