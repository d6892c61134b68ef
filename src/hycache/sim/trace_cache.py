"""Parsing a trace once: :func:`load_trace`, with an on-disk cache keyed by the file's content.

``load_trace(path)`` reads and validates the trace (``hycache.sim.trace.read_lines``) into a
:class:`~hycache.sim.parsed.ParsedTrace`. With a ``cache_dir`` it first looks there for
``<sha256 of the file's bytes>-<format>-<limit>-v<schema>.trace`` (``ParsedTrace.write``'s
form) and loads that instead of
parsing; a miss is parsed and written (atomically: a temporary file renamed over the target).
The key is the file's content, not its name or date, so an edited trace is parsed again and a
copied one is not; an unreadable or damaged cache file counts as a miss. A malformed trace
raises InputError as ``read_trace`` does, before any request is replayed, and leaves no cache
file behind.

:func:`cached_derived` keeps numbers derived from a trace (the simulator's unlimited footprint)
beside its parsed arrays, in ``<same stem>.derived.json``, under the fingerprint of the code that
derived them (:func:`code_fingerprint`): a value derived by another build of hycache is derived
again, never read. The file keeps the values of the last ``KEEP_BUILDS`` builds that wrote it,
so that two builds used in turn (the pure one and ``make fast``'s) each find their own.

:func:`default_cache_dir`: ``$HYCACHE_CACHE_DIR``, else ``$XDG_CACHE_HOME/hycache/traces``,
else ``~/.cache/hycache/traces``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from hycache.errors import HycacheError, InputError
from hycache.sim.parsed import SCHEMA, ParsedTrace
from hycache.sim.trace import PathLike, read_lines

_CHUNK = 1 << 20
#: builds whose derived values one ``.derived.json`` keeps (the most recent writers)
KEEP_BUILDS = 4


def default_cache_dir() -> Path:
    """Where parsed traces are kept unless told otherwise (see the module docstring)."""
    explicit = os.environ.get("HYCACHE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "hycache" / "traces"


def content_hash(path: PathLike) -> str:
    """SHA-256 of the file's bytes (hex); InputError when it cannot be read."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError as exc:
        raise InputError(os.fspath(path), f"cannot read trace: {exc.strerror or exc}") from None
    return digest.hexdigest()


def cache_name(
    digest: str, trace_format: str | None, limit: int | None, suffix: str = ".trace"
) -> str:
    return (
        f"{digest}-{trace_format or 'auto'}-{'all' if limit is None else limit}-v{SCHEMA}{suffix}"
    )


@functools.cache
def code_fingerprint() -> str:
    """SHA-256 over the paths and bytes of this build's modules (``.py`` and compiled)."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for file in sorted(package.rglob("*")):
        if file.suffix in (".py", ".so", ".pyd") and file.is_file():
            digest.update(file.relative_to(package).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def cached_derived(
    path: PathLike,
    key: str,
    compute: Callable[[], int],
    *,
    cache_dir: PathLike,
    limit: int | None = None,
    trace_format: str | None = None,
) -> int:
    """``compute()``, an integer derived from the first ``limit`` requests of the trace at
    ``path`` and from whatever ``key`` names, read from ``cache_dir`` when this build derived it
    before (see the module docstring); written there otherwise (best effort, atomically)."""
    name = cache_name(content_hash(path), trace_format, limit, ".derived.json")
    target = Path(cache_dir) / name
    code = code_fingerprint()
    builds = _stored_builds(target)
    values = builds.pop(code, {})
    if key in values:
        return values[key]
    value = compute()
    values[key] = value
    kept = [{"code": code, "values": values}]
    kept += [{"code": c, "values": v} for c, v in list(builds.items())[: KEEP_BUILDS - 1]]
    text = json.dumps({"builds": kept}, sort_keys=True)
    _write_atomically(target, lambda handle: handle.write(text.encode()))
    return value


def _stored_builds(target: Path) -> dict[str, dict[str, int]]:
    """The values ``target`` holds per build, most recent writer first; entries that are not
    a fingerprint with integer values are dropped, and a missing or damaged file holds none."""
    try:
        stored = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    entries = stored.get("builds") if isinstance(stored, dict) else None
    builds: dict[str, dict[str, int]] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        code, values = entry.get("code"), entry.get("values")
        if isinstance(code, str) and isinstance(values, dict) and code not in builds:
            builds[code] = {k: v for k, v in values.items() if type(v) is int}
    return builds


def load_trace(
    path: PathLike,
    *,
    limit: int | None = None,
    trace_format: str | None = None,
    cache_dir: PathLike | None = None,
) -> ParsedTrace:
    """The trace at ``path`` parsed (first ``limit`` requests), through ``cache_dir`` if given."""
    if cache_dir is None:
        return ParsedTrace.of(read_lines(path, limit=limit, trace_format=trace_format))
    lines = read_lines(path, limit=limit, trace_format=trace_format)  # checks the arguments
    target = Path(cache_dir) / cache_name(content_hash(path), trace_format, limit)
    cached = _read_cached(target)
    if cached is not None:
        return cached  # ``lines`` never started: no file was opened
    parsed = ParsedTrace.of(lines)
    _write_cached(target, parsed)
    return parsed


def _read_cached(target: Path) -> ParsedTrace | None:
    try:
        with open(target, "rb") as handle:
            return ParsedTrace.read(handle)
    except (OSError, HycacheError):
        return None


def _write_cached(target: Path, parsed: ParsedTrace) -> None:
    """Best effort: a cache that cannot be written is skipped, the parse still counts."""
    _write_atomically(target, parsed.write)


def _write_atomically(target: Path, write: Callable[[IO[bytes]], object]) -> None:
    """``write`` into a temporary file beside ``target``, then renamed over it; best effort: a
    file that cannot be written is skipped."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=".writing-", suffix=target.suffix)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(temp, target)
    except OSError:
        Path(temp).unlink(missing_ok=True)
