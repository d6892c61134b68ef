"""The summary lines of a ``hycache verify`` run with tiers: the ``tiers:`` line with what
each store loaded, refused and lost, and, with several instances, what each reused."""

from __future__ import annotations

from hycache.engine.verify import CellResult


def tier_lines(cells: list[CellResult]) -> list[str]:
    """The summary lines of a run with tiers: one ``tiers: device=N host=N ...`` line (prompt
    tokens reused, by the tier their KV was loaded from), what the stores refused or lost,
    and, with several instances, what the later ones reused of the earlier ones' objects."""
    names: list[str] = []
    for cell in cells:
        names += [n for n in cell.tier_tokens if n not in names]
    totals = {n: sum(c.tier_tokens.get(n, 0) for c in cells) for n in names}
    device = sum(c.reused_tokens for c in cells)
    lines = ["tiers: " + " ".join([f"device={device}", *(f"{n}={v}" for n, v in totals.items())])]
    for name in names:
        counts = [c.tier_counters.get(name, {}) for c in cells]
        total = {k: sum(c.get(k, 0) for c in counts) for k in ("hits", "invalid", "errors")}
        more = {k: sum(c.get(k, 0) for c in counts) for k in ("timeouts", "not_stored")}
        lines.append(
            f"  {name}: {total['hits']} objects loaded, {total['invalid']} refused as invalid "
            f"(deleted, recomputed), {total['errors']} store errors, {more['timeouts']} "
            f"timeouts, {more['not_stored']} not stored"
        )
    return lines


def instance_lines(cells: list[CellResult], instances: int) -> list[str]:
    """Per instance: tokens reused from the tiers, and of them from another instance's objects."""
    lines = [f"instances: {instances} engine processes on one Redis store"]
    for i in range(1, instances + 1):
        mine = [c for c in cells if c.instance == i]
        from_tiers = sum(sum(c.tier_tokens.values()) for c in mine)
        foreign = sum(c.foreign_tokens for c in mine)
        lines.append(
            f"  instance {i}: {sum(c.reused_tokens for c in mine)} tokens from its device, "
            f"{from_tiers} from the tiers, of which {foreign} from objects another instance "
            "wrote"
        )
    return lines
