"""hycache: a prefix cache for hybrid LLMs (full attention, sliding window, recurrent layers).

The entry points: :class:`HybridPrefixCache` (the request lifecycle an engine drives),
:func:`build_cache` (a cache configured like vLLM, SGLang, Marconi or hycache) and
:class:`ModelSpec` (what a model's layers cost).
"""

from hycache.cache.config import CacheConfig
from hycache.cache.facade import HybridPrefixCache
from hycache.cache.lease import FinishResult, Lease, PageRef, PublishResult, Wait
from hycache.cache.presets import build_cache
from hycache.cache.stats import CacheStats
from hycache.errors import (
    ArgumentError,
    CacheUsageError,
    CapacityError,
    ConfigError,
    HycacheError,
    InputError,
    IntegrityError,
    ScenarioError,
    SpecError,
)
from hycache.spec.model import ModelSpec

__version__ = "0.1.0"
__all__ = [
    "ArgumentError",
    "CacheConfig",
    "CacheStats",
    "CacheUsageError",
    "CapacityError",
    "ConfigError",
    "FinishResult",
    "HybridPrefixCache",
    "HycacheError",
    "InputError",
    "IntegrityError",
    "Lease",
    "ModelSpec",
    "PageRef",
    "PublishResult",
    "ScenarioError",
    "SpecError",
    "Wait",
    "build_cache",
]
