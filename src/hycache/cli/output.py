"""Output files of the command line (``--json``, ``--report``): checked first, written atomically.

``output_arg`` is an argparse ``type=`` callable, so a path that can never be written is an
argparse error (exit 2, the option named) before any work starts: the path must not be a
directory nor end with a separator, its parent must be an existing, writable directory, and an
existing file there must be a writable regular file. ``write_atomically`` writes a temporary
file in the same directory and renames it over the target with ``os.replace``: readers see the
old file or the whole new one, and a failure part-way leaves neither a partial target nor the
temporary file behind.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from hycache.errors import ConfigError


def check_output_path(text: str) -> Path:
    """``text`` as a Path a file can be written to; ConfigError naming it and why not."""
    if not text.strip():
        raise ConfigError("output path is empty")
    if text.endswith(("/", os.sep)):
        raise ConfigError(f"{text}: names a directory; give a file path")
    path = Path(text)
    if path.is_dir():
        raise ConfigError(f"{text}: is a directory; give a file path")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{text}: exists and is not a regular file")
    if path.is_file() and not os.access(path, os.W_OK):
        raise ConfigError(f"{text}: exists and is not writable")
    parent = path.parent
    if not parent.is_dir():
        raise ConfigError(f"{text}: directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{text}: directory {str(parent)!r} is not writable")
    return path


def output_arg(text: str) -> Path:
    """argparse ``type=`` for an output file option."""
    try:
        return check_output_path(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_distinct(paths: dict[str, Path | None]) -> None:
    """ConfigError when two output options name the same file (``{option: path}``)."""
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path is None:
            continue
        resolved = path.resolve()
        if resolved in seen:
            raise ConfigError(f"{option} and {seen[resolved]} name the same file {str(path)!r}")
        seen[resolved] = option


def _file_mode(path: Path) -> int:
    """The mode a plain ``open(path, "w")`` would give: the existing file's, else 0o666 less
    the umask (``mkstemp`` alone would leave 0o600)."""
    if path.is_file():
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: Path, text: str | Iterable[str]) -> None:
    """Write ``text`` (a string or pieces of one) to ``path`` via a temporary file in the same
    directory and ``os.replace``. On any failure the temporary file is removed and ``path`` is
    left as it was; an OSError becomes a ConfigError naming the path, others propagate."""
    try:
        mode = _file_mode(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for piece in [text] if isinstance(text, str) else text:
                handle.write(piece)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"{path}: cannot write: {exc.strerror or exc}") from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
