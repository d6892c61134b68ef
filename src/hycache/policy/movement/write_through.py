"""``write_through``: every inserted KV page and state is copied to the host at insert time
(SGLang HiCache's write_through); a device eviction then demotes whatever the host lost
meanwhile, as ``write_back`` would."""

from __future__ import annotations

from hycache.policy.movement.write_back import WriteBack


class WriteThrough(WriteBack):
    """Copy at insert, demote on eviction."""

    name = "write_through"

    def writes_through(self) -> bool:
        return True
