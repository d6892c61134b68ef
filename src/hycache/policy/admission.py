"""Admission: store every checkpoint, or only prefixes seen before (cache on second sighting).

A branch checkpoint is admitted by both: the attention match that found the branch already is
a second sighting of the prefix (vLLM's shared-prefix boundary hits from the third sighting).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import OrderedDict

from hycache.compiled import mypyc_attr, own_abc_caches
from hycache.errors import ConfigError


@mypyc_attr(allow_interpreted_subclasses=True)
class AdmissionPolicy(ABC):
    """Decides, at finish, whether a checkpoint is stored. May remember what it has seen."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own_abc_caches(cls)

    #: whether ``admit`` looks at ``sighting`` (else the cache passes b"" and skips hashing)
    uses_sightings: bool = True
    #: keep at most this many states on one root-to-leaf path, the deepest (SGLang's cap;
    #: None: no cap)
    max_states_per_path: int | None = None

    @abstractmethod
    def admit(self, sighting: bytes, reason: str) -> bool:
        """``sighting``: a digest of (namespace, prefix up to the checkpoint)."""


own_abc_caches(AdmissionPolicy)


class AlwaysAdmit(AdmissionPolicy):
    uses_sightings = False

    def __init__(self, *, max_states_per_path: int | None = None) -> None:
        if max_states_per_path is not None and max_states_per_path < 1:
            raise ConfigError(f"max_states_per_path must be >= 1, got {max_states_per_path}")
        self.max_states_per_path = max_states_per_path

    def admit(self, sighting: bytes, reason: str) -> bool:
        return True


class SecondSighting(AdmissionPolicy):
    """Admit a checkpoint only if the same prefix was sighted before (a bounded LRU of digests,
    ``memory`` entries)."""

    def __init__(self, memory: int = 1 << 20) -> None:
        self.memory = memory
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def admit(self, sighting: bytes, reason: str) -> bool:
        if reason == "branch":
            return True
        if sighting in self._seen:
            self._seen.move_to_end(sighting)
            return True
        self._seen[sighting] = None
        if len(self._seen) > self.memory:
            self._seen.popitem(last=False)
        return False
