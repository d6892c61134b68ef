"""``DiskTier``: one file per object in a directory, LRU within a byte budget.

A write goes to a temporary file named after the writing process (``.tmp-PID-N``) and is
renamed into place (``os.replace``: atomic on POSIX), so a reader sees a whole object or
nothing, and a writer killed between the write and the rename leaves only a temporary file
that no reader looks at (the next tier opened on the directory removes those of dead
processes). A failed write (disk full, quota) removes its temporary file and counts; the
object is simply not stored. Files are checked on every read (``Codec``): a bad one is a
miss, counted and deleted. The directory is one engine's: the LRU order lives in memory,
seeded from the files' modification times when the tier opens.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

from hycache.engine.tiers.base import ObjectKey, TierBackend, TierObject
from hycache.engine.tiers.codec import Codec
from hycache.errors import ConfigError, IntegrityError

SUFFIX = ".obj"
TMP = ".tmp-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DiskTier(TierBackend):
    name = "disk"

    def __init__(self, directory: str | os.PathLike[str], budget_bytes: int, codec: Codec) -> None:
        super().__init__()
        if budget_bytes <= 0:
            raise ConfigError(f"disk tier: budget must be > 0 bytes, got {budget_bytes}")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"disk tier: cannot create {self.directory}: {exc}") from exc
        if not os.access(self.directory, os.W_OK):
            raise ConfigError(f"disk tier: {self.directory} is not writable")
        self.budget_bytes = budget_bytes
        self.codec = codec
        self.used_bytes = 0
        self._files: OrderedDict[str, int] = OrderedDict()
        self._serial = itertools.count()
        self._scan()

    def _scan(self) -> None:
        found: list[tuple[float, str, int]] = []
        for entry in os.scandir(self.directory):
            if entry.name.startswith(TMP):
                pid = entry.name[len(TMP) :].split("-", 1)[0]
                if pid.isdigit() and not _alive(int(pid)):
                    Path(entry.path).unlink(missing_ok=True)
            elif entry.name.endswith(SUFFIX) and entry.is_file():
                stat = entry.stat()
                found.append((stat.st_mtime, entry.name, stat.st_size))
        for _, name, size in sorted(found):
            self._files[name] = size
            self.used_bytes += size
        self._shrink(0)

    def _path(self, key: ObjectKey) -> Path:
        return self.directory / (key.name + SUFFIX)

    def locate(self, keys: Sequence[ObjectKey]) -> list[bool]:
        return [key.name + SUFFIX in self._files for key in keys]

    def get(self, keys: Sequence[ObjectKey]) -> list[TierObject | None]:
        return [self._get(key) for key in keys]

    def _get(self, key: ObjectKey) -> TierObject | None:
        name = key.name + SUFFIX
        if name not in self._files:
            self.counters.misses += 1
            return None
        try:
            blob = self._path(key).read_bytes()
        except OSError:
            self.counters.errors += 1
            self._forget(name)
            return None
        try:
            obj = self.codec.decode(key, blob)
        except IntegrityError:
            self.counters.invalid += 1
            self._forget(name)
            return None
        self._files.move_to_end(name)
        self.counters.hits += 1
        self.counters.bytes_read += len(blob)
        return obj

    def _forget(self, name: str) -> None:
        self.used_bytes -= self._files.pop(name, 0)
        (self.directory / name).unlink(missing_ok=True)

    # ------------------------------------------------------------------ writes
    def stage(self, blob: bytes) -> Path:
        """Write ``blob`` to a new temporary file (invisible to readers); OSError on failure
        (the partial file removed)."""
        tmp = self.directory / f"{TMP}{os.getpid()}-{next(self._serial)}"
        try:
            with open(tmp, "wb") as f:
                f.write(blob)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def commit(self, tmp: Path, key: ObjectKey) -> None:
        """Publish a staged file under ``key`` (atomic rename)."""
        name = key.name + SUFFIX
        os.replace(tmp, self.directory / name)
        size = self._files.pop(name, 0)
        self.used_bytes -= size
        new = (self.directory / name).stat().st_size
        self._files[name] = new
        self.used_bytes += new

    def put(self, objects: Sequence[TierObject]) -> int:
        stored = 0
        for obj in objects:
            name = obj.key.name + SUFFIX
            if name in self._files:
                self._files.move_to_end(name)
                continue
            blob = self.codec.encode(obj)
            if len(blob) > self.budget_bytes:
                self.counters.not_stored += 1
                continue
            self._shrink(len(blob))
            try:
                self.commit(self.stage(blob), obj.key)
            except OSError:
                self.counters.errors += 1
                self.counters.not_stored += 1
                continue
            self.counters.stored += 1
            self.counters.bytes_written += len(blob)
            self.counters.corrupted += self.codec.corrupt
            stored += 1
        return stored

    def _shrink(self, incoming: int) -> None:
        while self._files and self.used_bytes + incoming > self.budget_bytes:
            name = next(iter(self._files))
            self._forget(name)
            self.counters.evictions += 1

    def clear(self) -> None:
        for name in list(self._files):
            self._forget(name)
