"""Tiers in ``hycache verify``: ``TierRun`` (how one cell's chain is built: settings, its
own disk directory, the Redis key prefix it shares with the other instances of the same
cell, the writer id) and ``tier_totals`` (what the chain counted, onto the cell).

With a store fault injected (``TIER_INJECTS``) every disk and Redis object is stored
damaged: ``stored`` counts them, ``fired`` the reads that met one (refused by the checksum,
or, with ``no-checksum``, loaded into the model).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hycache.engine.tiers.config import TierSettings, build_chain
from hycache.engine.tiers.fingerprint import model_identity

if TYPE_CHECKING:
    from hycache.engine.model import LoadedModel
    from hycache.engine.tiers.chain import TierChain

#: the tiers whose objects a store fault damages
STORES = ("disk", "redis")


@dataclass(frozen=True)
class TierRun:
    """One cell's tiers: ``settings``, the disk tier's ``directory``, the Redis ``prefix``,
    this instance's ``writer`` id; ``clear_after``: drop the cell's objects at its end (the
    last instance of a cell)."""

    settings: TierSettings
    directory: Path
    prefix: str
    writer: str = "instance-1"
    clear_after: bool = True

    def build(self, model: LoadedModel, page: int, inject: str | None) -> TierChain:
        from hycache.engine.tiers.config import TIER_INJECTS

        return build_chain(
            self.settings,
            model_identity(model, page),
            disk_dir=self.directory,
            prefix=self.prefix,
            writer=self.writer,
            inject=inject if inject in TIER_INJECTS else None,
        )


@dataclass(frozen=True)
class TierTotals:
    """What a cell's chain counted: tokens per tier, of them from another instance's
    objects, each tier's counters; for a store fault, damaged objects stored and met."""

    tokens: dict[str, int]
    foreign: int
    counters: dict[str, dict[str, int]]
    stored: int = 0
    fired: int = 0


def tier_totals(chain: TierChain, inject: str | None) -> TierTotals:
    """The chain's counts (the fault counts too, for a store fault)."""
    from hycache.engine.tiers.config import TIER_INJECTS

    counters = chain.counters()
    stored = fired = 0
    if inject in TIER_INJECTS:
        stores = [c for name, c in counters.items() if name in STORES]
        stored = sum(c.corrupted for c in stores)
        if inject == "no-checksum":
            fired = sum(c.hits for c in stores)
        else:
            fired = sum(c.invalid for c in stores)
    return TierTotals(
        dict(chain.hit_tokens),
        chain.foreign_tokens,
        {name: asdict(c) for name, c in counters.items()},
        stored,
        fired,
    )
