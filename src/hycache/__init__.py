"""hycache: a prefix cache for hybrid LLMs (full attention, sliding window, recurrent layers).

The entry points: :class:`HybridPrefixCache` (the request lifecycle an engine drives),
:func:`build_cache` (a cache configured like vLLM, SGLang, Marconi or hycache) and
:class:`ModelSpec` (what a model's layers cost).
"""

from hycache.cache.facade import HybridPrefixCache
from hycache.cache.presets import build_cache
from hycache.spec.model import ModelSpec

__version__ = "0.1.0"
__all__ = ["HybridPrefixCache", "ModelSpec", "build_cache"]
