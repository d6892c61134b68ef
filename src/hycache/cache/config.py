"""``CacheConfig``: the settings of one cache, checked once when it is built."""

from __future__ import annotations

from dataclasses import dataclass

from hycache.errors import ConfigError

#: the default ``spare_slot_share`` (a knob of the ``hycache`` preset, backed by the sweep on
#: the tune split, benchmarks/threshold_sweep.py)
SPARE_SLOT_SHARE = 1 / 8


def _whole(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value}")


def _flag(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")


@dataclass(frozen=True)
class CacheConfig:
    """How a cache runs, apart from its policies (the flags that belong to a policy live in
    it: ``CheckpointPolicy.caches_states`` and ``.offgrid``, ``AdmissionPolicy
    .max_states_per_path``, ``EvictionPolicy.pins_published_state``).

    ``page_size``: tokens per KV page (the tree's grid). ``running_slots``: state slots a
    running request holds. ``token_budget``: default tokens per prefill chunk (None: one
    chunk). ``read_matched_kv``: a request recomputing a state reads the attention KV matched
    past it in place instead of holding pages for it. ``reserve_checkpoint_slot``: a request
    reserves a slot for a shared prefix's missing state with its working set, while a slot is
    at most ``spare_slot_share`` of the budget (in (0, 1]). ``name``: shown in reports."""

    page_size: int
    running_slots: int = 1
    token_budget: int | None = None
    read_matched_kv: bool = False
    reserve_checkpoint_slot: bool = False
    spare_slot_share: float = SPARE_SLOT_SHARE
    name: str = "custom"

    def __post_init__(self) -> None:
        _whole("page_size", self.page_size, minimum=1)
        _whole("running_slots", self.running_slots, minimum=1)
        if self.token_budget is not None:
            _whole("token_budget", self.token_budget, minimum=1)
        for name in ("read_matched_kv", "reserve_checkpoint_slot"):
            _flag(name, getattr(self, name))
        share = self.spare_slot_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
            raise ConfigError(f"spare_slot_share must lie in (0, 1], got {share!r}")
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"name must be a non-empty string, got {self.name!r}")
