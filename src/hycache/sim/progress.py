"""A dependency-free progress bar on stderr (shown only on a terminal unless forced)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """``Progress(total, label)``; call ``advance()``; ``close()`` ends the line."""

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.label = label
        self.done = 0
        self._start = time.monotonic()
        self._last = 0.0

    def advance(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.2 and self.done != self.total:
            return
        self._last = now
        elapsed = now - self._start
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(30 * frac)
            eta = elapsed / frac - elapsed if frac > 0 else 0.0
            count = f"{self.done}/{self.total}"
            text = f"\r{self.label:<24} [{bar:<30}] {count} {elapsed:5.1f}s eta {eta:5.1f}s"
        else:
            text = f"\r{self.label:<24} {self.done} {elapsed:5.1f}s"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
