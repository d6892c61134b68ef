"""Progress bars on stderr (tqdm, the ``sim`` extra), shown only on a terminal unless forced.

tqdm is imported when a bar is first shown, so that the core library never needs it: a
disabled bar only counts."""

from __future__ import annotations

import sys
from typing import Any, TextIO


class Progress:
    """``Progress(total, label)``; call ``advance()``; ``close()`` ends the line.

    ``enabled`` None: shown when ``stream`` (default stderr) is a terminal. ``unit`` names what
    is counted."""

    def __init__(
        self,
        total: int | None,
        label: str,
        *,
        enabled: bool | None = None,
        stream: TextIO | None = None,
        unit: str = "req",
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.label = label
        self.done = 0
        self._bar: Any = None
        if self.enabled:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=label,
                unit=unit,
                file=self.stream,
                dynamic_ncols=True,
                mininterval=0.2,
                leave=True,
            )

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)

    def note(self, text: str) -> None:
        """Show ``text`` after the counts (the cell just finished, say)."""
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
